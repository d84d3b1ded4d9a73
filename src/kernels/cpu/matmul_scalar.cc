// Both matmul paths in portable C++ for CPUs without AVX2 (the compiler vectorizes the fixed-size
// inner loops for the baseline ISA). Correct for every shape; not tuned.
#include <algorithm>

#include "core/float_convert.h"
#include "kernels/cpu/matmul_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kLanes = 8;  // independent partial sums per dot product (SIMD-friendly order)

// Decodes one weight row into fp32 (zero-padded to padded_k).
void decode_row(const MatmulArgs& a, int64_t row, int64_t padded_k, float* out) {
  const int64_t k = a.k;
  switch (a.w_dtype) {
    case DType::BF16: {
      const uint16_t* w = static_cast<const uint16_t*>(a.w) + row * k;
      for (int64_t p = 0; p < k; ++p) out[p] = bf16_to_f32(w[p]);
      break;
    }
    case DType::F16: {
      const uint16_t* w = static_cast<const uint16_t*>(a.w) + row * k;
      for (int64_t p = 0; p < k; ++p) out[p] = f16_to_f32(w[p]);
      break;
    }
    case DType::F32:
      std::copy(static_cast<const float*>(a.w) + row * k, static_cast<const float*>(a.w) + (row + 1) * k,
                out);
      break;
    default: throw Internal("gemv_scalar: weight dtype " + std::string(dtype_name(a.w_dtype)));
  }
  std::fill(out + k, out + padded_k, 0.0f);
}

void gemv_rows(const MatmulArgs& a, Range rows, const float* xp, int64_t padded_k) {
  float* w = thread_scratch(1, static_cast<size_t>(padded_k));
  for (int64_t row = rows.begin; row < rows.end; ++row) {
    decode_row(a, row, padded_k, w);
    for (int64_t i = 0; i < a.m; ++i) {
      const float* x = xp + i * padded_k;
      float lanes[kLanes] = {};
      for (int64_t p = 0; p < padded_k; p += kLanes) {
        for (int l = 0; l < kLanes; ++l) lanes[l] += x[p + l] * w[p + l];
      }
      float sum = 0.0f;
      for (float v : lanes) sum += v;
      a.y[i * a.n + row] = sum + (a.bias ? a.bias[row] : 0.0f);
    }
  }
}

constexpr int kMr = 4;
constexpr int kNr = 8;

void micro_kernel(const float* xs, const float* wp, int64_t kc, float* y, int64_t ldy, int rows,
                  int64_t columns, const float* bias, bool first) {
  const int cols = static_cast<int>(std::min<int64_t>(kNr, columns));
  float acc[kMr][kNr] = {};
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) acc[i][j] = first ? (bias ? bias[j] : 0.0f) : y[i * ldy + j];
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int i = 0; i < kMr; ++i) {
      const float a = xs[p * kMr + i];
      for (int j = 0; j < kNr; ++j) acc[i][j] += a * wp[p * kNr + j];
    }
  }
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) y[i * ldy + j] = acc[i][j];
  }
}

}  // namespace

void gemv_scalar(const MatmulArgs& args) {
  // gemv_rows reads x rows padded to a multiple of kLanes; no deinterleaving.
  run_streaming(args, kLanes, false, gemv_rows);
}

BlockedKernel blocked_kernel_scalar() { return BlockedKernel{kMr, kNr, 256, 256, micro_kernel}; }

void gemm_scalar(const MatmulArgs& args) { run_blocked(args, blocked_kernel_scalar()); }

}  // namespace lowbit::kernels::cpu::detail
