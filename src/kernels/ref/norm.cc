// RMSNorm and the residual add: row-wise fp32 loops, parallel over rows when there are many.
#include <cmath>

#include "kernels/ops.h"

namespace lowbit::kernels {

namespace {
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelElements = 1 << 15;
}  // namespace

void rmsnorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
             float* out) {
#pragma omp parallel for schedule(static) if (rows > 1 && rows * dim >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* outr = out + r * dim;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < dim; ++i) sum += xr[i] * xr[i];
    // torch: x * rsqrt(mean(x²) + eps), then (Llama style) times the weight.
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) outr[i] = (xr[i] * inv) * weight[i];
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace lowbit::kernels
