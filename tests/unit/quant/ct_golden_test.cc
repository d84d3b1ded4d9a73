// lowbit against compressed-tensors 0.19.0 itself, bit for bit: for every weight case of
// ct_vectors.safetensors, the observer's qparams, fake quantization, the compressed tensors
// (names, dtypes, shapes, bytes) and the decompressed weight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "ct_golden.h"
#include "quant/scheme/compressed_tensor.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {
namespace {

using testing::first_bit_difference;
using testing::golden_cases;
using testing::GoldenCase;
using testing::to_floats;
using testing::vectors;

class CtGolden : public ::testing::TestWithParam<GoldenCase> {
 protected:
  const GoldenCase& c() const { return GetParam(); }
  Tensor golden(const std::string& suffix) const { return vectors().get(c().key + "." + suffix); }
  bool has(const std::string& suffix) const { return vectors().has(c().key + "." + suffix); }
  std::vector<float> input() const { return to_floats(golden("input")); }
  QParams observe() const {
    const std::vector<float> w = input();
    return observe_weight_minmax(w.data(), c().rows, c().cols, *c().scheme.weights, c().dtype);
  }
};

// Explains a bitwise mismatch: where, and both values.
std::string mismatch(const std::vector<float>& ours, const std::vector<float>& theirs) {
  const int64_t i = first_bit_difference(ours, theirs);
  if (i < 0) return "";
  if (ours.size() != theirs.size())
    return "sizes " + std::to_string(ours.size()) + " vs " + std::to_string(theirs.size());
  char buf[160];
  std::snprintf(buf, sizeof buf, "element %lld: lowbit %.9g, compressed-tensors %.9g",
                static_cast<long long>(i), ours[static_cast<size_t>(i)],
                theirs[static_cast<size_t>(i)]);
  return buf;
}

TEST_P(CtGolden, ObserverQParamsAreBitIdentical) {
  const QParams qp = observe();
  EXPECT_EQ(mismatch(qp.scale, to_floats(golden("qp_scale"))), "") << c().key;
  if (has("qp_zero_point"))
    EXPECT_EQ(mismatch(qp.zero_point, to_floats(golden("qp_zero_point"))), "") << c().key;
  else
    EXPECT_TRUE(qp.zero_point.empty());
  if (has("qp_global_scale")) {
    EXPECT_EQ(first_bit_difference({qp.global_scale}, to_floats(golden("qp_global_scale"))), -1)
        << qp.global_scale;
  }
}

TEST_P(CtGolden, FakeQuantizeIsBitIdentical) {
  const QParams qp = observe();
  std::vector<float> w = input();
  fake_quantize(w.data(), c().rows, c().cols, qp, *c().scheme.weights, c().dtype);
  EXPECT_EQ(mismatch(w, to_floats(golden("fake_quant"))), "") << c().key;
}

std::vector<NamedTensor> compress(const GoldenCase& k, const std::vector<float>& w,
                                  const QParams& qp) {
  WeightToCompress wc{"m", w.data(), k.rows, k.cols, k.dtype, &qp, &*k.scheme.weights};
  return compress_weight(wc, k.format);
}

TEST_P(CtGolden, InferredFormatMatches) {
  QuantScheme s = c().scheme;
  s.format.reset();  // the golden scheme carries the format CT inferred
  EXPECT_EQ(to_string(infer_format(s)), to_string(c().format));
}

TEST_P(CtGolden, CompressedTensorsAreByteIdentical) {
  const std::vector<float> w = input();
  const std::vector<NamedTensor> ours = compress(c(), w, observe());
  std::map<std::string, Tensor> expected;
  const std::string prefix = c().key + ".weight";
  for (const auto& name : vectors().names())
    if (name.rfind(prefix, 0) == 0) expected[name.substr(c().key.size() + 1)] = vectors().get(name);
  std::map<std::string, Tensor> got;
  for (const auto& t : ours) got[t.name.substr(2)] = t.tensor;  // strip "m."
  ASSERT_EQ(got.size(), expected.size()) << c().key;
  for (const auto& [name, e] : expected) {
    ASSERT_TRUE(got.count(name)) << c().key << ": lowbit does not write " << name;
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.dtype(), e.dtype()) << c().key << "." << name;
    EXPECT_EQ(g.shape(), e.shape()) << c().key << "." << name;
    ASSERT_EQ(g.nbytes(), e.nbytes()) << c().key << "." << name;
    size_t first = g.nbytes();
    for (size_t i = 0; i < g.nbytes() && first == g.nbytes(); ++i)
      if (static_cast<const uint8_t*>(g.data())[i] != static_cast<const uint8_t*>(e.data())[i])
        first = i;
    EXPECT_EQ(first, g.nbytes()) << c().key << "." << name << " differs from byte " << first;
  }
}

TensorSource source_of(const std::map<std::string, Tensor>& m) {
  return {[&m](const std::string& n) { return m.count(n) != 0; },
          [&m](const std::string& n) { return m.at(n); }, "test map"};
}

TEST_P(CtGolden, DecompressingCtTensorsIsBitIdentical) {
  std::map<std::string, Tensor> m;
  for (const auto& name : vectors().names())
    if (name.rfind(c().key + ".weight", 0) == 0) m["m" + name.substr(c().key.size())] = vectors().get(name);
  const auto out =
      decompress_weight(source_of(m), "m", *c().scheme.weights, c().format, c().rows, c().cols);
  EXPECT_EQ(mismatch(out, to_floats(golden("decompressed"))), "") << c().key;
}

TEST_P(CtGolden, CompressThenDecompressRoundTrips) {
  const std::vector<float> w = input();
  const QParams qp = observe();
  std::map<std::string, Tensor> m;
  for (auto& t : compress(c(), w, qp)) m[t.name] = t.tensor;
  const auto out =
      decompress_weight(source_of(m), "m", *c().scheme.weights, c().format, c().rows, c().cols);
  // Decompression gives back exactly the fake-quantized weight, except where compressed-tensors'
  // decompressor computes in another precision than its fake quantization: fp4 formats
  // dequantize in bf16 (unpack_fp4_from_uint8's dtype) whatever the weight's dtype.
  std::vector<float> fq = w;
  fake_quantize(fq.data(), c().rows, c().cols, qp, *c().scheme.weights, c().dtype);
  const bool fp4 = c().format == CompressionFormat::Nvfp4PackQuantized ||
                   c().format == CompressionFormat::Mxfp4PackQuantized;
  if (!fp4 || c().dtype == DType::BF16) {
    // == rather than bitwise: fake quantization keeps the sign of a code that rounds to -0.0,
    // an int8 code cannot.
    for (size_t i = 0; i < fq.size(); ++i) ASSERT_EQ(out[i], fq[i]) << c().key << " " << i;
  } else {
    for (size_t i = 0; i < fq.size(); ++i)  // one bf16 rounding: relative 2^-8
      ASSERT_NEAR(out[i], fq[i], std::fabs(fq[i]) * (1.0f / 256.0f)) << c().key << " " << i;
  }
}

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) {
  return info.param.key;
}

TEST(CtGoldenData, HasEveryCase) { EXPECT_EQ(golden_cases().size(), 38u); }

INSTANTIATE_TEST_SUITE_P(AllCases, CtGolden, ::testing::ValuesIn(golden_cases()), case_name);

}  // namespace
}  // namespace lowbit::quant
