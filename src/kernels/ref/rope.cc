// Rotary position embedding with half-split pairs (j, j + d/2), as transformers' rotate_half.
#include "kernels/ops.h"

namespace lowbit::kernels {

void rope_apply(float* x, int64_t rows, int64_t row_stride, int heads, int head_dim, int rotary_dim,
                const float* cos, const float* sin) {
  const int half = rotary_dim / 2;
#pragma omp parallel for schedule(static) if (rows * heads * head_dim >= (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int h = 0; h < heads; ++h) {
      float* p = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
#pragma omp simd
      for (int j = 0; j < half; ++j) {
        const float a = p[j];
        const float b = p[j + half];
        // x·cos + rotate_half(x)·sin, rotate_half(x) = [-x2, x1]
        p[j] = a * c[j] - b * s[j];
        p[j + half] = b * c[j] + a * s[j];
      }
    }
  }
}

}  // namespace lowbit::kernels
