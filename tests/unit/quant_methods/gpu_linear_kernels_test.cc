// The GPU backend's linear kernels as data (src/quant/methods/gpu_linear_kernels.h): the table
// GpuLinear::from dispatches on, the CUDA kernels every method declares from it (only in a build
// with the CUDA backend), and which compiled architectures run on which GPU. No GPU is needed:
// GpuLinear::from and `lowbit methods` call the same classifier, so checking it here checks both.
#include <gtest/gtest.h>

#include "lowbit/quant_method.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"

namespace lowbit::quant {
namespace {

const char* kernel_name(GpuLinearKernel k) {
  return k == GpuLinearKernel::None ? "none" : nullptr;
}

std::string choose(const GpuLinearCase& c) {
  const GpuLinearKernel k = choose_gpu_linear(c).kernel;
  return kernel_name(k) != nullptr ? kernel_name(k) : gpu_linear_kernel_spec(k).name;
}

std::vector<std::string> gpu_kernels_of(const MethodDescription& d) {
  std::vector<std::string> names;
  for (const KernelSpec& k : d.kernels) {
    if (k.isa == KernelSpec::Isa::Cuda) names.push_back(k.name);
  }
  return names;
}

// The table of gpu_linear_kernels.h, case by case.
TEST(GpuLinearKernels, TableOfTheDispatch) {
  std::map<std::string, std::string> expected = {
      {"int4 weights (W4A16)", "wna16_cuda"},
      {"int8 weights (W8A16)", "wna16_cuda"},
      {"int2 / int3 weights", "bf16_cuda"},
      {"int4 weights x fp8 inputs (W4AFP8)", "none"},
      {"int8 weights x dynamic int8 inputs (W8A8)", "w8a8_int8_cuda"},
      {"int8 weights x static int8 inputs", "w8a8_int8_cuda"},
      {"int4 weights x int8 inputs (W4A8)", "w8a8_int8_cuda"},
      {"fp8 weights (weight-only)", "bf16_cuda"},
      {"fp8 weights x dynamic fp8 inputs (FP8_DYNAMIC)", "w8a8_fp8_cuda"},
      {"fp8 weights x static fp8 inputs (FP8)", "w8a8_fp8_cuda"},
      {"fp8 block weights x 1x128 fp8 inputs (FP8_BLOCK)", "w8a8_fp8_cuda"},
      {"weights dequantized at load (fp4, mx, ...)", "bf16_cuda"},
      {"dequantized weights x fp8 inputs", "none"},
      {"GGUF tensors decoded to float at load", "bf16_cuda"},
  };
  for (const CpuKernelCase& c : cpu_kernel_cases()) {
    ASSERT_EQ(expected.count(c.scheme), 1u) << c.scheme;
    EXPECT_EQ(choose(c.layer), expected[c.scheme]) << c.cpu_kernel << ": " << c.scheme;
    expected.erase(c.scheme);
  }
  EXPECT_TRUE(expected.empty());

  // What GpuLinear::from refuses, with the reason its Unsupported message carries.
  GpuLinearCase other;
  other.weights = GpuLinearCase::Weights::Other;
  EXPECT_EQ(choose_gpu_linear(other).why_not, "this quantization method has no GPU kernel");
  InputQuant fp8_group;
  fp8_group.args.type = QuantType::Float;
  fp8_group.args.strategy = Strategy::Group;
  fp8_group.args.group_size = 128;
  fp8_group.args.dynamic = DynamicMode::Dynamic;
  GpuLinearCase uneven;
  uneven.weights = GpuLinearCase::Weights::Fp8;
  uneven.input = &fp8_group;
  uneven.cols = 4096 + 64;  // a tensor-parallel part the 128-wide groups do not divide
  EXPECT_EQ(choose(uneven), "none");
  EXPECT_NE(choose_gpu_linear(uneven).why_not.find("fp8 weights with float8 group dynamic inputs"),
            std::string::npos)
      << choose_gpu_linear(uneven).why_not;
}

TEST(GpuLinearKernels, SpecsSayWhatTheirCodeNeeds) {
  for (const KernelSpec& k : gpu_linear_kernel_specs()) {
    EXPECT_EQ(k.isa, KernelSpec::Isa::Cuda) << k.name;
    // bf16 everywhere around the products (mma.sync bf16, cuBLASLt bf16): Ampere and later.
    EXPECT_EQ(k.min_capability, k.name == "w8a8_fp8_cuda" ? 89 : 80) << k.name;
  }
  Platform a100, h100;
  a100.cuda_capability = 80;
  h100.cuda_capability = 90;
  const KernelSpec fp8 = gpu_linear_kernel_spec(GpuLinearKernel::W8a8Fp8);
  EXPECT_FALSE(fp8.runs_on(a100));
  EXPECT_TRUE(fp8.runs_on(h100));
  EXPECT_TRUE(gpu_linear_kernel_spec(GpuLinearKernel::Wna16).runs_on(a100));
}

// A real layer, loaded as on `--device cuda` (canonical weights kept): the case GpuLinear::from
// reads, and the kernel it picks, which the method declares (in a build with the backend).
TEST(GpuLinearKernels, RealLayersGetTheKernelTheirMethodDeclares) {
  KernelLinear::set_keep_canonical_weights(true);
  LayerInfo info;
  info.prefix = "model.layers.0.mlp.down_proj";
  info.out_features = 8;
  info.in_features = 256;
  info.params_dtype = DType::F32;
  std::vector<float> w(static_cast<size_t>(info.out_features * info.in_features));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 37) % 17) / 16.0f - 0.5f;
  const Tensor weight = Tensor::from_f32(w.data(), {info.out_features, info.in_features}, DType::F32);
  for (const auto& [method, expected] : std::vector<std::pair<std::string, std::string>>{
           {"fp8_per_tensor", "w8a8_fp8_cuda"},
           {"fp8_per_block", "w8a8_fp8_cuda"},
           {"fp8_per_channel", "w8a8_fp8_cuda"}}) {
    const std::unique_ptr<QuantizationConfig> config =
        make_quantization_config(method, nlohmann::json::object(), "test");
    std::unique_ptr<LinearMethod> lm = config->get_quant_method(info);
    ASSERT_NE(lm, nullptr) << method;
    LayerParams params(info);
    lm->create_weights(params);
    params.set("weight", weight);
    lm->process_weights_after_loading(params);
    const auto* kl = dynamic_cast<const KernelLinear*>(lm.get());
    ASSERT_NE(kl, nullptr) << method;
    const GpuLinearCase c = gpu_linear_case(*kl, info.in_features);
    EXPECT_EQ(c.weights, GpuLinearCase::Weights::Fp8) << method;
    ASSERT_NE(c.input, nullptr) << method;
    EXPECT_EQ(choose(c), expected) << method;
    const std::vector<std::string> declared = gpu_kernels_of(config->describe());
    if (cuda_backend_built()) {
      EXPECT_NE(std::find(declared.begin(), declared.end(), expected), declared.end()) << method;
    } else {
      EXPECT_TRUE(declared.empty()) << method;
    }
  }
  KernelLinear::set_keep_canonical_weights(false);
}

