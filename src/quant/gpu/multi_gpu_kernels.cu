// scale_add_f32: see multi_gpu_kernels.h. Memory-bound (12 bytes per element): an 8B down_proj
// Hessian (14336², 822 MB) takes ~0.5 ms at the H200's bandwidth.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "quant/gpu/multi_gpu_kernels.h"

namespace lowbit::quant::gpu {

namespace {

constexpr int kThreads = 256;

__global__ void scale_add_kernel(float* y, double a, const float* x, double b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    y[i] = static_cast<float>(a * static_cast<double>(y[i]) + b * static_cast<double>(x[i]));
  }
}

}  // namespace

void scale_add_f32(float* y, double a, const float* x, double b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8);
  scale_add_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(y, a, x, b, n);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::quant::gpu
