// The fast fp8 input path of the kernels equals the general activation fake quantization (which is
// bit-exact with compressed-tensors: tests/unit/quant) on every element.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "quant/methods/kernel_linear.h"
#include "quant/methods/online_linear.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {
namespace {

TEST(FakeQuantizeInput, Fp8FastPathEqualsTheGeneralOne) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t rows = 9, cols = 384;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = normal(rng);
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(4 * cols + c)] = 0.0f;  // a zero row
  x[7] = 1e-30f;                                                                   // a subnormal
  for (const QuantArgs& args : {fp8_dynamic_input_args(Strategy::Token),
                                fp8_dynamic_input_args(Strategy::Tensor),
                                fp8_dynamic_input_args(Strategy::Group, 128)}) {
    std::vector<float> fast(x.size()), general = x;
    fake_quantize_input(x.data(), rows, cols, InputQuant{args, 0.0f, 0.0f}, fast.data());
    fake_quantize_activations(general.data(), rows, cols, args);
    ASSERT_EQ(std::memcmp(fast.data(), general.data(), fast.size() * sizeof(float)), 0)
        << to_string(args.strategy);
    ASSERT_NE(fast, x);  // it did round
  }
}

}  // namespace
}  // namespace lowbit::quant
