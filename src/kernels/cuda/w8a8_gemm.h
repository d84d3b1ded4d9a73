// W8A8 linear layers on the GPU: FP8 (e4m3) and integer (int8, and int2..int8 weights widened to
// int8 for W4A8) weights times activations quantized at run time, y = x · dequant(W)ᵀ (+ bias),
// bf16 in and out. One call quantizes x (kernels/cuda/act_quant.h), runs the product and applies
// the scales:
//
//   FP8:  y[i][n] = Σ_k e4m3(qx[i][k]) · sx(i, k) · e4m3(w[n][k]) · sw(n, k)  (+ bias[n])
//   INT:  y[i][n] = sx[i] · Σ_g s[n][g] · Σ_{k∈g} (qx[i][k] - zx) · (code[n][k] - zero[n][g])
//
// with the activation codes exactly those of the CPU kernels (fp8: compressed-tensors' dynamic or
// static e4m3 quantization, absmax / 448; int8: ref::quantize_activations, absmax / 127.5).
//
// Paths (W8a8Path), tried in this order by AUTO; each can be forced (tests, benchmarks):
//   LT_SCALED    FP8 only. cuBLASLt applies the scales inside its Hopper kernels: per-tensor scalars
//                (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F), per-channel weight × per-token
//                activation vectors (OUTER_VEC_32F, sm_90), 128x128 weight blocks × 1x128
//                activation groups (BLK128x128_32F / VEC128_32F, sm_90, cuBLAS >= 12.9). The
//                bias goes into cuBLASLt's epilogue when it has such a kernel, else a separate
//                add follows (y then rounds to bf16 twice).
//   LT_EPILOGUE  cuBLASLt with unit scales into an fp32 (FP8) or int32 (IMMA, INT) scratch, then
//                lowbit's epilogue kernel applies row × column scales (and the static activation
//                zero point), adds the bias and writes bf16. Needs scales constant along k: per-
//                tensor or per-channel weights with per-token or per-tensor activations.
//   GEMV         FP8 only, decode steps: m <= 8 rows, per-tensor or per-channel weight scales,
//                per-row activation scales, k % 16 == 0, sm_89+. lowbit's streaming kernel on the
//                e4m3 tensor cores (gemv_fp8.cu); the same exact products as cuBLASLt, summed in
//                another order. AUTO does not take it: callers ask for it (gpu::GpuLinear does
//                for decode steps) so the other paths stay reachable at small m.
//   SIMT         lowbit's own tiled CUDA-core kernel (fp32 FMA for FP8, exact int32 dp for INT):
//                any scale granularity, group size, zero points, shape or alignment. Correct
//                first, not fast (CUDA-core rates, far below the tensor cores): the last resort.
// AUTO takes the first path that applies and for which cuBLASLt's heuristic returns an algorithm
// (queried once per shape and cached in the packed weights).
//
// Layout: weights stay torch's [n, k] row-major. In cuBLASLt's column-major terms that is A = W as
// [k, n] (transposed), B = qx as [k, m], D = y as [n, m]: the "TN" product, the only FP8 layout
// Hopper supports. cuBLASLt's 1x128 activation scales are "outer-dim-major" ([k/128][m])
// with m padded to a multiple of 4 (the padded rows are zero codes; their outputs are dropped).
//
// Memory: all scratch comes from the caller's workspace (w8a8_workspace_bytes); nothing is
// allocated or synchronized inside w8a8_gemm, which is asynchronous on `stream`. Pointers: device
// memory; bf16 values as raw bit patterns; x, y, bias 16-byte aligned for the fast paths (others
// still run, on slower kernels). The workspace must not be used by two streams at once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/quant_weights.h"

