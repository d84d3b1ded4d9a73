// The naive definition of the FP8 weight-only matmul (fp8_matmul.h): each weight decoded and scaled
// in fp32 (e4m3(code) · scale, one rounding), fp32 accumulation in k order like ref::matmul.
#include <string>

#include "core/float_convert.h"
#include "kernels/fp8_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels::ref {

void matmul_fp8(const float* x, int64_t m, const Fp8Weights& w, const float* bias, float* y) {
  LOWBIT_CHECK(w.rows > 0 && w.cols > 0 && w.block_rows > 0 && w.block_cols > 0,
               "ref::matmul_fp8: empty shape or block");
  LOWBIT_CHECK(w.codes.size() == static_cast<size_t>(w.rows * w.cols),
               "ref::matmul_fp8: codes has the wrong size");
  const int64_t scale_rows = (w.rows + w.block_rows - 1) / w.block_rows;
  LOWBIT_CHECK(w.scales.size() == static_cast<size_t>(scale_rows * w.scale_cols()),
               "ref::matmul_fp8: scales has the wrong size");
  const int64_t k = w.cols, n = w.rows;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      float sum = 0.0f;
      for (int64_t c = 0; c < k; ++c) {
        const float deq = fp8_e4m3_to_f32(w.codes[static_cast<size_t>(r * k + c)]) * w.scale(r, c);
        sum += x[i * k + c] * deq;
      }
      y[i * n + r] = sum + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace lowbit::kernels::ref
