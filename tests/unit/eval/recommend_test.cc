// lowbit recommend's building blocks: the GPU catalogue, scheme facts and hardware verdicts, what
// the method registry runs, and model sizes (recommend_tree_test.cc tests the decision tree).
//
// Expected capabilities and memory from NVIDIA's compute-capability table and datasheets; expected bits per weight from
// the compressed-tensors preset definitions worked out by hand (codes + scale bits / group).
#include <gtest/gtest.h>

#include "eval/recommend.h"
#include "lowbit/error.h"
#include "quant/methods/gpu_linear_kernels.h"

namespace lowbit::eval {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

HostTarget test_host() {
  HostTarget h;
  h.platform.x86 = h.platform.avx2 = h.platform.avx512 = true;
  h.memory_bytes = 64 * kGiB;
  h.description = "test host";
  return h;
}

// ---- catalogue ----------------------------------------------------------------------------------

TEST(GpuCatalog, FindsByNameAndAlias) {
  const auto h100 = find_gpu("H100");
  ASSERT_TRUE(h100);
  EXPECT_EQ(h100->capability, 90);
  EXPECT_EQ(h100->memory_gb, 80);
  EXPECT_EQ(h100->architecture, "Hopper");
  const auto a100_40 = find_gpu("NVIDIA A100-SXM4-40GB");  // nvidia-smi's spelling
  ASSERT_TRUE(a100_40);
  EXPECT_EQ(a100_40->name, "A100-40GB");
  EXPECT_EQ(a100_40->memory_gb, 40);
  EXPECT_EQ(find_gpu("geforce rtx 4090")->capability, 89);
  EXPECT_EQ(find_gpu("GB300")->capability, 103);
  EXPECT_EQ(find_gpu("GB300")->memory_gb, 288);
  EXPECT_EQ(find_gpu("rtx-5090")->capability, 120);
  EXPECT_EQ(find_gpu("L4")->capability, 89);
  EXPECT_EQ(find_gpu("A10")->capability, 86);
  const auto mi300 = find_gpu("AMD Instinct MI300X");
  ASSERT_TRUE(mi300);
  EXPECT_EQ(mi300->vendor, GpuVendor::Amd);
  EXPECT_TRUE(mi300->amd_fp8);
  EXPECT_FALSE(mi300->amd_mx);
  EXPECT_FALSE(find_gpu("H999"));
  EXPECT_FALSE(find_gpu(""));
  EXPECT_NE(known_gpu_names().find("RTX 3090"), std::string::npos);
}

TEST(GpuCatalog, ParsesNvidiaSmi) {
  const auto gpus = parse_nvidia_smi("NVIDIA H100 80GB HBM3, 81559, 9.0\n"
                                     "NVIDIA H100 80GB HBM3, 81559, 9.0\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "H100");
  EXPECT_EQ(gpus[0].capability, 90);
  EXPECT_NEAR(gpus[0].memory_gb, 81559.0 / 1024, 1e-9);  // the detected MiB win
  const auto unknown = parse_nvidia_smi("NVIDIA Future GPU, 16384, 8.6\n");
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].name, "NVIDIA Future GPU");
  EXPECT_EQ(unknown[0].capability, 86);
  EXPECT_EQ(unknown[0].architecture, "Ampere");
  EXPECT_THROW(parse_nvidia_smi("garbage\n"), InvalidArgument);
  EXPECT_THROW(parse_nvidia_smi("NVIDIA Future GPU, 16384, [N/A]\n"), InvalidArgument);
  EXPECT_THROW(parse_nvidia_smi("NVIDIA H100, lots, 9.0\n"), InvalidArgument);
}

// ---- schemes ------------------------------------------------------------------------------------

