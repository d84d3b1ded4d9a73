// KernelLinear's deferred CPU packing: with the canonical weights kept (a model loaded for the
// GPU), the CPU layout is packed on the layer's first CPU use instead of at load. The deferred
// layer must compute exactly what the eagerly packed one computes, and bad weights must still fail
// at load.
#include "quant/methods/kernel_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "lowbit/error.h"

namespace lowbit::quant {
namespace {

constexpr const char* kDeferredSuffix = "(CPU layout packed on first CPU use)";

LayerInfo layer_info(int64_t out, int64_t in) {
  LayerInfo info;
  info.prefix = "model.layers.0.mlp.down_proj";
  info.out_features = out;
  info.in_features = in;
  info.params_dtype = DType::F32;
  return info;
}

// Hands finish_int / finish_fp8 prepared canonical weights, as a format file does after decoding.
class DirectLinear : public KernelLinear {
 public:
  DirectLinear(std::optional<kernels::IntWeights> iw, std::optional<kernels::Fp8Weights> fw,
               std::optional<InputQuant> input)
      : int_(std::move(iw)), fp8_(std::move(fw)), input_(std::move(input)) {}
  void create_weights(LayerParams& /*layer*/) override {}
  void process_weights_after_loading(LayerParams& layer) override {
    if (int_) finish_int(layer, *int_, input_);
    if (fp8_) finish_fp8(layer, *fp8_, input_);
  }

