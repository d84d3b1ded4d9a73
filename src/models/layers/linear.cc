#include "models/layers/linear.h"

#include <algorithm>

#include "quant/scheme/qparams.h"

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
  quantized.assign(x, x + rows * k);
  if (input_quant->is_dynamic()) {
    const bool nvfp4 = input_quant->strategy == quant::Strategy::TensorGroup;
    quant::fake_quantize_activations(quantized.data(), rows, k, *input_quant,
                                     nvfp4 ? input_scale : 0.0f);
  } else {
    // A plain pointer: inside the parallel loop `quantized` would name each thread's own copy.
    float* values = quantized.data();
    const int64_t n = rows * k;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      values[i] = quant::fake_quantize_value(values[i], input_scale, 0.0f, *input_quant,
                                             DType::F32);
    }
  }
  kernels::matmul(quantized.data(), rows, k, weight, bias_data, y);
}

}  // namespace lowbit::models
