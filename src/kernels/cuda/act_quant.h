// Activation quantization on the GPU for the W8A8 products (w8a8_gemm.h): bf16 x [m, k] (raw bit
// patterns, row-major) → 1-byte codes [m, k] and fp32 scales. The arithmetic is the CPU's, bit for
// bit, on the fp32 value of each bf16 input:
//
//   fp8 (compressed-tensors' float8 dynamic / static, quant/methods/kernel_linear.cc):
//     scale = absmax / 448 over the slot (row, 1 x group, or whole x); 0 → FLT_EPSILON;
//     code  = e4m3_rne(clamp(x / scale, -448, 448)); a NaN x gives the NaN code 0x7F (its sign may
//     differ from the CPU's), NaNs are ignored by the absmax (torch's amax on the CPU path too).
//   int8 (ref::quantize_activations, kernels/w8a8_matmul.h):
//     dynamic: scale = absmax / 127.5 per row (0 → FLT_EPSILON; a NaN in the row → NaN), zero 0;
//     static:  the given scale and zero point;
//     code = round_half_even(clamp(x / scale + zero, -128, 127)), NaN → 0.
// Divisions are IEEE round-to-nearest (__fdiv_rn), so codes and scales equal the CPU's exactly.
//
// All functions are asynchronous on `stream`, allocate nothing, and check their arguments on the
// host (InvalidArgument naming the function and argument). m == 0 launches nothing. 16-byte
// vector loads when k (and the group size) are multiples of 8 and x is 16-byte aligned; otherwise a
// scalar path with the same results.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::kernels::cuda {

// q: e4m3 codes [m, k]; scales: [m].
void quantize_per_token_fp8(const uint16_t* x, int64_t m, int64_t k, uint8_t* q, float* scales,
                            cudaStream_t stream);

// One scale per row per `group` columns (group divides k), stored "outer-dim-major" as cuBLASLt's
// VEC128_32F wants: scale of (row i, group g) at scales[g * scale_ld + i], scale_ld >= m.
void quantize_per_group_fp8(const uint16_t* x, int64_t m, int64_t k, int64_t group, uint8_t* q,
                            float* scales, int64_t scale_ld, cudaStream_t stream);

// Static per-tensor scale (the checkpoint's input_scale, finite and > 0); scales[i] = scale for
// every row, so the products see the same per-row vector in every mode.
void quantize_static_fp8(const uint16_t* x, int64_t m, int64_t k, float scale, uint8_t* q,
                         float* scales, cudaStream_t stream);

// One dynamic scale for the whole x (absmax over all m·k values); written to scales[0..m).
// amax_scratch: one float of device scratch.
void quantize_per_tensor_fp8(const uint16_t* x, int64_t m, int64_t k, uint8_t* q, float* scales,
                             float* amax_scratch, cudaStream_t stream);

// int8 dynamic per token: q [m, k], scales [m].
void quantize_per_token_int8(const uint16_t* x, int64_t m, int64_t k, int8_t* q, float* scales,
                             cudaStream_t stream);

// int8 static per tensor with zero point (zero in [-128, 127]); scales[i] = scale.
void quantize_static_int8(const uint16_t* x, int64_t m, int64_t k, float scale, int32_t zero,
                          int8_t* q, float* scales, cudaStream_t stream);

namespace detail {

// The general launcher behind the functions above (and w8a8_gemm's internal calls).
struct ActQuantArgs {
  const uint16_t* x = nullptr;
  int64_t m = 0;          // rows of x
  int64_t rows_out = 0;   // rows written (>= m): rows m..rows_out-1 get zero codes, scale 1
  int64_t k = 0;
  bool fp8 = true;        // else int8
  void* q = nullptr;      // [rows_out, k]
  float* scales = nullptr;
  int64_t scale_ld = 0;   // stride between scale columns (>= rows_out)
  int64_t group = 0;      // > 0: one dynamic scale per row per group (fp8 only)
  int scale_reps = 1;     // per-row scales: written to columns 0..scale_reps-1
  bool dynamic = true;    // per row (or per group); else the static scale / tensor amax
  float static_scale = 1.0f;
  float static_zero = 0.0f;          // int8 static only
  float* tensor_amax = nullptr;      // non-null: fp8 per-tensor dynamic (dynamic must be false)
};
void launch_act_quant(const ActQuantArgs& a, cudaStream_t stream);

}  // namespace detail

}  // namespace lowbit::kernels::cuda
