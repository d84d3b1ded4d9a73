// compress_weight → decompress_weight for every format, weight_g_idx, the pre-0.17 packing, format
// inference for the presets, and the errors a broken checkpoint gets.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/scheme/compressed_tensor.h"
#include "quant/scheme/packing.h"

namespace lowbit::quant {
namespace {

// Random bf16-representable weights, rows of different magnitude, one all-zero row.
std::vector<float> weights(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w[r * cols + c] = r == 1 ? 0.0f : round_to_dtype(n(rng) * static_cast<float>(1 + r % 5), DType::BF16);
  return w;
}

struct Compressed {
  std::map<std::string, Tensor> tensors;
  TensorSource source() const {
    return {[this](const std::string& n) { return tensors.count(n) != 0; },
            [this](const std::string& n) { return tensors.at(n); }, "test map"};
  }
};

Compressed compress(const std::vector<float>& w, int64_t rows, int64_t cols, const QuantArgs& a,
                    const QParams& qp, CompressionFormat f, const std::vector<int32_t>* g_idx = nullptr) {
  WeightToCompress wc{"layer", w.data(), rows, cols, DType::BF16, &qp, &a, g_idx};
  Compressed c;
  for (auto& t : compress_weight(wc, f)) c.tensors[t.name] = t.tensor;
  return c;
}

struct FormatCase {
  std::string preset;
  int64_t rows, cols;
};

class RoundTrip : public ::testing::TestWithParam<FormatCase> {};

TEST_P(RoundTrip, DecompressGivesTheFakeQuantizedWeight) {
  const auto& p = GetParam();
  const QuantScheme s = preset_scheme(p.preset, {"Linear"});
  const QuantArgs& a = *s.weights;
  const CompressionFormat f = infer_format(s);
  const auto w = weights(p.rows, p.cols, 7);
  const QParams qp = observe_weight_minmax(w.data(), p.rows, p.cols, a, DType::BF16);
  const Compressed c = compress(w, p.rows, p.cols, a, qp, f);
  const auto out = decompress_weight(c.source(), "layer", a, f, p.rows, p.cols);
  auto fq = w;
  fake_quantize(fq.data(), p.rows, p.cols, qp, a, DType::BF16);
  ASSERT_EQ(out.size(), fq.size());
  for (size_t i = 0; i < fq.size(); ++i) ASSERT_EQ(out[i], fq[i]) << p.preset << " " << i;
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, RoundTrip,
    ::testing::Values(FormatCase{"W4A16", 8, 256}, FormatCase{"W4A16_ASYM", 9, 256},
                      FormatCase{"W3A16", 8, 384}, FormatCase{"W5A16", 3, 128},
                      FormatCase{"W8A16", 5, 128}, FormatCase{"W8A8", 7, 96},
                      FormatCase{"W4A8", 4, 256}, FormatCase{"W4AFP8", 4, 128},
                      FormatCase{"W4A8_CHANNEL", 6, 40}, FormatCase{"FP8", 5, 64},
                      FormatCase{"FP8_DYNAMIC", 5, 64}, FormatCase{"FP8_BLOCK", 130, 200},
                      FormatCase{"NVFP4A16", 4, 64}, FormatCase{"NVFP4", 4, 64},
                      FormatCase{"MXFP4A16", 4, 96}, FormatCase{"MXFP8A16", 4, 96}),
    [](const auto& info) { return info.param.preset; });

TEST(InferFormat, PresetsAndOverrides) {
  const std::map<std::string, CompressionFormat> expected = {
      {"UNQUANTIZED", CompressionFormat::Dense},
      {"W4A16", CompressionFormat::PackQuantized},
      {"W4A8", CompressionFormat::IntQuantized},
      {"W4AFP8", CompressionFormat::IntQuantized},  // FORMATS.md §2 pitfall
      {"W8A8", CompressionFormat::IntQuantized},
      {"FP8", CompressionFormat::FloatQuantized},
      {"FP8_BLOCK", CompressionFormat::FloatQuantized},
      {"NVFP4", CompressionFormat::Nvfp4PackQuantized},
      {"MXFP4", CompressionFormat::Mxfp4PackQuantized},
      {"MXFP8", CompressionFormat::Mxfp8Quantized}};
  for (const auto& [name, f] : expected)
    EXPECT_EQ(infer_format(preset_scheme(name, {"Linear"})), f) << name;
  QuantScheme s = preset_scheme("W4AFP8", {"Linear"});
  s.format = CompressionFormat::PackQuantized;
  EXPECT_EQ(infer_format(s), CompressionFormat::PackQuantized);
  QuantScheme fp8_only = preset_scheme("FP8", {"Linear"});
  fp8_only.input_activations.reset();
  EXPECT_EQ(infer_format(fp8_only), CompressionFormat::NaiveQuantized);
}

TEST(Compress, TensorNamesDtypesShapes) {
  const QuantArgs a = *preset_scheme("W4A16_ASYM", {"Linear"}).weights;
  const auto w = weights(9, 256, 3);
  const QParams qp = observe_weight_minmax(w.data(), 9, 256, a, DType::BF16);
  const Compressed c = compress(w, 9, 256, a, qp, CompressionFormat::PackQuantized);
  ASSERT_EQ(c.tensors.size(), 4u);
  EXPECT_EQ(c.tensors.at("layer.weight_packed").shape(), (Shape{9, 32}));
  EXPECT_EQ(c.tensors.at("layer.weight_packed").dtype(), DType::I32);
  EXPECT_EQ(c.tensors.at("layer.weight_scale").shape(), (Shape{9, 2}));
  EXPECT_EQ(c.tensors.at("layer.weight_scale").dtype(), DType::BF16);
  EXPECT_EQ(c.tensors.at("layer.weight_zero_point").shape(), (Shape{2, 2}));  // ceil(9*4/32)
  EXPECT_EQ(c.tensors.at("layer.weight_shape").dtype(), DType::I64);
  const auto dense = compress(w, 9, 256, a, qp, CompressionFormat::Dense);
  EXPECT_EQ(dense.tensors.size(), 1u);
  EXPECT_EQ(dense.tensors.at("layer.weight").dtype(), DType::BF16);
}

TEST(Compress, ActorderGroupWritesAndUsesGIdx) {
  QuantArgs a = *preset_scheme("W4A16", {"Linear"}).weights;
  a.group_size = 32;
  a.actorder = ActOrder::Group;
  const int64_t rows = 4, cols = 128;
  const auto w = weights(rows, cols, 11);
  std::vector<int32_t> g_idx(cols);
  for (int64_t c = 0; c < cols; ++c) g_idx[c] = static_cast<int32_t>((c * 5) % 4);  // interleaved
  const QParams qp = observe_weight_minmax(w.data(), rows, cols, a, DType::BF16);
  const Compressed c = compress(w, rows, cols, a, qp, CompressionFormat::PackQuantized, &g_idx);
  ASSERT_TRUE(c.tensors.count("layer.weight_g_idx"));
  EXPECT_EQ(c.tensors.at("layer.weight_g_idx").dtype(), DType::I32);
  const auto out = decompress_weight(c.source(), "layer", a, CompressionFormat::PackQuantized, rows, cols);
  auto fq = w;
  fake_quantize(fq.data(), rows, cols, qp, a, DType::BF16, g_idx.data());
  for (size_t i = 0; i < fq.size(); ++i) ASSERT_EQ(out[i], fq[i]) << i;
}

// A corrupt index (the fuzzer found 2^31 in an I64 weight_g_idx) is an error naming the tensor,
// not an out-of-range conversion; so is a negative one.
TEST(Decompress, RejectsGIdxOutsideTheIntRange) {
  QuantArgs a = *preset_scheme("W4A16", {"Linear"}).weights;
  a.group_size = 32;
  a.actorder = ActOrder::Group;
  const int64_t rows = 4, cols = 64;
  const auto w = weights(rows, cols, 3);
  std::vector<int32_t> g_idx(cols, 0);
  const QParams qp = observe_weight_minmax(w.data(), rows, cols, a, DType::BF16);
  for (const int64_t bad : {int64_t{1} << 31, int64_t{-1}}) {
    Compressed c = compress(w, rows, cols, a, qp, CompressionFormat::PackQuantized, &g_idx);
    Tensor wide = Tensor::zeros(DType::I64, {cols});
    wide.data_as<int64_t>()[5] = bad;
    c.tensors.insert_or_assign("layer.weight_g_idx", wide);
    try {
      decompress_weight(c.source(), "layer", a, CompressionFormat::PackQuantized, rows, cols);
      FAIL() << "g_idx " << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("weight_g_idx"), std::string::npos) << e.what();
    }
  }
}

TEST(Decompress, ReadsThePre017Packing) {
  QuantArgs a = *preset_scheme("W3A16", {"Linear"}).weights;
  a.symmetric = false;
  a.strategy = Strategy::Channel;
  a.group_size = 0;
  const int64_t rows = 40, cols = 64;  // 3-bit: dense 6 words a row, legacy 7; zp 4 vs 4 (dense)
  const auto w = weights(rows, cols, 5);
  const QParams qp = observe_weight_minmax(w.data(), rows, cols, a, DType::BF16);
  Compressed c = compress(w, rows, cols, a, qp, CompressionFormat::PackQuantized);
  const auto want = decompress_weight(c.source(), "layer", a, CompressionFormat::PackQuantized, rows, cols);
  // Re-pack the codes as compressed-tensors <= 0.16 did: 10 values per word.
  const Tensor dense = c.tensors.at("layer.weight_packed");
  const auto q = unpack_int_rows(dense.data_as<int32_t>(), rows, 6, cols, 3);
  Tensor legacy = Tensor::zeros(DType::I32, {rows, 7});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      legacy.data_as<uint32_t>()[r * 7 + j / 10] |= static_cast<uint32_t>(q[r * cols + j] + 4)
                                                    << ((j % 10) * 3);
  c.tensors["layer.weight_packed"] = legacy;
  EXPECT_EQ(decompress_weight(c.source(), "layer", a, CompressionFormat::PackQuantized, rows, cols), want);
}

std::string decompress_error(Compressed c, const std::string& drop, const std::string& replace_name,
                             Tensor replacement) {
  const QuantArgs a = *preset_scheme("W4A16", {"Linear"}).weights;
  if (!drop.empty()) c.tensors.erase(drop);
  if (!replace_name.empty()) c.tensors[replace_name] = replacement;
  try {
    decompress_weight(c.source(), "layer", a, CompressionFormat::PackQuantized, 4, 128);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Decompress, ErrorsNameTheTensor) {
  const QuantArgs a = *preset_scheme("W4A16", {"Linear"}).weights;
  const auto w = weights(4, 128, 9);
  const QParams qp = observe_weight_minmax(w.data(), 4, 128, a, DType::BF16);
  const Compressed c = compress(w, 4, 128, a, qp, CompressionFormat::PackQuantized);
  EXPECT_EQ(decompress_error(c, "", "", {}), "");
  EXPECT_NE(decompress_error(c, "layer.weight_scale", "", {}).find("'layer.weight_scale' is missing"),
            std::string::npos);
  EXPECT_NE(decompress_error(c, "", "layer.weight_packed", Tensor::zeros(DType::I8, {4, 16}))
                .find("'layer.weight_packed' has dtype I8"),
            std::string::npos);
  EXPECT_NE(decompress_error(c, "", "layer.weight_scale", Tensor::zeros(DType::BF16, {4, 3}))
                .find("'layer.weight_scale' has shape [4, 3]"),
            std::string::npos);
  EXPECT_NE(decompress_error(c, "", "layer.weight_packed", Tensor::zeros(DType::I32, {4, 5}))
                .find("packed words"),
            std::string::npos);
  Tensor shape = Tensor::zeros(DType::I64, {2});
  shape.data_as<int64_t>()[0] = 4;
  shape.data_as<int64_t>()[1] = 127;
  EXPECT_NE(decompress_error(c, "", "layer.weight_shape", shape).find("weight_shape"),
            std::string::npos);
}

TEST(Compress, RejectsWhatCompressedTensorsRejects) {
  const QuantArgs a = *preset_scheme("W4A16", {"Linear"}).weights;
  const auto w = weights(2, 200, 1);
  QParams qp;
  qp.grid_rows = 2;
  qp.grid_cols = 2;
  qp.scale = {1, 1, 1, 1};
  EXPECT_THROW(compress(w, 2, 200, a, qp, CompressionFormat::PackQuantized), InvalidArgument);
  const QuantArgs fp4 = *preset_scheme("MXFP4A16", {"Linear"}).weights;
  EXPECT_THROW(compress(w, 2, 200, fp4, qp, CompressionFormat::PackQuantized), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::quant
