// Decode-sized dense BF16 linear layers: y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias) for m <= 8, a
// streaming kernel that reads the weight once at close to HBM bandwidth. The GPU model uses the
// plain GEMV; the fused variants below (SiLU input, residual add, add + next RMSNorm) are kept
// with their tests and bench but measured slower on the H200 than the separate kernels
// (bench/NOTES.md "Decode GEMV"), so the model does not call them. cuBLASLt (gemm_bf16.h)
// launches one kernel tuned for large m; at m = 1 it reaches 57 % of HBM on a 4096x4096 weight.
//
// Method. One CTA per 16 output features (one mma tile), its 8 warps interleaved over k in
// 32-wide chunks (warp w takes chunks w, w + 8, ...; 4 chunks in flight per warp: 4 KB of weight
// in flight per warp, ~96 KB per SM at 3 CTAs per SM). Each lane loads 16 bytes of two weight rows
// per chunk straight into registers (ld.global.nc, L1 bypassed) and feeds them, with x, to
// mma.sync m16n8k16 (bf16 in, fp32 accumulate): x is the 8-column operand, so m = 1..8 costs the
// same instructions. The k order inside a lane's 16 bytes is permuted identically for w and x, so
// no shuffle is needed. The CTA's 8 warp partial sums are added in shared memory in warp order
// (deterministic; no atomics, no workspace), the bias added in fp32, the result rounded once.
//
// Numerics: as gemm_bf16 (exact bf16 products, fp32 accumulation, one rounding at the end; the
// summation order differs, within fp32 rounding). Each output element's value does not depend on
// m or on the other rows of x (the mma columns are independent), so a batch of decode rows gives
// the same bits as each row alone. NaN and Inf propagate as in any fp32 sum.
//
// Shapes: any m in [0, 8], n, k >= 1. The streaming kernel needs k % 8 == 0 and x, w 16-byte
// aligned (gemv_bf16_vectorized); other calls run a plain warp-per-feature kernel (correct, slow:
// callers that care use cuBLASLt there, as GpuLinear does). y and bias need only 2-byte alignment.
// Asynchronous on `stream`; no allocation, no synchronization. Argument errors throw
// InvalidArgument naming the function and the argument.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::kernels::cuda {

// Most rows of x one call takes (the mma's 8 columns).
inline constexpr int64_t kGemvMaxRows = 8;

// True when the streaming kernel (not the fallback) runs for x rows of `x_stride` elements
// (k for gemv_bf16, 2k for gemv_bf16_silu) and weight rows of k elements.
bool gemv_bf16_vectorized(const void* x, int64_t x_stride, int64_t k, const void* w);

// y[m, n] (bf16, dense) = x[m, k] · w[n, k]ᵀ + bias[n] (bias bf16, optional, added in fp32).
// y must not overlap x, w or bias.
void gemv_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, uint16_t* y,
               cudaStream_t stream, const uint16_t* bias = nullptr);

// The MLP's down projection fused with its activation: y = a · wᵀ (+ bias) with
// a[r][i] = bf16(silu(g) · u), g = gate_up[r][i], u = gate_up[r][k + i] (gate_up: [m, 2k], the
// output of a merged gate_up projection). a is rounded exactly as silu_and_mul (small_ops.h)
// rounds it, so the result has the bits of silu_and_mul followed by gemv_bf16.
void gemv_bf16_silu(const uint16_t* gate_up, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                    uint16_t* y, cudaStream_t stream, const uint16_t* bias = nullptr);

// The residual connection in the epilogue: residual[r][j] = bf16(residual[r][j] + bf16(y[r][j]))
// with y = x · wᵀ (+ bias), residual [m, n] dense, in place. These are the bits of gemv_bf16 into a
// buffer followed by fused_add_rmsnorm's residual update (small_ops.h), so the norm that follows
// can be a plain rmsnorm of the residual. residual must not overlap x, w or bias.
void gemv_bf16_add(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                   uint16_t* residual, cudaStream_t stream, const uint16_t* bias = nullptr);

// The residual connection and the RMSNorm after it (the decoder's fused_add_rmsnorm) in the same
// launch: residual = bf16(residual + bf16(y)) as gemv_bf16_add, then out = rmsnorm(residual) ·
// weight computed by the CTA that finishes last (a device counter), with the bits of small_ops'
// fused_add_rmsnorm(y, residual, weight, eps). `counter` is one device uint32 that is zero before
// the first call; every call leaves it zero. Calls sharing a counter must not run concurrently
// (one stream). When the streaming kernel or the norm's 16-byte path cannot run (n % 8 != 0,
// misaligned buffers), the norm runs as small_ops' rmsnorm after the GEMV: same bits, one launch
// more.
struct GemvResidualNorm {
  uint16_t* residual = nullptr;   // [m, n], updated in place
  const float* weight = nullptr;  // fp32 [n]
  float eps = 1e-6f;
  uint16_t* out = nullptr;  // [m, n]; must not overlap residual, x or w
  uint32_t* counter = nullptr;
};

// True when the norm runs inside the GEMV launch (one kernel) for these buffers.
bool gemv_bf16_rmsnorm_fused(const void* x, int64_t x_stride, int64_t k, const void* w, int64_t n,
                             const GemvResidualNorm& norm);

void gemv_bf16_add_rmsnorm(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                           const GemvResidualNorm& norm, cudaStream_t stream,
                           const uint16_t* bias = nullptr);

// gemv_bf16_silu's input (gate_up [m, 2k]) with gemv_bf16_add_rmsnorm's epilogue.
void gemv_bf16_silu_add_rmsnorm(const uint16_t* gate_up, int64_t m, int64_t k, const uint16_t* w,
                                int64_t n, const GemvResidualNorm& norm, cudaStream_t stream,
                                const uint16_t* bias = nullptr);

}  // namespace lowbit::kernels::cuda
