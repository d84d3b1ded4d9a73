// The device kernels of gptq_quantize_cuda (gptq_kernels.cu), as launch functions on a stream.
// Internal to src/quant/gpu: gptq_cuda.cu strings them together with cuBLAS and cuSOLVER.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "quant/gpu/gptq_quant_device.cuh"

namespace lowbit::quant::gpu::detail {

// Sets *flag (device, zeroed by the caller) to 1 when some of the n values of x are NaN or Inf.
void launch_flag_nonfinite(const float* x, int64_t n, unsigned int* flag, cudaStream_t stream);

// out[r][k] = dead[k] ? 0 : w[r][perm[k]] (perm nullptr: the identity; dead nullptr: none).
void launch_permute_columns(const float* w, float* out, int64_t rows, int64_t cols,
                            const int64_t* perm, const uint8_t* dead, cudaStream_t stream);

// out[r][perm[k]] = round_to(wp[r][k], to) (perm nullptr: the identity).
void launch_unpermute_round(const float* wp, float* out, int64_t rows, int64_t cols,
                            const int64_t* perm, RoundTo to, cudaStream_t stream);

// out[i] = the fp32 value of bf16 bits in[i] (exact).
void launch_widen_bf16(const uint16_t* in, float* out, int64_t n, cudaStream_t stream);

// out[r][perm[k]] = f32_to_bf16(round_to(wp[r][k], BF16)) as bits (perm nullptr: the identity).
void launch_unpermute_bf16(const float* wp, uint16_t* out, int64_t rows, int64_t cols,
                           const int64_t* perm, cudaStream_t stream);

// The factorization's input, column-major [n, n] for potrf(UPPER): the upper triangle of
// A = J·Hp·J (J the reversal, Hp[i][j] = h[perm[i]][perm[j]] with its diagonal replaced by
// `diag`, the damped permuted diagonal) in double, as gptq.cc's factorize + inverse_upper_cholesky
// build it; the strict lower triangle zero.
void launch_build_factor_input(const float* h, double* a, int64_t n, const int64_t* perm,
                               const double* diag, cudaStream_t stream);

// u (row-major fp32 [n, n]) = J·(Uc⁻¹)ᵀ·J's upper triangle from `a`, which holds Uc⁻¹ (the
// inverted potrf(UPPER) factor, column-major) in its upper triangle; zero below the diagonal.
void launch_extract_u(const double* a, float* u, int64_t n, cudaStream_t stream);

// Shared memory one column-loop launch needs for `tile_rows` rows and a block `bw` wide
// (u_shared: U's diagonal block held in shared memory too).
size_t block_kernel_smem(int tile_rows, int64_t bw, bool u_shared);
// Raises the kernel's dynamic shared-memory limit on the current device to at least `bytes`.
void prepare_block_kernel(size_t bytes);

// One block [i1, i1 + bw) of the column loop over every row of the permuted weight w (row-major
// [rows, cols], fp32, updated in place: quantized columns and the in-block error feedback);
// err (row-major [rows, bw]) receives the scaled errors, *loss (device double) += Σ rows
// float(Σ err²) / 2. u: the row-major fp32 [cols, cols] factor.
void launch_block(float* w, int64_t rows, int64_t cols, int64_t i1, int64_t bw, const float* u,
                  float* err, const QuantSpec& spec, int tile_rows, bool u_shared, double* loss,
                  cudaStream_t stream);

}  // namespace lowbit::quant::gpu::detail
