// How a Linear's input is quantized before its product, for every place that runs one: the
// quantization methods' kernels (quant/methods/kernel_linear), the dense layers the quantize
// pipeline evaluates while it calibrates (models::Linear), and the GPU backends that read either.
// One value type, so a static scale, a zero point and NVFP4's global scale each have their own field
// instead of sharing one float whose meaning depends on the strategy.
#pragma once

#include <cstdint>

#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

struct InputQuant {
  QuantArgs args;           // type, bits, strategy (token / tensor / group / tensor_group), symmetric
  float static_scale = 0;   // static (per-tensor) schemes: input_scale
  float static_zero = 0;    // static asymmetric schemes: input_zero_point
  float global_scale = 0;   // tensor_group (NVFP4) inputs: input_global_scale (0: per call)

  // True when quantizing a batch of rows gives each row what quantizing it alone would: static
  // scales, per-token or per-group dynamic scales, and NVFP4 local groups under a calibrated
  // global scale. A per-tensor dynamic scale (or an uncalibrated NVFP4 global one) couples rows.
  bool rows_independent() const;
};

// Fake-quantizes x [rows, cols] into out as compressed-tensors' forward does (fp32 arithmetic).
void fake_quantize_input(const float* x, int64_t rows, int64_t cols, const InputQuant& input,
                         float* out);

}  // namespace lowbit::quant
