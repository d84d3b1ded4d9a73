// The fused element-wise and row-wise ops of a Llama-family decoder on the GPU: RMSNorm (plain and
// fused with the residual add), SiLU-and-mul, NeoX-style rotary embedding, embedding gather and the
// residual add. Activations are BF16 (raw bit patterns, row-major [rows, features]); all math is
// fp32 and each output is rounded to bf16 once (≤ 2^-9 relative). Every function is asynchronous on
// `stream`, allocates nothing, and validates its arguments on the host (InvalidArgument naming the
// function and the argument). rows == 0 launches nothing. Rows, features and products of the two
// must fit the kernels' indexing: rows < 2^31, elements < 2^62.
//
// Speed: each kernel reads and writes every element once with 16-byte accesses when the feature
// count is a multiple of 8 and the pointers are 16-byte aligned (cudaMalloc'd buffers and row
// offsets of such sizes are); otherwise a scalar path runs, correct for any size.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::kernels::cuda {

// out[r] = bf16(x[r] · rsqrt(mean(x[r]²) + eps) · weight), one row of `dim` values at a time.
// weight: fp32 [dim]. Chosen over bf16 because checkpoint norm weights (bf16) convert to fp32
// exactly once at load, the kernel then multiplies in fp32 with a single final rounding, and the
// CPU reference (kernels::rmsnorm) takes the same fp32 vector; the weight (dim·4 bytes, read by
// every row) stays in L2, so its size costs nothing. (HF and vLLM round x·rsqrt to bf16 before the
// weight multiply: results differ from theirs by about one bf16 ulp.)
// out may equal x (in place).
void rmsnorm(const uint16_t* x, const float* weight, float eps, int64_t rows, int64_t dim,
             uint16_t* out, cudaStream_t stream);

// vLLM's fused_add_rms_norm: residual = bf16(residual + x); x = rmsnorm(residual), both in place.
// The mean square is taken over the rounded residual, the value the next layer adds to, as HF's
// bf16 `hidden = residual + hidden; norm(hidden)` does.
void fused_add_rmsnorm(uint16_t* x, uint16_t* residual, const float* weight, float eps,
                       int64_t rows, int64_t dim, cudaStream_t stream);

// out[r][i] = bf16(silu(g) · u) with g = gate_up[r][i], u = gate_up[r][n + i]: the output of a merged
// gate_up projection ([rows, 2n], gate first) to [rows, n]. out must not overlap gate_up.
void silu_and_mul(const uint16_t* gate_up, int64_t rows, int64_t n, uint16_t* out,
                  cudaStream_t stream);

// Rotary embedding, half-split ("rotate_half", GPT-NeoX / HF Llama) pairing, in place on the query
// and key rows of `rows` tokens. q: [rows, heads · head_dim] with rows q_stride elements apart;
// k: [rows, kv_heads · head_dim], k_stride apart (stride 0: packed; strides let q and k be column
// slices of a fused qkv output). For each head the first rotary_dim values rotate (pair j with
// j + rotary_dim/2), the rest pass through. cos_sin: fp32 [max_positions, rotary_dim], row p holds
// cos(p·θ_j) for j < rotary_dim/2 then sin(p·θ_j), already multiplied by any attention scaling.
// positions: int32 [rows] on the device. Positions are the engine's own bookkeeping, checked against
// the context length before scheduling; the kernel still clamps them into [0, max_positions) so a
// bug cannot read outside the cache. k may be null when kv_heads == 0.
void rope_neox(uint16_t* q, uint16_t* k, const int32_t* positions, int64_t rows, int heads,
               int kv_heads, int head_dim, int rotary_dim, const float* cos_sin,
               int64_t max_positions, cudaStream_t stream, int64_t q_stride = 0,
               int64_t k_stride = 0);

// out[r] = table[ids[r]] for bf16 table [vocab, hidden] and device int32 ids [rows].
// An id outside [0, vocab) cannot crash the kernel: its output row is written as zeros (not a
// clamped id, which would look like a real token) and, when `error` is non-null, the first such row
// is recorded in error[0..1] = {row + 1, id} (error: device int32[kEmbeddingErrorWords], zeroed by
// the caller; later bad rows leave it unchanged). Validation happens on the device because token
// ids produced by on-device sampling or replayed in a CUDA graph never reach the host before the
// launch: a host check would cost a copy and a synchronization per step. The host reads the flag
// when it next synchronizes (check_embedding_error).
inline constexpr int kEmbeddingErrorWords = 2;
void embedding_gather(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids,
                      int64_t rows, uint16_t* out, int32_t* error, cudaStream_t stream);

// Synchronizes `stream`, reads the error words written by embedding_gather and, if a bad id was
// seen, zeroes them again and throws InvalidArgument naming the row and the id.
void check_embedding_error(int32_t* error, int64_t vocab, cudaStream_t stream);

// y[i] = bf16(y[i] + x[i]) for n values (the residual connection). x may equal y.
void add(uint16_t* y, const uint16_t* x, int64_t n, cudaStream_t stream);

}  // namespace lowbit::kernels::cuda