 private:
  std::optional<kernels::IntWeights> int_;
  std::optional<kernels::Fp8Weights> fp8_;
  std::optional<InputQuant> input_;
};

kernels::IntWeights int4_weights(int64_t rows, int64_t cols, int64_t group) {
  kernels::IntWeights w;
  w.bits = 4;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group;
  w.codes.resize(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < w.codes.size(); ++i) w.codes[i] = static_cast<uint8_t>((i * 7 + 3) % 16);
  w.scales.resize(static_cast<size_t>(rows * w.groups()));
  for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = 0.01f * static_cast<float>(i % 5 + 1);
  w.zeros.resize(w.scales.size());
  for (size_t i = 0; i < w.zeros.size(); ++i) w.zeros[i] = static_cast<uint8_t>(i % 16);
  return w;
}

kernels::Fp8Weights fp8_weights(int64_t rows, int64_t cols) {
  kernels::Fp8Weights w;
  w.rows = rows;
  w.cols = cols;
  w.block_rows = 1;
  w.block_cols = cols;  // per channel
  w.codes.resize(static_cast<size_t>(rows * cols));
  // E4M3 patterns 0x00..0x77 and their negatives: finite values only (0x7F / 0xFF are NaN).
  for (size_t i = 0; i < w.codes.size(); ++i) {
    w.codes[i] = static_cast<uint8_t>((i * 13) % 0x78 | (i % 3 == 0 ? 0x80 : 0));
  }
  w.scales.assign(static_cast<size_t>(rows), 0.02f);
  return w;
}

InputQuant int8_per_token() {
  InputQuant in;
  in.args.type = QuantType::Int;
  in.args.num_bits = 8;
  in.args.strategy = Strategy::Token;
  in.args.symmetric = true;
  in.args.dynamic = DynamicMode::Dynamic;
  return in;
}

struct Built {
  std::unique_ptr<DirectLinear> layer;
  std::string name_at_load;
};

Built build(bool keep_canonical, const LayerInfo& info, std::optional<kernels::IntWeights> iw,
            std::optional<kernels::Fp8Weights> fw, std::optional<InputQuant> input) {
  KernelLinear::set_keep_canonical_weights(keep_canonical);
  Built b{std::make_unique<DirectLinear>(std::move(iw), std::move(fw), std::move(input)), ""};
  LayerParams params(info);
  try {
    b.layer->process_weights_after_loading(params);
  } catch (...) {
    KernelLinear::set_keep_canonical_weights(false);
    throw;
  }
  KernelLinear::set_keep_canonical_weights(false);
  b.name_at_load = b.layer->kernel_name();
  return b;
}

// The same layer, eager and deferred: identical outputs for decode and prefill row counts, the
// deferred one named as deferred until it runs, then by the kernel the eager one chose.
void expect_same_as_eager(const std::string& family, const LayerInfo& info,
                          const std::optional<kernels::IntWeights>& iw,
                          const std::optional<kernels::Fp8Weights>& fw,
                          const std::optional<InputQuant>& input) {
  const Built eager = build(false, info, iw, fw, input);
  const Built deferred = build(true, info, iw, fw, input);
  EXPECT_EQ(eager.name_at_load.rfind(family, 0), 0u) << eager.name_at_load;
  EXPECT_EQ(deferred.name_at_load.rfind(family, 0), 0u) << deferred.name_at_load;
  EXPECT_EQ(eager.name_at_load.find(kDeferredSuffix), std::string::npos) << eager.name_at_load;
  EXPECT_NE(deferred.name_at_load.find(kDeferredSuffix), std::string::npos)
      << deferred.name_at_load;
  // The canonical weights are what the GPU backend reads; the eager layer keeps none.
  EXPECT_EQ(deferred.layer->int_weights() != nullptr, iw.has_value());
  EXPECT_EQ(deferred.layer->fp8_weights() != nullptr, fw.has_value());
  EXPECT_EQ(eager.layer->int_weights(), nullptr);
  for (int64_t rows : {1, 3, 40}) {
    std::vector<float> x(static_cast<size_t>(rows * info.in_features));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
    std::vector<float> y_eager(static_cast<size_t>(rows * info.out_features), -1.0f);
    std::vector<float> y_deferred(y_eager.size(), -2.0f);
    eager.layer->apply(x.data(), rows, nullptr, y_eager.data());
    deferred.layer->apply(x.data(), rows, nullptr, y_deferred.data());
    // Same packed weights, same kernel, same inputs: bit-identical, no tolerance needed.
    EXPECT_EQ(y_eager, y_deferred) << eager.name_at_load << " rows " << rows;
  }
  EXPECT_EQ(deferred.layer->kernel_name(), eager.name_at_load);
  EXPECT_EQ(deferred.layer->weight_bytes(), eager.layer->weight_bytes());
}

TEST(KernelLinearDeferredPacking, Wna16MatchesEagerPacking) {
  expect_same_as_eager("wna16", layer_info(48, 256), int4_weights(48, 256, 64), std::nullopt,
                       std::nullopt);
}

TEST(KernelLinearDeferredPacking, W8a8MatchesEagerPacking) {
  expect_same_as_eager("w8a8", layer_info(48, 256), int4_weights(48, 256, 64), std::nullopt,
                       int8_per_token());
}

TEST(KernelLinearDeferredPacking, Fp8MatchesEagerPacking) {
  expect_same_as_eager("fp8", layer_info(48, 256), std::nullopt, fp8_weights(48, 256),
                       std::nullopt);
}

TEST(KernelLinearDeferredPacking, DequantizedWeightPacksOnDemand) {
  const LayerInfo info = layer_info(16, 128);
  const Built eager = build(false, info, int4_weights(16, 128, 32), std::nullopt, std::nullopt);
  const Built deferred = build(true, info, int4_weights(16, 128, 32), std::nullopt, std::nullopt);
  const Tensor a = eager.layer->dequantized_weight();
  const Tensor b = deferred.layer->dequantized_weight();
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(a.data_as<const float>()[i], b.data_as<const float>()[i]) << i;
  }
}

// Bad codes are found at load in both modes (the deferred mode runs packing's checks first), with
// the field named.
TEST(KernelLinearDeferredPacking, BadWeightsStillFailAtLoad) {
  const LayerInfo info = layer_info(8, 64);
  for (bool keep : {false, true}) {
    kernels::IntWeights bad = int4_weights(8, 64, 64);
    bad.codes[5] = 16;  // does not fit in 4 bits
    try {
      build(keep, info, bad, std::nullopt, std::nullopt);
      ADD_FAILURE() << "no error (keep canonical " << keep << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("codes[5]"), std::string::npos) << e.what();
    }
    kernels::Fp8Weights short_scales = fp8_weights(8, 64);
    short_scales.scales.pop_back();
    try {
      build(keep, info, std::nullopt, short_scales, std::nullopt);
      ADD_FAILURE() << "no error for fp8 (keep canonical " << keep << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("scales"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lowbit::quant
