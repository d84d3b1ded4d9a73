// qparams math: FORMATS.md §3 worked examples 2, 3, 5, 6 and 7, torch's fp8 cast, dynamic
// activation fake quantization against compressed-tensors, and error bounds per preset.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/float_convert.h"
#include "ct_golden.h"
#include "lowbit/error.h"
#include "quant/scheme/packing.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {
namespace {

QuantArgs int_group(int bits, int64_t g, bool symmetric) {
  QuantArgs a;
  a.num_bits = bits;
  a.strategy = Strategy::Group;
  a.group_size = g;
  a.symmetric = symmetric;
  return a;
}

std::vector<float> codes_of(const std::vector<float>& x, const QParams& qp, const QuantArgs& a) {
  std::vector<float> q;
  for (float v : x) q.push_back(quantize_value(v, qp.scale[0], qp.zero_at(0, 0), a, DType::F32,
                                              qp.global_scale));
  return q;
}

TEST(WorkedExamples, SymmetricInt4Group) {  // FORMATS.md §3 item 2
  const std::vector<float> x = {0.3125f, -0.625f, 0.875f, 1.875f, -1.875f, 0.0f, 0.125f, -0.375f};
  const QuantArgs a = int_group(4, 8, true);
  const QParams qp = observe_weight_minmax(x.data(), 1, 8, a, DType::F32);
  ASSERT_EQ(qp.scale, std::vector<float>{0.25f});
  const std::vector<float> q = codes_of(x, qp, a);
  EXPECT_EQ(q, (std::vector<float>{1, -2, 4, 7, -8, 0, 0, -2}));
  std::vector<int8_t> q8(q.begin(), q.end());
  EXPECT_EQ(pack_int_rows(q8.data(), 1, 8, 4), std::vector<int32_t>{1753283689});  // 0x6880FC69
  std::vector<float> dq;
  for (float v : q) dq.push_back(dequantize_value(v, 0.25f, 0.0f, a, DType::F32));
  EXPECT_EQ(dq, (std::vector<float>{0.25f, -0.5f, 1.0f, 1.75f, -2.0f, 0.0f, 0.0f, -0.5f}));
}

TEST(WorkedExamples, AsymmetricInt4) {  // FORMATS.md §3 item 3
  const std::vector<float> x = {-0.5f, 0.0f, 1.0f, 3.25f, 0.375f, 0.625f, 2.0f, -0.25f};
  const QuantArgs a = int_group(4, 8, false);
  const QParams qp = observe_weight_minmax(x.data(), 1, 8, a, DType::F32);
  EXPECT_EQ(qp.scale, std::vector<float>{0.25f});
  EXPECT_EQ(qp.zero_point, std::vector<float>{-6.0f});
  const std::vector<float> q = codes_of(x, qp, a);
  EXPECT_EQ(q, (std::vector<float>{-8, -6, -2, 7, -4, -4, 2, -7}));  // -4.5 → -4, -3.5 → -4
  std::vector<int8_t> q8(q.begin(), q.end());
  EXPECT_EQ(pack_int_rows(q8.data(), 1, 8, 4), std::vector<int32_t>{440727072});  // 0x1A44F620
}

TEST(WorkedExamples, Fp8PerTensor) {  // FORMATS.md §3 item 5
  const std::vector<float> x = {0.5f, -3.5f, 1.3f, 2.8f};
  QuantArgs a;
  a.type = QuantType::Float;
  const QParams qp = observe_weight_minmax(x.data(), 1, 4, a, DType::F32);
  EXPECT_EQ(qp.scale, std::vector<float>{0.0078125f});
  const std::vector<float> q = codes_of(x, qp, a);
  EXPECT_EQ(q, (std::vector<float>{64, -448, 160, 352}));
  std::vector<uint8_t> bytes;
  for (float v : q) bytes.push_back(f32_to_fp8_e4m3(v));
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0x68, 0xFE, 0x72, 0x7B}));
  std::vector<float> dq;
  for (float v : q) dq.push_back(dequantize_value(v, qp.scale[0], 0.0f, a, DType::F32));
  EXPECT_EQ(dq, (std::vector<float>{0.5f, -3.5f, 1.25f, 2.75f}));
}