TEST(SchemeFacts, BitsAndKernelsFollowThePresets) {
  // int4 + one bf16 scale per 128; + a packed 4-bit zero point per 128; fp4 + fp8 scale per 16;
  // fp4 + E8M0 scale per 32; fp8 per channel.
  EXPECT_DOUBLE_EQ(scheme_facts("W4A16").bits_per_weight, 4 + 16.0 / 128);
  EXPECT_DOUBLE_EQ(scheme_facts("w4a16_asym").bits_per_weight, 4 + 16.0 / 128 + 4.0 / 128);
  EXPECT_DOUBLE_EQ(scheme_facts("NVFP4").bits_per_weight, 4.5);
  EXPECT_DOUBLE_EQ(scheme_facts("MXFP4").bits_per_weight, 4.25);
  EXPECT_DOUBLE_EQ(scheme_facts("FP8_DYNAMIC").bits_per_weight, 8);
  EXPECT_EQ(scheme_facts("W4A16").cpu_kernel, "wna16");
  EXPECT_EQ(scheme_facts("W8A8").cpu_kernel, "w8a8");
  EXPECT_EQ(scheme_facts("FP8_DYNAMIC").cpu_kernel, "fp8");
  EXPECT_EQ(scheme_facts("NVFP4").cpu_kernel, "dequant");
  EXPECT_FALSE(scheme_facts("W4A16").quantizes_activations());
  EXPECT_TRUE(scheme_facts("W8A8").quantizes_activations());
  EXPECT_FALSE(scheme_facts("FP8_DYNAMIC").calibrated_activations);  // dynamic per token
  EXPECT_TRUE(scheme_facts("FP8").calibrated_activations);           // static per tensor
  EXPECT_THROW(scheme_facts("W3A99"), InvalidArgument);
}

TEST(SchemeSupport, CapabilityDecidesWhatTheGpuComputes) {
  auto runs = [](const char* scheme, const char* gpu) {
    return target_support(scheme_facts(scheme), *find_gpu(gpu));
  };
  const Support nvfp4_hopper = runs("NVFP4", "H100");
  EXPECT_FALSE(nvfp4_hopper.runs);
  EXPECT_NE(nvfp4_hopper.reason.find("Blackwell"), std::string::npos) << nvfp4_hopper.reason;
  EXPECT_NE(nvfp4_hopper.reason.find("sm_90"), std::string::npos) << nvfp4_hopper.reason;
  EXPECT_TRUE(runs("NVFP4", "B200").runs);
  EXPECT_TRUE(runs("NVFP4", "RTX 5090").runs);
  const Support fp8_ampere = runs("FP8_DYNAMIC", "A100");
  EXPECT_FALSE(fp8_ampere.runs);
  EXPECT_NE(fp8_ampere.reason.find("FP8 tensor cores"), std::string::npos) << fp8_ampere.reason;
  EXPECT_NE(fp8_ampere.reason.find("sm_80"), std::string::npos) << fp8_ampere.reason;
  EXPECT_TRUE(runs("FP8_DYNAMIC", "L40S").runs);  // Ada sm_89
  EXPECT_TRUE(runs("FP8_DYNAMIC", "B200").runs);
  EXPECT_TRUE(runs("W8A8", "A100").runs);         // INT8 tensor cores since Turing
  EXPECT_TRUE(runs("W4AFP8", "H100").runs);
  EXPECT_FALSE(runs("W4AFP8", "L40S").runs);      // vLLM's kernel is sm_90 only
  EXPECT_FALSE(runs("W4A16", "V100").runs);
  const Support pascal = runs("W4A16", "P100");
  EXPECT_FALSE(pascal.runs);
  EXPECT_NE(pascal.reason.find("registry"), std::string::npos) << pascal.reason;
  EXPECT_TRUE(runs("MXFP4", "MI355X").runs);
  EXPECT_FALSE(runs("MXFP4", "MI300X").runs);
  EXPECT_FALSE(runs("NVFP4", "MI355X").runs);
  EXPECT_TRUE(runs("FP8_DYNAMIC", "MI300X").runs);
  EXPECT_FALSE(runs("FP8_DYNAMIC", "MI250X").runs);
}