// Every method declares exactly the GPU kernels the classifier gives the layers of its CPU
// kernels; none without the CUDA backend. (Methods registered by other tests of this binary, with
// hand-written kernel lists like registry_test.cc's "test_hopper_only", are not derived.)
TEST(GpuLinearKernels, MethodsDeclareTheDerivedGpuKernels) {
  for (const std::string& name : registered_quantizations()) {
    if (name.rfind("test_", 0) == 0) continue;
    const MethodDescription d = describe_quantization(name);
    const std::vector<std::string> gpu = gpu_kernels_of(d);
    if (!cuda_backend_built()) {
      EXPECT_TRUE(gpu.empty()) << name;
      continue;
    }
    for (const KernelSpec& k : d.kernels) {
      if (k.isa != KernelSpec::Isa::Cuda) continue;
      EXPECT_EQ(k.min_capability, gpu_linear_kernel_spec(k.name == "w8a8_fp8_cuda"
                                                             ? GpuLinearKernel::W8a8Fp8
                                                             : GpuLinearKernel::Bf16)
                                      .min_capability)
          << name << " " << k.name;
    }
  }
  if (!cuda_backend_built()) return;
  using V = std::vector<std::string>;
  EXPECT_EQ(gpu_kernels_of(describe_quantization("compressed-tensors")),
            (V{"wna16_cuda", "w8a8_int8_cuda", "w8a8_fp8_cuda", "bf16_cuda"}));
  EXPECT_EQ(gpu_kernels_of(describe_quantization("gptq")), (V{"wna16_cuda", "bf16_cuda"}));
  EXPECT_EQ(gpu_kernels_of(describe_quantization("fp8")), (V{"w8a8_fp8_cuda", "bf16_cuda"}));
  // bitsandbytes: LLM.int8() as W8A16 (its input decomposition is CPU-only), 4-bit in bf16.
  EXPECT_EQ(gpu_kernels_of(describe_quantization("bitsandbytes")), (V{"wna16_cuda", "bf16_cuda"}));
  EXPECT_EQ(gpu_kernels_of(describe_quantization("deepspeedfp")), (V{"bf16_cuda"}));
  // GGUF: Q4_0 / Q8_0 projections on W4A16 / W8A16, the other types decoded to bf16.
  EXPECT_EQ(gpu_kernels_of(describe_quantization("gguf")), (V{"wna16_cuda", "bf16_cuda"}));
  EXPECT_TRUE(gpu_kernels_of(describe_quantization("fp8_vit_attn")).empty());
  // MoE experts only: the GPU backend runs no MoE model.
  EXPECT_TRUE(gpu_kernels_of(describe_quantization("int8_per_channel_weight_only")).empty());
}

