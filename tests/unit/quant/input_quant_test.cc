// quant::InputQuant: the fast fp8 input path equals the general activation fake quantization (which
// is bit-exact with compressed-tensors: qparams_test.cc, ct_golden_test.cc) on every element, and
// rows_independent() says which schemes let a batch be split into rows.
#include "quant/scheme/input_quant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "quant/scheme/qparams.h"

namespace lowbit::quant {
namespace {

QuantArgs dynamic_args(QuantType type, int bits, Strategy strategy, int64_t group_size = 0) {
  QuantArgs a;
  a.num_bits = bits;
  a.type = type;
  a.symmetric = true;
  a.strategy = strategy;
  a.group_size = group_size;
  a.dynamic = DynamicMode::Dynamic;
  return a;
}

TEST(FakeQuantizeInput, Fp8FastPathEqualsTheGeneralOne) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t rows = 9, cols = 384;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = normal(rng);
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(4 * cols + c)] = 0.0f;  // a zero row
  x[7] = 1e-30f;                                                                   // a subnormal
  for (const QuantArgs& args : {dynamic_args(QuantType::Float, 8, Strategy::Token),
                                dynamic_args(QuantType::Float, 8, Strategy::Tensor),
                                dynamic_args(QuantType::Float, 8, Strategy::Group, 128)}) {
    std::vector<float> fast(x.size()), general = x;
    fake_quantize_input(x.data(), rows, cols, InputQuant{.args = args}, fast.data());
    fake_quantize_activations(general.data(), rows, cols, args);
    ASSERT_EQ(std::memcmp(fast.data(), general.data(), fast.size() * sizeof(float)), 0)
        << to_string(args.strategy);
    ASSERT_NE(fast, x);  // it did round
  }
}

TEST(FakeQuantizeInput, StaticInputsUseTheirScaleAndZeroPoint) {
  QuantArgs a = dynamic_args(QuantType::Int, 8, Strategy::Tensor);
  a.dynamic = DynamicMode::Static;
  a.symmetric = false;
  // round(x / 0.5) + 10, clamped to [-128, 127], minus 10, times 0.5: 1.3 → 1.5, -70 → -69
  // (code -128), 100 → 58.5 (code 127).
  const std::vector<float> x = {1.3f, -70.0f, 100.0f};
  std::vector<float> out(x.size());
  fake_quantize_input(x.data(), 1, 3, InputQuant{.args = a, .static_scale = 0.5f, .static_zero = 10.0f},
                      out.data());
  EXPECT_EQ(out, (std::vector<float>{1.5f, -69.0f, 58.5f}));
}

TEST(InputQuant, RowsAreIndependentUnlessOneScaleSpansTheBatch) {
  EXPECT_TRUE((InputQuant{.args = dynamic_args(QuantType::Int, 8, Strategy::Token)}.rows_independent()));
  EXPECT_TRUE((InputQuant{.args = dynamic_args(QuantType::Float, 8, Strategy::Group, 128)}
                   .rows_independent()));
  EXPECT_FALSE((InputQuant{.args = dynamic_args(QuantType::Float, 8, Strategy::Tensor)}.rows_independent()));
  QuantArgs stat = dynamic_args(QuantType::Float, 8, Strategy::Tensor);
  stat.dynamic = DynamicMode::Static;
  EXPECT_TRUE((InputQuant{.args = stat, .static_scale = 0.1f}.rows_independent()));
  QuantArgs nvfp4 = dynamic_args(QuantType::Float, 4, Strategy::TensorGroup, 16);
  nvfp4.dynamic = DynamicMode::Local;
  EXPECT_FALSE((InputQuant{.args = nvfp4}.rows_independent()));  // global scale per call
  EXPECT_TRUE((InputQuant{.args = nvfp4, .global_scale = 3.0f}.rows_independent()));
}

}  // namespace
}  // namespace lowbit::quant