QuantArgs nvfp4_args() {
  QuantArgs a;
  a.num_bits = 4;
  a.type = QuantType::Float;
  a.strategy = Strategy::TensorGroup;
  a.group_size = 16;
  a.scale_dtype = DType::F8_E4M3;
  a.zp_dtype = DType::F8_E4M3;
  return a;
}

TEST(WorkedExamples, Nvfp4Group) {  // FORMATS.md §3 item 6
  const std::vector<float> x = {12, -6, 3, 1, 0.5f, -0.25f, 0, 2.2f,
                                4.4f, -1.1f, 0.9f, 5.5f, -12, 0.1f, 7, -2.9f};
  const QuantArgs a = nvfp4_args();
  EXPECT_EQ(nvfp4_global_scale(12.0f), 224.0f);
  const QParams qp = observe_weight_minmax(x.data(), 1, 16, a, DType::F32);
  EXPECT_EQ(qp.global_scale, 224.0f);
  ASSERT_EQ(qp.scale, std::vector<float>{448.0f});
  EXPECT_EQ(f32_to_fp8_e4m3(qp.scale[0]), 0x7E);
  std::vector<uint8_t> codes;
  for (float v : codes_of(x, qp, a)) codes.push_back(fp4_code(v));
  EXPECT_EQ(codes, (std::vector<uint8_t>{7, 13, 3, 1, 0, 8, 0, 2, 4, 9, 1, 5, 15, 0, 6, 11}));
  EXPECT_EQ(pack_fp4_rows(codes.data(), 1, 16),
            (std::vector<uint8_t>{0xD7, 0x13, 0x80, 0x20, 0x94, 0x51, 0x0F, 0xB6}));
}

TEST(WorkedExamples, MxScales) {  // FORMATS.md §3 item 7
  QuantArgs a;
  a.num_bits = 4;
  a.type = QuantType::Float;
  a.strategy = Strategy::Group;
  a.group_size = 32;
  a.scale_dtype = DType::U8;
  const std::vector<float> absmax = {5.0f, 7.0f, 0.8f, 3.0f};
  std::vector<float> mins;
  for (float v : absmax) mins.push_back(-v);
  const QParams qp = qparams_from_minmax(mins, absmax, 1, 4, a, DType::BF16);
  // E8M0 127, 128, 124, 126
  EXPECT_EQ(qp.scale, (std::vector<float>{1.0f, 2.0f, 0.125f, 0.5f}));
}

TEST(Qparams, ZeroGroupsGetTheDtypeEpsilon) {
  const std::vector<float> zeros(4, 0.0f);
  QuantArgs a = int_group(4, 4, true);
  EXPECT_EQ(observe_weight_minmax(zeros.data(), 1, 4, a, DType::BF16).scale[0], 0.0078125f);
  EXPECT_EQ(observe_weight_minmax(zeros.data(), 1, 4, a, DType::F16).scale[0], 0.0009765625f);
  EXPECT_EQ(observe_weight_minmax(zeros.data(), 1, 4, a, DType::F32).scale[0], 1.1920929e-07f);
  QuantArgs n = nvfp4_args();
  n.group_size = 4;
  const QParams qp = observe_weight_minmax(zeros.data(), 1, 4, n, DType::BF16);
  EXPECT_EQ(qp.scale[0], 0.125f);  // fp8 scale dtype
  EXPECT_EQ(qp.global_scale, 1.0f);  // 2688 / tiny overflows: nan_to_num → 1
}