TEST(GpuLinearKernels, CompiledArchitecturesDecideWhatRunsOnAGpu) {
  const std::vector<std::string> hopper = {"90a"};  // the default build
  EXPECT_EQ(cuda_code_capability(90, hopper), 90);
  EXPECT_EQ(cuda_code_capability(80, hopper), -1);
  EXPECT_EQ(cuda_code_capability(89, hopper), -1);
  EXPECT_EQ(cuda_code_capability(100, hopper), -1);  // sm_90a code runs on sm_90 only
  const std::vector<std::string> wide = {"80", "89", "90a"};
  EXPECT_EQ(cuda_code_capability(80, wide), 80);
  EXPECT_EQ(cuda_code_capability(86, wide), 80);
  EXPECT_EQ(cuda_code_capability(89, wide), 89);
  EXPECT_EQ(cuda_code_capability(90, wide), 90);
  EXPECT_EQ(cuda_code_capability(100, wide), 89);  // compute_89 PTX, JIT-compiled
  EXPECT_EQ(cuda_code_capability(75, wide), -1);
  EXPECT_EQ(cuda_code_capability(89, {"80-real"}), 80);
  EXPECT_EQ(cuda_code_capability(90, {"80-real"}), -1);
  EXPECT_EQ(cuda_code_capability(90, {"80-virtual"}), 80);
  EXPECT_EQ(cuda_code_capability(103, {"100f"}), 100);
  EXPECT_EQ(cuda_code_capability(86, {"native"}), 86);
  EXPECT_EQ(cuda_code_capability(-1, wide), -1);

  // On this machine (Platform::current()), a kernel runs only where the binary holds code for it.
  const KernelSpec fp8 = gpu_linear_kernel_spec(GpuLinearKernel::W8a8Fp8);
  Platform ada;
  ada.cuda_capability = 89;
  ada.cuda_binary_capability = 80;  // an "80" build: its sm_80 code has no e4m3 GEMV
  EXPECT_NE(fp8.missing_on(ada).find("this binary's sm_80 code"), std::string::npos)
      << fp8.missing_on(ada);
  EXPECT_TRUE(gpu_linear_kernel_spec(GpuLinearKernel::Wna16).runs_on(ada));
  Platform a100;
  a100.cuda_capability = 80;
  a100.cuda_binary_capability = -1;  // the default sm_90a build on an A100
  EXPECT_NE(gpu_linear_kernel_spec(GpuLinearKernel::Wna16).missing_on(a100).find("no GPU code"),
            std::string::npos);
  EXPECT_NE(a100.describe().find("this binary has no GPU code for it"), std::string::npos);
}

}  // namespace
}  // namespace lowbit::quant
