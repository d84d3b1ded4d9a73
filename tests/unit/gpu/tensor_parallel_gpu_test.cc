// Tensor parallelism on two GPUs (GpuModelOptions::tensor_parallel_size = 2) against the same model
// on one GPU, the CPU and transformers' goldens: bf16, fp8 (per-channel weights, dynamic per-token
// inputs) and W4A16 (group 64) checkpoints of the embedded model. Every test skips unless two CUDA
// devices are visible.
//
// Tolerances. Two GPUs compute the same sums as one, except that o_proj's and down_proj's partial
// sums are each rounded to bf16 before NCCL adds them (one more bf16 rounding, 2^-9 relative, of
// two layer outputs per block): noise of the size of the bf16 noise gpu_model_test.cc measured in
// transformers itself, so the same 0.03 · max |logit| and argmax rule apply (logit_compare.h). FP8
// per-token input scales of those two layers are taken over each GPU's half of the input, so their
// fp8 roundings change: the difference is bounded by the fp8 quantization error itself, i.e. by
// how far the fp8 model's logits are from the bf16 model's (measured in the same test), or the
// bf16 bound if that is larger.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "gpu/gpu_model.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "../../cli/cli_runner.h"
#include "logit_compare.h"

namespace lowbit::gpu {
namespace {

namespace fs = std::filesystem;
using lowbit::testing::run_lowbit;

const fs::path kSourceDir = LOWBIT_SOURCE_DIR;
const fs::path kModelDir = kSourceDir / "models/ref-llama-19m";

#define SKIP_WITHOUT_TWO_DEVICES() \
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices"

std::shared_ptr<formats::SafetensorsFile> goldens() {
  return formats::SafetensorsFile::open(
      (kSourceDir / "tests/golden/ref-llama-19m/reference_logits.safetensors").string());
}

std::vector<int32_t> prompt_ids(const formats::SafetensorsFile& golden, int p) {
  const Tensor t = golden.get("prompt" + std::to_string(p) + ".input_ids");
  const int64_t* data = t.data_as<const int64_t>();
  return std::vector<int32_t>(data, data + t.numel());
}

std::unique_ptr<GpuModel> load(const models::Model& cpu, int tp) {
  GpuModelOptions options;
  options.tensor_parallel_size = tp;
  options.max_seq_len = 512;
  return GpuModel::load(cpu, options);
}

// Prefill logits of every position, then the same positions as decode steps (CUDA graphs).
struct Logits {
  Tensor prefill;
  std::vector<Tensor> steps;
};

Logits run(GpuModel& gpu, const std::vector<int32_t>& ids) {
  Logits r;
  GpuSequence seq = gpu.new_sequence();
  r.prefill = gpu.forward(ids, seq, /*all_logits=*/true);
  seq.clear();
  for (size_t t = 0; t < ids.size(); ++t) {
    r.steps.push_back(gpu.forward(std::span<const int32_t>(&ids[t], 1), seq, false));
  }
  return r;
}

double max_relative_difference(const Tensor& a, const Tensor& b) {
  const float* x = a.data_as<const float>();
  const float* y = b.data_as<const float>();
  float max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    max_abs = std::max(max_abs, std::fabs(y[i]));
    max_diff = std::max(max_diff, std::fabs(x[i] - y[i]));
  }
  return max_diff / max_abs;
}

// Two GPUs against one on the golden prompts: prefill rows and decode steps.
void expect_tp2_matches_tp1(const models::Model& cpu, double tolerance, const std::string& what,
                            float margin = kMarginForArgmax) {
  auto one = load(cpu, 1);
  auto two = load(cpu, 2);
  EXPECT_EQ(two->tensor_parallel_size(), 2);
  EXPECT_NE(two->describe().find("tensor parallel x 2"), std::string::npos) << two->describe();
  const auto golden = goldens();
  const int64_t vocab = cpu.config().vocab_size;
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> ids = prompt_ids(*golden, p);
    const Logits a = run(*one, ids), b = run(*two, ids);
    EXPECT_EQ(compare_rows(b.prefill.data_as<const float>(), a.prefill.data_as<const float>(),
                           a.prefill.dim(0), vocab, tolerance, margin),
              "")
        << what << " prompt " << p << " prefill";
    for (size_t t = 0; t < ids.size(); ++t) {
      EXPECT_EQ(compare_rows(b.steps[t].data_as<const float>(), a.steps[t].data_as<const float>(), 1,
                             vocab, tolerance, margin),
                "")
          << what << " prompt " << p << " decode at position " << t;
    }
  }
}

