// Linear-layer products y = x · Wᵀ with fp32 activations and weights kept in their stored dtype
// (F32, F16, BF16). The entry point picks the fastest CPU kernel for this machine once (AVX-512
// BF16, AVX-512, AVX2+F16C, scalar); ref:: is the naive definition every kernel is tested against.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::kernels {

// x: [m, k] fp32 row-major; weight: [n, k] (F32/F16/BF16), row-major; y: [m, n] fp32.
// y[i][j] = sum_k x[i][k] * w[j][k] (+ bias[j] if bias is non-null; bias has n fp32 values).
// Threads: OpenMP over output columns (weights are read once per call).
void matmul(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias, float* y);

namespace ref {
void matmul(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias, float* y);
}  // namespace ref

// The name of the kernel matmul() dispatches to on this machine, for logs and benchmarks.
const char* matmul_kernel_name();

}  // namespace lowbit::kernels
