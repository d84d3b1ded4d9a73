#include "models/layers/linear.h"

#include <vector>

namespace lowbit::models {

void Linear::apply(const float* x, int64_t rows, float* y) const {
  if (observer != nullptr) observer->observe(x, rows, in_features());
  compute(x, rows, y);
  if (observer != nullptr) observer->observe_output(y, rows, out_features());
}

void Linear::compute(const float* x, int64_t rows, float* y) const {
  const int64_t k = in_features();
  const float* bias_data = bias.empty() ? nullptr : bias.data();
  if (method) {
    method->apply(x, rows, bias_data, y);
    return;
  }
  if (!input_quant) {
    kernels::matmul(x, rows, k, weight, bias_data, y);
    return;
  }
  // The caller's x must stay intact (q, k and v share one input): quantize a copy.
  thread_local std::vector<float> quantized;
  quantized.resize(static_cast<size_t>(rows * k));
  quant::fake_quantize_input(x, rows, k, *input_quant, quantized.data());
  kernels::matmul(quantized.data(), rows, k, weight, bias_data, y);
}

}  // namespace lowbit::models