TEST(TensorParallelGpuTest, Bf16TwoGpusMatchOneAndTransformers) {
  SKIP_WITHOUT_TWO_DEVICES();
  auto cpu = load_model_for_gpu(kModelDir.string(), {}, 0);
  expect_tp2_matches_tp1(*cpu, kRelativeTolerance, "bf16");
  auto two = load(*cpu, 2);
  const auto golden = goldens();
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> ids = prompt_ids(*golden, p);
    GpuSequence seq = two->new_sequence();
    const Tensor logits = two->forward(ids, seq, true);
    const Tensor expected = golden->get("prompt" + std::to_string(p) + ".logits");
    EXPECT_EQ(compare_rows(logits.data_as<const float>(), expected.to_f32().data_as<const float>(),
                           logits.dim(0), logits.dim(1)),
              "")
        << "prompt " << p << " against transformers";
  }
  // Both GPUs hold half of every layer: the weights summed over the GPUs are one model's (the
  // embedding and head split by vocabulary rows, norms replicated on each).
  auto one = load(*cpu, 1);
  EXPECT_NEAR(static_cast<double>(two->weight_device_bytes()),
              static_cast<double>(one->weight_device_bytes()), 17.0 * 384 * 4 + 1);
}

TEST(TensorParallelGpuTest, Fp8PerChannelTwoGpusMatchOneWithinTheFp8Error) {
  SKIP_WITHOUT_TWO_DEVICES();
  models::LoadOptions fp8;
  fp8.quantization = "fp8_per_channel";  // per-channel weights, dynamic per-token fp8 inputs
  auto cpu = load_model_for_gpu(kModelDir.string(), fp8, 0);
  auto bf16_cpu = load_model_for_gpu(kModelDir.string(), {}, 0);
  auto fp8_one = load(*cpu, 1);
  auto fp8_two = load(*cpu, 2);
  auto bf16_one = load(*bf16_cpu, 1);
  EXPECT_NE(fp8_two->describe().find("w8a8 fp8"), std::string::npos) << fp8_two->describe();
  const auto golden = goldens();
  double error_one = 0, error_two = 0;  // max |fp8 - bf16| / max |bf16 logit|
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> ids = prompt_ids(*golden, p);
    const Logits bf16 = run(*bf16_one, ids), one = run(*fp8_one, ids), two = run(*fp8_two, ids);
    error_one = std::max(error_one, max_relative_difference(one.prefill, bf16.prefill));
    error_two = std::max(error_two, max_relative_difference(two.prefill, bf16.prefill));
    for (size_t t = 0; t < ids.size(); ++t) {
      error_one = std::max(error_one, max_relative_difference(one.steps[t], bf16.steps[t]));
      error_two = std::max(error_two, max_relative_difference(two.steps[t], bf16.steps[t]));
    }
  }
  EXPECT_GT(error_one, 0.0);  // the fp8 model really is another model
  EXPECT_LE(error_two, 2 * error_one);
  // The max-difference bound already limits argmax flips to rows whose margin is below twice the
  // allowed difference: no separate argmax rule.
  expect_tp2_matches_tp1(*cpu, 2 * std::max(kRelativeTolerance, error_one), "fp8",
                         std::numeric_limits<float>::infinity());
}

fs::path quantize_w4a16(int group_size) {
  const fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "gpu-scratch" / ("tp-w4a16-g" + std::to_string(group_size));
  const fs::path recipe = dir.string() + ".yaml";
  fs::create_directories(dir.parent_path());
  std::ofstream(recipe) << "default_stage:\n  default_modifiers:\n    QuantizationModifier:\n"
                           "      config_groups:\n        group_0:\n          targets: [Linear]\n"
                           "          weights: {num_bits: 4, type: int, symmetric: true, "
                           "strategy: group, group_size: "
                        << group_size << "}\n      ignore: [lm_head]\n";
  fs::remove_all(dir);
  const auto r = run_lowbit("quantize '" + kModelDir.string() + "' -o '" + dir.string() +
                            "' --recipe '" + recipe.string() + "' --no-progress");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir;
}

TEST(TensorParallelGpuTest, W4a16TwoGpusMatchOneAndTheCpu) {
  SKIP_WITHOUT_TWO_DEVICES();
  // Group 64: o_proj's 384 input columns split 192 / 192 on group boundaries.
  auto cpu = load_model_for_gpu(quantize_w4a16(64).string(), {}, 0);
  expect_tp2_matches_tp1(*cpu, kRelativeTolerance, "w4a16");
  auto two = load(*cpu, 2);
  EXPECT_NE(two->describe().find("wna16 (w4a16)"), std::string::npos) << two->describe();
  const std::vector<int32_t> ids = prompt_ids(*goldens(), 1);
  models::KvCache cache = cpu->new_cache();
  const Tensor expected = cpu->forward(ids, cache, true);
  GpuSequence seq = two->new_sequence();
  const Tensor logits = two->forward(ids, seq, true);
  EXPECT_EQ(compare_rows(logits.data_as<const float>(), expected.data_as<const float>(),
                         expected.dim(0), expected.dim(1)),
            "");
}

