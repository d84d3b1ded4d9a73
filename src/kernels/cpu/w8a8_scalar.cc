// The portable W8A8 kernel: plain row-major codes, int32 dot products per group (the compiler
// vectorizes them for the baseline ISA), any group size. Also the scalar activation quantizer,
// which every SIMD quantizer must match bit for bit.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "kernels/cpu/w8a8_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

// round_half_even(clamp(v, -128, 127)), NaN → 0 (w8a8_matmul.h).
int8_t to_code(float v) {
  if (std::isnan(v)) return 0;
  const float clamped = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
  return static_cast<int8_t>(std::nearbyint(clamped));
}

int32_t dot(const int8_t* q, const uint8_t* code, int64_t count) {
  int32_t sum = 0;
  for (int64_t c = 0; c < count; ++c) sum += q[c] * static_cast<int32_t>(code[c]);
  return sum;
}

}  // namespace

void w8a8_quantize_scalar(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                          int64_t stride, int8_t* codes, float* scales) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    int8_t* out = codes + i * stride;
    float scale = act.static_scale;
    float zero = static_cast<float>(act.static_zero);
    if (act.dynamic) {
      float absmax = 0.0f;
      bool nan = false;
      for (int64_t c = 0; c < k; ++c) {
        const float a = std::fabs(row[c]);
        absmax = a > absmax ? a : absmax;  // NaN never wins a comparison
        nan = nan || a != a;
      }
      scale = nan ? NAN : absmax / 127.5f;
      if (scale == 0.0f) scale = FLT_EPSILON;
      zero = 0.0f;
    }
    scales[i] = scale;
    for (int64_t c = 0; c < k; ++c) out[c] = to_code(row[c] / scale + zero);
    for (int64_t c = k; c < stride; ++c) out[c] = 0;
  }
}

void w8a8_rows_scalar(const W8a8Plain& w, const Int8Rows& x, Range rows, const float* bias,
                      float* y) {
  const int64_t k = w.cols;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const uint8_t* code = w.codes + r * k;
    for (int64_t i = 0; i < x.m; ++i) {
      const int8_t* q = x.codes + i * x.stride;
      float acc = 0.0f;
      for (int64_t g = 0; g < w.groups; ++g) {
        const int64_t c0 = g * w.group_size, count = std::min(k, c0 + w.group_size) - c0;
        const int32_t zero = w.zeros ? w.zeros[r * w.groups + g] : w.symmetric_zero;
        const int32_t sum = dot(q + c0, code + c0, count) - zero * x.group_sums[i * w.groups + g];
        acc += w.scales[r * w.groups + g] * static_cast<float>(sum);
      }
      if (x.zero != 0) acc -= static_cast<float>(x.zero) * w.zero_x_terms[r];
      y[i * w.rows + r] = x.scales[i] * acc + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