TEST(Qparams, RejectsBadInput) {
  const std::vector<float> x(10, 1.0f);
  EXPECT_THROW(observe_weight_minmax(x.data(), 1, 10, int_group(4, 4, true), DType::BF16),
               InvalidArgument);  // 10 columns, groups of 4
  QuantArgs token;
  token.strategy = Strategy::Token;
  EXPECT_THROW(observe_weight_minmax(x.data(), 1, 10, token, DType::BF16), InvalidArgument);
  EXPECT_THROW(qparams_from_minmax({0.0f}, {1.0f}, 1, 1, nvfp4_args(), DType::BF16),
               InvalidArgument);  // tensor_group without a global scale
}

// torch's float → float8_e4m3fn, values checked against torch 2.11 (see the report).
TEST(Fp8Cast, MatchesTorch) {
  const std::vector<std::pair<float, uint8_t>> cases = {
      {448.0f, 0x7E}, {449.0f, 0x7E}, {463.9f, 0x7E}, {464.0f, 0x7E}, {465.0f, 0x7F},
      {480.0f, 0x7F}, {1e9f, 0x7F},   {INFINITY, 0x7F}, {NAN, 0x7F},  {-464.0f, 0xFE},
      {-480.0f, 0xFF}, {0x1p-10f, 0}, {0x1p-11f, 0},  {0x1.0004p-10f, 1}, {0x1.8p-9f, 2},
      {0x1.4p-8f, 2}, {-0.0f, 0x80},  {0.0f, 0},      {0x1p-6f, 0x08}, {0x1.fp-7f, 0x08}};
  for (const auto& [f, code] : cases) EXPECT_EQ(f32_to_fp8_e4m3(f), code) << f;
  // Every finite code round-trips, and each value between two neighbours rounds to nearest even.
  for (int c = 0; c < 0x7F; ++c) {
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f32_to_fp8_e4m3(v), c);
    EXPECT_EQ(f32_to_fp8_e4m3(-v), c | 0x80);
    if (c < 0x7E) {
      const float mid = (v + fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1))) / 2;
      EXPECT_EQ(f32_to_fp8_e4m3(mid), (c % 2 == 0) ? c : c + 1) << mid;
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)), c);
      EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 1e3f)), c + 1);
    }
  }
}

TEST(Fp4, RoundingFollowsComprssedTensors) {
  const std::vector<std::pair<float, float>> cases = {
      {0.25f, 0}, {0.2500001f, 0.5f}, {0.75f, 1}, {1.25f, 1}, {1.2500001f, 1.5f}, {1.75f, 2},
      {2.5f, 2}, {2.5000002f, 3}, {3.5f, 4}, {5.0f, 4}, {5.0000005f, 6}, {100.0f, 6}, {-2.6f, -3}};
  for (const auto& [x, want] : cases) EXPECT_EQ(round_to_fp4(x), want) << x;
  EXPECT_TRUE(std::signbit(round_to_fp4(-0.1f)));   // sign(x) * 0
  EXPECT_FALSE(std::signbit(round_to_fp4(-0.0f)));  // torch.sign(-0.0) is 0
}

// Dynamic activation fake quantization against compute_dynamic_scales_and_zp + fake_quantize.
TEST(FakeQuantizeActivations, MatchCompressedTensors) {
  const auto cases = testing::load_json("ct_act_vectors.json");
  ASSERT_EQ(cases.size(), 8u);
  for (auto it = cases.begin(); it != cases.end(); ++it) {
    const QuantArgs a = parse_quant_args(nlohmann::json::parse(it.value()["args"].dump()), it.key());
    const auto& gs = it.value()["global_scale"];
    std::vector<float> x = testing::to_floats(testing::vectors().get(it.key() + ".input"));
    const std::vector<float> want = testing::to_floats(testing::vectors().get(it.key() + ".output"));
    fake_quantize_activations(x.data(), 4, 256, a, gs.is_null() ? 0.0f : gs.get<float>());
    EXPECT_EQ(testing::first_bit_difference(x, want), -1) << it.key();
  }
}

