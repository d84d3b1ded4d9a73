// Dense BF16 linear layers on the GPU through cuBLASLt: y = alpha · x · wᵀ (+ bias), fp32
// accumulation, for weights stored as torch Linear weights ([n, k] row-major, bf16).
//
// Layout trick: a row-major [r, c] matrix is the column-major [c, r] matrix with ld = c. So with
// column-major names W_c = w as [k, n], X_c = x as [k, m], Y_c = y as [n, m], the product is
// Y_c = W_cᵀ · X_c: cuBLASLt's "TN" case (A = W_c transposed, B = X_c as is) with M = n, N = m,
// K = k. TN is the layout Hopper's cuBLASLt kernels are tuned for, and the bias epilogue adds a
// vector over D's rows, which are our output features (bias[n]).
//
// Numerics: products of bf16 operands accumulated in fp32, split-K partial sums kept in fp32
// (reduction schemes that sum in the output type are excluded), one rounding at the end (bf16
// output: ≤ 2^-9 relative; fp32 output: none beyond fp32 accumulation).
//
// Alignment: cuBLASLt runs BF16 GEMMs for any m, n, k ≥ 1 and any 2-byte-aligned pointers, but its
// fast (TMA / 16-byte vector) kernels need every pointer 16-byte aligned and k, n multiples of 8
// (rows 16 bytes apart). Other shapes take slower fallback kernels; the alignment of each call's
// pointers is measured and passed to the heuristic, so a misaligned pointer never reaches a kernel
// that assumes more. What is rejected (InvalidArgument): null pointers, n or k < 1, m < 0, a bf16
// pointer that is not 2-byte aligned, an fp32 pointer (output, bias) that is not 4-byte aligned.
// m == 0 is an empty batch: nothing runs.
//
// Threads and streams: a BlasLt owns one cuBLASLt handle, one workspace and a cache of plans. Calls
// on one BlasLt must come from one host thread at a time, and the workspace must not be used by two
// streams at once: give each stream (each engine worker) its own BlasLt. Plans are cached per
// (m, n, k, output type, bias or not, pointer alignments), so a decode step pays no heuristic query
// after its first call; the cache grows by one small entry per distinct batch size.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace lowbit::kernels::cuda {

class BlasLt {
 public:
  // cuBLAS's own default workspace on Hopper is 32 MiB: enough for every split-K plan it picks.
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;

  // Creates the handle and allocates the workspace on the current device (cudaMalloc: do this at
  // load time, not inside a step). Throws OutOfMemory / Internal.
  explicit BlasLt(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~BlasLt();
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;
  BlasLt(BlasLt&&) noexcept;
  BlasLt& operator=(BlasLt&&) noexcept;

  size_t workspace_bytes() const;
  // Number of cached plans (tests check that repeated shapes reuse them).
  size_t cached_plans() const;

  struct Impl;  // cuBLASLt types stay out of this header's users' sight
  Impl* impl() { return impl_.get(); }  // null after a move

 private:
  std::unique_ptr<Impl> impl_;
};

// y[m, n] (bf16) = alpha · x[m, k] · w[n, k]ᵀ (+ bias[n], bf16, added after alpha). All pointers are
// device memory; bf16 values as raw bit patterns. y must not overlap x, w or bias. Asynchronous on
// `stream`. Throws InvalidArgument (see the header comment), Unsupported when cuBLASLt has no
// algorithm for the shape, Internal on a cuBLASLt failure.
void gemm_bf16(BlasLt& blas, const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
               uint16_t* y, cudaStream_t stream, const uint16_t* bias = nullptr, float alpha = 1.0f);

// Same product with fp32 output (the LM head's logits, which sampling wants unrounded); bias, if
// any, is fp32 (cuBLASLt's bias type follows the output type).
void gemm_bf16_f32out(BlasLt& blas, const uint16_t* x, int64_t m, int64_t k, const uint16_t* w,
                      int64_t n, float* y, cudaStream_t stream, const float* bias = nullptr,
                      float alpha = 1.0f);

}  // namespace lowbit::kernels::cuda