namespace lowbit::kernels::cuda {

enum class W8a8Path : uint8_t { AUTO, LT_SCALED, LT_EPILOGUE, SIMT, GEMV };
const char* w8a8_path_name(W8a8Path path);

// How activations are quantized to e4m3 before an FP8 product (compressed-tensors' input_activations).
enum class Fp8ActScheme : uint8_t {
  PER_TOKEN,           // dynamic, one scale per row: FP8_DYNAMIC
  PER_GROUP,           // dynamic, one scale per row per `group_size` columns: FP8_BLOCK (128)
  PER_TENSOR_STATIC,   // the checkpoint's input_scale: FP8
  PER_TENSOR_DYNAMIC,  // one scale for the whole x, computed at run time (vLLM's dynamic fp8)
};

struct Fp8Activations {
  Fp8ActScheme scheme = Fp8ActScheme::PER_TOKEN;
  float static_scale = 1.0f;   // PER_TENSOR_STATIC
  int64_t group_size = 128;    // PER_GROUP; must divide the column count
};

// Weights packed for the GPU once, at load. Move-only; owns device memory and a cache of
// cuBLASLt algorithm choices (thread-safe).
class W8a8GpuWeights {
 public:
  enum class Type : uint8_t { FP8, INT };

  W8a8GpuWeights();
  ~W8a8GpuWeights();
  W8a8GpuWeights(W8a8GpuWeights&&) noexcept;
  W8a8GpuWeights& operator=(W8a8GpuWeights&&) noexcept;
  W8a8GpuWeights(const W8a8GpuWeights&) = delete;
  W8a8GpuWeights& operator=(const W8a8GpuWeights&) = delete;

  bool empty() const { return impl_ == nullptr; }
  Type type() const;
  int64_t rows() const;  // output features n
  int64_t cols() const;  // input features k
  size_t bytes() const;  // device memory held

  struct Impl;
  const Impl& impl() const;  // InvalidArgument when empty

 private:
  explicit W8a8GpuWeights(std::unique_ptr<Impl> impl);
  friend W8a8GpuWeights pack_fp8_for_gpu(const Fp8Weights& weights);
  friend W8a8GpuWeights pack_int8_for_gpu(const IntWeights& weights);
  std::unique_ptr<Impl> impl_;
};

// Uploads the codes as they are ([n, k], cuBLASLt's TN operand) and the scales in every layout
// the paths use. InvalidArgument for inconsistent sizes (codes, scales, block shape), a NaN code
// is allowed (it propagates, as on the CPU).
W8a8GpuWeights pack_fp8_for_gpu(const Fp8Weights& weights);

// Codes of 2..8 bits become signed int8 (code - 2^(bits-1)), zero points likewise. g_idx other
// than c / group_size is Unsupported (as pack_w8a8); InvalidArgument for inconsistent sizes or a
// code or zero point out of range. Per-channel weights without zero points run on cuBLASLt's
// IMMA kernels; groups (W4A8's 128) and zero points take the SIMT path.
W8a8GpuWeights pack_int8_for_gpu(const IntWeights& weights);

// Whether W8a8Path::GEMV runs these FP8 weights and activations for m rows on this device.
bool w8a8_gemv_applies(const W8a8GpuWeights& w, int64_t m, const Fp8Activations& act);

// Scratch bytes w8a8_gemm needs for up to `m` rows (any path: AUTO may fall back).
size_t w8a8_workspace_bytes(const W8a8GpuWeights& w, int64_t m, const Fp8Activations& act);
size_t w8a8_workspace_bytes(const W8a8GpuWeights& w, int64_t m, const Int8Activations& act);

// y[m, n] = w8a8(x[m, k]) (+ bias[n]); returns the path that ran. InvalidArgument: null pointers,
// wrong weight type for the activation struct, a workspace smaller than w8a8_workspace_bytes, a
// static scale that is not finite and positive, a static zero outside [-128, 127], a group size
// that does not divide k. Unsupported: a forced path that does not apply to these weights and
// activations, or for which cuBLASLt has no algorithm (the message says which). m == 0: nothing.
W8a8Path w8a8_gemm(const W8a8GpuWeights& w, const uint16_t* x, int64_t m, const Fp8Activations& act,
                   const uint16_t* bias, uint16_t* y, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, W8a8Path path = W8a8Path::AUTO);
W8a8Path w8a8_gemm(const W8a8GpuWeights& w, const uint16_t* x, int64_t m, const Int8Activations& act,
                   const uint16_t* bias, uint16_t* y, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, W8a8Path path = W8a8Path::AUTO);

}  // namespace lowbit::kernels::cuda