// The same vectors stacked 50 times (200 rows): large inputs are split over threads by rows,
// which must not change a value (tiling keeps every per-row, per-group and per-tensor range).
TEST(FakeQuantizeActivations, ManyRowsMatchCompressedTensorsToo) {
  const auto cases = testing::load_json("ct_act_vectors.json");
  constexpr int kCopies = 50;
  for (auto it = cases.begin(); it != cases.end(); ++it) {
    const QuantArgs a = parse_quant_args(nlohmann::json::parse(it.value()["args"].dump()), it.key());
    const auto& gs = it.value()["global_scale"];
    const std::vector<float> x = testing::to_floats(testing::vectors().get(it.key() + ".input"));
    const std::vector<float> want = testing::to_floats(testing::vectors().get(it.key() + ".output"));
    std::vector<float> tiled, tiled_want;
    for (int c = 0; c < kCopies; ++c) {
      tiled.insert(tiled.end(), x.begin(), x.end());
      tiled_want.insert(tiled_want.end(), want.begin(), want.end());
    }
    fake_quantize_activations(tiled.data(), 4 * kCopies, 256, a, gs.is_null() ? 0.0f : gs.get<float>());
    EXPECT_EQ(testing::first_bit_difference(tiled, tiled_want), -1) << it.key();
  }
}

// Quantize → dequantize error per element, for every preset's weights, against the bound its grid
// allows. s is the effective scale (scale / global scale). bf16 arithmetic adds up to 2^-8
// relative twice (x/s rounded before the rounding to the grid, and the output), hence |x|·2^-7.
float error_bound(float x, float s, const QuantArgs& a) {
  const float ax = std::fabs(x), rounding = ax * 0x1p-7f;
  if (a.type == QuantType::Int)  // half a step; asymmetric: the rounded zero point adds half
    return s * (a.symmetric ? 0.5f : 1.0f) + rounding;
  if (a.num_bits == 8) return ax * 0x1p-4f + s * 0x1p-10f + rounding;  // 3 mantissa bits
  return ax * 0.25f + s * 0.25f + rounding;  // fp4: widest half gap 4..6, and 0..0.5
}

TEST(FakeQuantize, ErrorWithinTheGridBoundForEveryPreset) {
  std::mt19937 rng(42);
  std::normal_distribution<float> n(0.0f, 0.02f);
  const int64_t rows = 16, cols = 256;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = round_to_dtype(n(rng), DType::BF16);
  w[5] = 0.5f;  // an outlier
  std::vector<double> int_error;  // mean |error| of W2A16 .. W8A16
  for (const auto& name : preset_names()) {
    const QuantScheme s = preset_scheme(name, {"Linear"});
    if (!s.weights) continue;
    const QuantArgs& a = *s.weights;
    const QParams qp = observe_weight_minmax(w.data(), rows, cols, a, DType::BF16);
    std::vector<float> fq = w;
    fake_quantize(fq.data(), rows, cols, qp, a, DType::BF16);
    double total = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float scale = qp.scale_at(grid_row_of(a, r), group_of_column(a, c));
        if (qp.global_scale > 0) scale /= qp.global_scale;
        const size_t i = static_cast<size_t>(r * cols + c);
        ASSERT_LE(std::fabs(fq[i] - w[i]), error_bound(w[i], scale, a))
            << name << " [" << r << ", " << c << "] " << w[i] << " → " << fq[i];
        total += std::fabs(fq[i] - w[i]);
      }
    if (name.size() == 5 && name.substr(2) == "A16") int_error.push_back(total);  // W2A16..W8A16
  }
  ASSERT_EQ(int_error.size(), 7u);
  for (size_t i = 1; i < int_error.size(); ++i) EXPECT_LT(int_error[i], int_error[i - 1]) << i;
}

}  // namespace
}  // namespace lowbit::quant
