// Linear-layer products y = x · Wᵀ with fp32 activations and weights kept in their stored dtype
// (F32, F16, BF16). The entry point picks the fastest CPU kernel for this machine once (AVX-512,
// AVX2+FMA+F16C, portable scalar); ref:: is the naive definition every kernel is tested against.
//
// Accuracy: every kernel decodes weights to fp32 exactly and accumulates in fp32; activations are
// never rounded. Results differ from ref:: only by summation order (|Δ| ≤ ~2·k·eps·Σ|x·w|).
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::kernels {

// x: [m, k] fp32 row-major; weight: [n, k] (F32/F16/BF16), row-major; y: [m, n] fp32.
// y[i][j] = sum_k x[i][k] * w[j][k] (+ bias[j] if bias is non-null; bias has n fp32 values).
// y must not overlap x, weight or bias. Threads: OpenMP (omp_get_max_threads(), fewer for small
// products, one when called from inside a parallel region); weights are read once per call.
// Throws Internal for a shape mismatch and Unsupported for another weight dtype.
void matmul(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias, float* y);

namespace ref {
void matmul(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias, float* y);
}  // namespace ref

// The name of the kernel matmul() dispatches to on this machine, for logs and benchmarks.
const char* matmul_kernel_name();

namespace cpu {

// The CPU kernel families; matmul() uses the best one the CPU supports.
enum class MatmulKernel : uint8_t {
  SCALAR,  // portable C++ (what the compiler makes of it for the baseline ISA)
  AVX2,    // AVX2 + FMA + F16C
  AVX512,  // AVX-512 F/BW/VL/DQ
};

// Which path of a kernel family runs. AUTO picks by the number of rows of x: the streaming path
// for decode-sized m, the register-blocked one for prefill-sized m. The others force a path
// (tests and benchmarks); both are correct for any shape.
enum class MatmulPath : uint8_t { AUTO, STREAMING, BLOCKED };

const char* matmul_kernel_name(MatmulKernel kernel);
bool matmul_kernel_supported(MatmulKernel kernel);  // by this CPU and OS
MatmulKernel matmul_best_kernel();                  // what matmul() uses
std::vector<MatmulKernel> matmul_supported_kernels();

// matmul() with the kernel (and path) chosen by the caller. Throws Unsupported when this CPU
// cannot run `kernel`.
void matmul_with(MatmulKernel kernel, MatmulPath path, const float* x, int64_t m, int64_t k,
                 const Tensor& weight, const float* bias, float* y);

// Opt-in, lossy, for prefill only: rounds x to bf16 (nearest even) and multiplies with the CPU's
// bf16 dot-product instruction (vdpbf16ps: twice the fp32 FMA rate), accumulating in fp32. Not
// what matmul() does: rounding activations costs ~2^-9 relative error per product, more than the
// model-level 1e-3 logit tolerance allows. BF16 weights only (others throw Unsupported).
bool matmul_bf16_dot_supported();  // AVX-512 F/BW/VL/DQ + AVX512_BF16
void matmul_bf16_dot(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias,
                     float* y);

}  // namespace cpu

}  // namespace lowbit::kernels
