// Every preset `lowbit quantize` writes loads through the method registry and runs on this CPU's
// kernels. For each: round-to-nearest on the embedded model (small calibration set for the static
// input scales), then
//  - with --linear-backend dequant (the reference: weights dequantized to bf16 by the format's own
//    decompressor, dense matmul, activations fake-quantized in fp32) the held-out perplexity is
//    exactly the one the quantizer reported, which it computed on the very same bytes;
//  - with the kernels chosen by default (wna16 / w8a8 / fp8 / dequant) the logits and perplexity
//    match the same reference with the dequantized weights kept in fp32 (--dtype float32), which is
//    what the kernels compute, within tolerances per kernel family (below); against the bf16
//    reference they differ by what the bf16 rounding of the weights changes, measured here too.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "eval/perplexity.h"
#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "quant/pipeline/oneshot.h"
#include "quant/scheme/quant_args.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m";
const std::string kHeldout = std::string(LOWBIT_SOURCE_DIR) + "/data/text/heldout.txt";
const std::string kCalibration = std::string(LOWBIT_SOURCE_DIR) + "/data/text/calibration.txt";
constexpr int64_t kEvalWindows = 4;  // 4 × 511 scored tokens: a check of equality, not of quality

struct Case {
  const char* preset;
  // Kernels against the fp32 reference (same weights, same activation fake quantization; only the
  // order of fp32 sums differs, and int8 kernels scale an exact int32 sum once instead of summing
  // rounded products): max |logit difference| and relative perplexity difference. Weight-only
  // kernels: summation order only, ~1e-3 on logits of magnitude 10-20. Quantized inputs: a value
  // that lands on a rounding boundary can flip one activation code (an int8 or fp8 step), which
  // this model amplifies to a few tenths in the worst logit; perplexity stays within 0.2%.
  // Weight-only 2-4-bit layers on the bf16-dot kernel (wna16_avx512_bf16dot) round x, and on its
  // prefill path the dequantized weights, to bf16: a bf16 forward's precision, which on this
  // model moves logits by up to 0.047 from the fp32 forward for either operand
  // (quant_formats_test.cc), so kBf16Arithmetic = 0.1 for both; perplexity moves by ~2e-5.
  double logit_tolerance;
  double ppl_tolerance;
};

constexpr double kBf16Arithmetic = 0.1;

constexpr double kWeightOnly = 0.01, kQuantizedInputs = 0.6;
const Case kCases[] = {
    {"W4A16", kWeightOnly, 1e-4},        {"W4A16_ASYM", kWeightOnly, 1e-4},
    {"W8A16", kWeightOnly, 1e-4},        {"W8A8", kQuantizedInputs, 2e-3},
    {"W4A8", kQuantizedInputs, 2e-3},    {"W4A8_CHANNEL", kQuantizedInputs, 2e-3},
    {"W4AFP8", kQuantizedInputs, 2e-3},  {"FP8", kQuantizedInputs, 2e-3},
    {"FP8_DYNAMIC", kQuantizedInputs, 2e-3}, {"FP8_BLOCK", kQuantizedInputs, 2e-3},
    {"NVFP4A16", kWeightOnly, 1e-4},     {"NVFP4", kQuantizedInputs, 2e-3},
    {"MXFP4A16", kWeightOnly, 1e-4},     {"MXFP4", kQuantizedInputs, 2e-3},
};

std::vector<int32_t> heldout_ids() {
  static const std::vector<int32_t> ids = [] {
    std::ifstream in(kHeldout, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    return Tokenizer::from_dir(kModel).encode(text, false);
  }();
  return ids;
}

double perplexity(const models::Model& model) {
  eval::PerplexityOptions po;
  po.max_windows = kEvalWindows;
  return eval::perplexity(model, heldout_ids(), po).perplexity;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a.data_as<const float>()[i] -
                                                         b.data_as<const float>()[i])));
  }
  return worst;
}

Tensor logits(const models::Model& model) {
  const std::vector<int32_t> ids = heldout_ids();
  models::KvCache cache = model.new_cache();
  return model.forward(std::span<const int32_t>(ids.data(), 96), cache, /*all_logits=*/true);
}

