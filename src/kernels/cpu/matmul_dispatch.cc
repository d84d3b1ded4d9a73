// Picks the matmul kernel for this CPU. Placeholder: the scalar reference until the SIMD kernels land.
#include "kernels/matmul.h"

namespace lowbit::kernels {

void matmul(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias, float* y) {
  ref::matmul(x, m, k, weight, bias, y);
}

const char* matmul_kernel_name() { return "ref"; }

}  // namespace lowbit::kernels