TEST(SchemeSupport, RegistryKernelsSayWhatLowbitRuns) {
  // A GPU gets the kernel GpuLinear::from picks, where the build has the CUDA backend.
  const quant::Platform h100 = gpu_platform(*find_gpu("H100"));
  const LowbitKernel gpu = lowbit_kernel(scheme_facts("W4A16"), h100);
  if (quant::cuda_backend_built()) {
    EXPECT_EQ(gpu.kernel, "wna16_cuda") << gpu.text;
    EXPECT_EQ(lowbit_kernel(scheme_facts("W8A8"), h100).kernel, "w8a8_int8_cuda");
    EXPECT_EQ(lowbit_kernel(scheme_facts("FP8_DYNAMIC"), h100).kernel, "w8a8_fp8_cuda");
    EXPECT_EQ(lowbit_kernel(scheme_facts("FP8_BLOCK"), h100).kernel, "w8a8_fp8_cuda");
    const LowbitKernel nvfp4a16 = lowbit_kernel(scheme_facts("NVFP4A16"), h100);
    EXPECT_EQ(nvfp4a16.kernel, "bf16_cuda");
    EXPECT_TRUE(nvfp4a16.dequant_only);
    // W4AFP8 (int weights x fp8 inputs) and NVFP4 (fp4 inputs) have no GPU kernel.
    EXPECT_TRUE(lowbit_kernel(scheme_facts("W4AFP8"), h100).kernel.empty());
    EXPECT_TRUE(lowbit_kernel(scheme_facts("NVFP4"), h100).kernel.empty());
    // FP8 W8A8 needs e4m3 tensor cores: not on an A100.
    const LowbitKernel a100 = lowbit_kernel(scheme_facts("FP8_DYNAMIC"),
                                            gpu_platform(*find_gpu("A100")));
    EXPECT_TRUE(a100.kernel.empty());
    EXPECT_NE(a100.text.find("w8a8_fp8_cuda needs compute capability in [89"), std::string::npos)
        << a100.text;
  } else {
    EXPECT_TRUE(gpu.kernel.empty());
    EXPECT_NE(gpu.text.find("built without the CUDA backend"), std::string::npos) << gpu.text;
  }
  const HostTarget host = test_host();
  EXPECT_EQ(lowbit_kernel(scheme_facts("W4A16"), host.platform).kernel, "wna16");
  EXPECT_EQ(lowbit_kernel(scheme_facts("W8A8"), host.platform).kernel, "w8a8");
  const LowbitKernel fp4 = lowbit_kernel(scheme_facts("NVFP4"), host.platform);
  EXPECT_EQ(fp4.kernel, "dequant");
  EXPECT_TRUE(fp4.dequant_only);
}

// ---- model sizes --------------------------------------------------------------------------------

TEST(ModelSize, ParsesCountsAndDirectories) {
  const ModelShape m70 = parse_model_params("70B", "--model-params");
  EXPECT_DOUBLE_EQ(m70.params, 70e9);
  EXPECT_EQ(m70.layers, 80);  // Llama-3.1-70B's config
  EXPECT_TRUE(m70.assumed_shape);
  EXPECT_EQ(parse_model_params("8e9", "--model-params").layers, 32);
  EXPECT_EQ(parse_model_params("405b", "--model-params").layers, 126);
  EXPECT_EQ(parse_model_params("1.5B", "--model-params").layers, 16);
  EXPECT_DOUBLE_EQ(parse_model_params("8000000000", "--model-params").params, 8e9);
  for (const char* bad : {"abc", "70X", "-5B", "", "70", "models/nope"}) {
    try {
      parse_model_params(bad, "--model-params");
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--model-params"), std::string::npos) << e.what();
    }
  }
  // The embedded model: 8192 x 384 embeddings and LM head (untied), 8 layers of q/o 384x384,
  // k/v 384x128, MLP 3 x 384x1024, two norms of 384, and the final norm.
  const ModelShape ref =
      parse_model_params(std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m", "--model-params");
  EXPECT_DOUBLE_EQ(ref.params, 2.0 * 8192 * 384 +
                                   8 * (2.0 * 384 * 384 + 2.0 * 384 * 128 + 3.0 * 384 * 1024 +
                                        2 * 384) +
                                   384);
  EXPECT_FALSE(ref.assumed_shape);
  EXPECT_EQ(ref.layers, 8);
  EXPECT_EQ(ref.kv_heads, 2);
  EXPECT_EQ(ref.head_dim, 64);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(ref, 2), 2.0 * 8 * 2 * 64 * 2);
}

}  // namespace
}  // namespace lowbit::eval