TEST(TensorParallelGpuTest, AGroupSplitBetweenGpusIsRefusedNamingTheLayer) {
  SKIP_WITHOUT_TWO_DEVICES();
  // Group 128: 384 columns in 3 groups cannot split in 2.
  auto cpu = load_model_for_gpu(quantize_w4a16(128).string(), {}, 0);
  try {
    load(*cpu, 2);
    FAIL() << "loaded a group split between two GPUs";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("self_attn.o_proj"), std::string::npos) << e.what();
  }
}

TEST(TensorParallelGpuTest, CliPerplexityAndBenchOnTwoGpus) {
  SKIP_WITHOUT_TWO_DEVICES();
  double ppl[2] = {0, 0};
  for (int tp : {1, 2}) {
    const auto r = run_lowbit("ppl '" + kModelDir.string() + "' --text '" +
                              (kSourceDir / "data/text/heldout.txt").string() +
                              "' --max-windows 8 --json --device cuda --tensor-parallel-size " +
                              std::to_string(tp));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ppl[tp - 1] = nlohmann::json::parse(r.output.substr(r.output.rfind('{'))).at("perplexity");
  }
  EXPECT_NEAR(ppl[1] / ppl[0], 1.0, 0.01);  // as gpu_model_test.cc's GPU-vs-CPU bound
  const auto bench = run_lowbit("bench '" + kModelDir.string() +
                                "' --device cuda --tp 2 --random-weights --prompt-tokens 64 "
                                "--decode-tokens 8 --repeats 1 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  const auto record = nlohmann::json::parse(bench.output.substr(bench.output.rfind('{')));
  EXPECT_EQ(record.at("tensor_parallel_size"), 2);
  EXPECT_EQ(record.at("random_weights"), true);
  EXPECT_GT(record.at("decode_tps").get<double>(), 0.0);
}

// `lowbit eval --device cuda --tp 2`: the perplexity / KLD windows on two GPUs against the same
// evaluation on the CPU. Perplexities within 1% (gpu_model_test.cc's GPU-vs-CPU bound); the
// W4A16 model's KLD against bf16 within 25% of the CPU's: the GPU's bf16 activations add noise of
// their own to both models' distributions (transformers' bf16 run moves perplexity by 0.07%, a
// KLD of order 1e-4, against a quantization KLD of ~0.03 here); a wrong window, row or baseline
// would be off by far more.
TEST(TensorParallelGpuTest, EvalOnTwoGpusMatchesTheCpu) {
  SKIP_WITHOUT_TWO_DEVICES();
  const fs::path w4a16 = quantize_w4a16(64);
  nlohmann::json result[2];
  const char* devices[2] = {"--device cpu", "--device cuda --tp 2"};
  for (int d = 0; d < 2; ++d) {
    const fs::path json = fs::path(LOWBIT_BINARY_DIR) / "gpu-scratch" / ("eval" + std::to_string(d) + ".json");
    const auto r = run_lowbit("eval '" + w4a16.string() + "' --baseline '" + kModelDir.string() +
                              "' --ppl '" + (kSourceDir / "data/text/heldout.txt").string() +
                              "' --windows 8 --json '" + json.string() + "' " + devices[d]);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    result[d] = nlohmann::json::parse(std::ifstream(json));
  }
  const double cpu_ppl = result[0].at("ppl"), gpu_ppl = result[1].at("ppl");
  EXPECT_NEAR(gpu_ppl / cpu_ppl, 1.0, 0.01);
  const double cpu_base = result[0].at("baseline_ppl"), gpu_base = result[1].at("baseline_ppl");
  EXPECT_NEAR(gpu_base / cpu_base, 1.0, 0.01);
  const double cpu_kld = result[0].at("kld_mean"), gpu_kld = result[1].at("kld_mean");
  EXPECT_GT(cpu_kld, 0.0);
  EXPECT_NEAR(gpu_kld / cpu_kld, 1.0, 0.25) << "cpu " << cpu_kld << ", gpu " << gpu_kld;
}

}  // namespace
}  // namespace lowbit::gpu
