// Elementwise math with torch's CPU rounding rules, for the calibration algorithms to reproduce
// llm-compressor bit for bit: a bf16 / f16 op runs in fp32 and rounds to the tensor's dtype, and
// Tensor.pow(python_float) first converts the exponent to the tensor's dtype (bf16(2.4) = 2.40625)
// and special-cases the exponents 0, 0.5, 1 and 2.
#pragma once

#include <cmath>

#include "lowbit/dtype.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant::detail {

inline float rd(float x, DType dtype) { return round_to_dtype(x, dtype); }

// Tensor(dtype).pow(exponent) for one element (F32, BF16, F16).
inline float torch_pow(float x, double exponent, DType dtype) {
  const float e = rd(static_cast<float>(exponent), dtype);
  float y;
  if (e == 0.0f) y = 1.0f;
  else if (e == 0.5f) y = std::sqrt(x);
  else if (e == 1.0f) y = x;
  else if (e == 2.0f) y = x * x;
  else y = std::pow(x, e);
  return rd(y, dtype);
}

// Tensor(float64).pow(exponent).
inline double torch_pow_f64(double x, double e) {
  if (e == 0.0) return 1.0;
  if (e == 0.5) return std::sqrt(x);
  if (e == 1.0) return x;
  if (e == 2.0) return x * x;
  return std::pow(x, e);
}

}  // namespace lowbit::quant::detail
