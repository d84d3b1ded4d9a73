#include "models/layers/linear.h"

#include <algorithm>

#include "quant/scheme/qparams.h"

namespace lowbit::models {

void Linear::apply(const float* x, int64_t rows, float* y) const {
  const int64_t k = in_features();
  if (observer != nullptr) observer->observe(x, rows, k);
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
  quantized.assign(x, x + rows * k);
  if (input_quant->is_dynamic()) {
    quant::fake_quantize_activations(quantized.data(), rows, k, *input_quant);
  } else {
    for (float& v : quantized) {
      v = quant::fake_quantize_value(v, input_scale, 0.0f, *input_quant, DType::F32);
    }
  }
  kernels::matmul(quantized.data(), rows, k, weight, bias_data, y);
}

}  // namespace lowbit::models