// Round-to-nearest `preset` of the embedded model into a fresh methods-scratch/`name`, calibrated on
// samples × seq_len tokens (static input scales, NVFP4's input global scales), scored on
// kEvalWindows windows when `eval` is set.
OneshotOptions quantize_options(const std::string& preset, const std::string& name,
                                int64_t samples, int64_t seq_len, bool eval) {
  const fs::path out = fs::path(LOWBIT_BINARY_DIR) / "methods-scratch" / name;
  fs::remove_all(out);
  fs::remove_all(out.string() + ".tmp");
  fs::create_directories(out.parent_path());
  OneshotOptions o;
  o.model_dir = kModel;
  o.output_dir = out.string();
  QuantizeStep step;
  step.groups.push_back({"group_0", preset_scheme(preset, {"Linear"})});
  step.ignore = {"lm_head"};
  o.plan = {{step}};
  o.calibration.path = kCalibration;
  o.calibration.num_samples = samples;
  o.calibration.seq_len = seq_len;
  if (eval) {
    o.eval_text = kHeldout;
    o.eval_windows = kEvalWindows;
  }
  o.progress = false;
  return o;
}

class PresetCheckpoint : public ::testing::TestWithParam<Case> {};

TEST_P(PresetCheckpoint, LoadsRunsAndMatchesTheReference) {
  const Case c = GetParam();
  const OneshotOptions o = quantize_options(c.preset, c.preset, 8, 128, /*eval=*/true);
  const fs::path out = o.output_dir;
  const OneshotReport report = run_oneshot(o);
  ASSERT_TRUE(report.perplexity.has_value());

  // The reference as the quantizer evaluated it: weights dequantized to bf16.
  models::LoadOptions bf16_options;
  bf16_options.linear_backend = "dequant";
  const auto reference = models::Model::load(out.string(), bf16_options);
  EXPECT_EQ(perplexity(*reference), *report.perplexity) << c.preset;

  // The same dequantized weights kept in fp32: the exact products code x scale that the kernels
  // (and GPU kernels) compute.
  models::LoadOptions f32_options = bf16_options;
  f32_options.dtype = "float32";
  const auto exact = models::Model::load(out.string(), f32_options);
  const double exact_ppl = perplexity(*exact);

  const auto fast = models::Model::load(out.string());
  EXPECT_EQ(fast->quantization(), "compressed-tensors (checkpoint)");
  const double ppl = perplexity(*fast);
  const double dlogit = max_abs_diff(logits(*fast), logits(*exact));
  const bool bf16_kernels =
      fast->weights().layers[0].mlp.down.method->kernel_name() == "wna16_avx512_bf16dot";
  EXPECT_LE(dlogit, bf16_kernels ? std::max(c.logit_tolerance, kBf16Arithmetic) : c.logit_tolerance)
      << c.preset;
  EXPECT_LT(std::abs(ppl / exact_ppl - 1.0), c.ppl_tolerance)
      << c.preset << ": kernels " << ppl << " vs fp32 reference " << exact_ppl;
  // Against the reported (bf16-weight) perplexity the kernels may differ by what rounding the
  // weights to bf16 changes on its own (the two references' spread), plus the above.
  const double spread = std::abs(exact_ppl / *report.perplexity - 1.0);
  EXPECT_LT(std::abs(ppl / *report.perplexity - 1.0), spread + c.ppl_tolerance) << c.preset;
  std::printf("[ %-12s ] reported %.4f, fp32 reference %.4f, kernels %.4f (%s), max |dlogit| %.4f\n",
              c.preset, *report.perplexity, exact_ppl, ppl,
              fast->weights().layers[0].mlp.down.method->kernel_name().c_str(), dlogit);
}

// NVFP4 inputs need their calibrated global scale: a checkpoint without one layer's
// input_global_scale is refused, naming the tensor (vLLM's CompressedTensorsW4A4Fp4 requires it
// too), instead of silently computing a global scale per call.
TEST(PresetCheckpointErrors, Nvfp4WithoutInputGlobalScaleIsRefused) {
  const OneshotOptions o = quantize_options("NVFP4", "nvfp4-no-global", 4, 64, /*eval=*/false);
  const fs::path out = o.output_dir;
  run_oneshot(o);
  const std::string victim = "model.layers.0.self_attn.q_proj.input_global_scale";
  std::ifstream index_in(out / "model.safetensors.index.json");
  nlohmann::json index = nlohmann::json::parse(index_in);
  index_in.close();
  ASSERT_TRUE(index["weight_map"].contains(victim));
  const std::string shard = (out / index["weight_map"][victim].get<std::string>()).string();
  std::map<std::string, Tensor> kept;
  {
    auto file = formats::SafetensorsFile::open(shard);
    for (const std::string& name : file->names()) {
      if (name != victim) kept.emplace(name, file->get(name));
    }
  }
  formats::write_safetensors(shard, kept, {{"format", "pt"}});
  index["weight_map"].erase(victim);
  std::ofstream(out / "model.safetensors.index.json") << index.dump();
  try {
    models::Model::load(out.string());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(victim), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AllPresets, PresetCheckpoint, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.preset);
                         });

}  // namespace
}  // namespace lowbit::quant
