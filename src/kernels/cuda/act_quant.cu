// Activation quantization kernels (act_quant.h). One thread block per row: a first pass finds the
// row's (or each group's) absmax, a second re-reads the row (from L1/L2) and writes the codes, so
// no row is held in shared memory and any k runs.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // the per-group kernel's block (a warp per group)
// Per-row kernels: one block per row. Few rows (decode steps): as many threads as the row has
// vectors of V inputs (32 to 1024), so each thread loads one or two vectors per pass instead of
// looping: a 14336-wide row took 7.7 us with 256 threads on the H200 (seven dependent load rounds
// per pass), ~4 us with 1024. Many rows (prefill): 256 threads, more blocks resident per SM to hide
// the latency (1024-thread blocks were 15-18 % slower at m = 2048). bench/NOTES.md "Session 18".
constexpr int kMaxRowThreads = 1024;
constexpr int64_t kWideRowsBelow = 128;

unsigned row_threads(int64_t m, int64_t k, int v) {
  if (m >= kWideRowsBelow) return kThreads;
  const int64_t vectors = (k + v - 1) / v;
  return static_cast<unsigned>(std::min<int64_t>(kMaxRowThreads, std::max<int64_t>(32, (vectors + 31) / 32 * 32)));
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// V consecutive inputs starting at element c of `row` (V = 8: one 16-byte load).
template <int V>
__device__ __forceinline__ void load_bf16(const uint16_t* row, int64_t c, float (&v)[V]) {
  if constexpr (V == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __uint_as_float(words[j] << 16);
      v[2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = bf16_bits_to_float(row[c + j]);
  }
}

template <int V>
__device__ __forceinline__ void store_codes(uint8_t* q, int64_t c, const uint8_t (&b)[V]) {
  if constexpr (V == 8) {
    uint2 packed;
    packed.x = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    packed.y = b[4] | (b[5] << 8) | (b[6] << 16) | (static_cast<uint32_t>(b[7]) << 24);
    *reinterpret_cast<uint2*>(q + c) = packed;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) q[c + j] = b[j];
  }
}

// compressed-tensors' order: divide, clamp (NaN passes through), round to e4m3 (RNE).
__device__ __forceinline__ uint8_t fp8_code(float x, float scale) {
  float v = __fdiv_rn(x, scale);
  if (!isnan(v)) v = fminf(fmaxf(v, -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// ref::quantize_activations' to_code(x / scale + zero).
__device__ __forceinline__ uint8_t int8_code(float x, float scale, float zero) {
  const float v = __fadd_rn(__fdiv_rn(x, scale), zero);
  if (isnan(v)) return 0;
  return static_cast<uint8_t>(static_cast<int8_t>(__float2int_rn(fminf(fmaxf(v, -128.0f), 127.0f))));
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  return v;
}

// The block's maximum (blockDim.x a multiple of 32, at most kMaxRowThreads).
__device__ float block_max(float v) {
  __shared__ float partial[kMaxRowThreads / 32];
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
    v = warp_max(v);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  return partial[0];
}

struct KernelArgs {
  const uint16_t* x;
  int64_t m, k;
  uint8_t* q;
  float* scales;
  int64_t scale_ld;
  int scale_reps;
  int64_t group;
  bool dynamic;
  float static_scale, static_zero;
  const float* tensor_amax;
};

// Padding rows (i >= m): zero codes, unit scales in every scale column.
__device__ void write_padding_row(const KernelArgs& a, int64_t i, int columns) {
  uint8_t* qrow = a.q + i * a.k;
  for (int64_t c = threadIdx.x; c < a.k; c += blockDim.x) qrow[c] = 0;
  for (int r = threadIdx.x; r < columns; r += blockDim.x) a.scales[r * a.scale_ld + i] = 1.0f;
}

// One scale per row (dynamic per token, static, or per-tensor dynamic).
template <bool kFp8, int V>
__global__ void __launch_bounds__(kMaxRowThreads) quant_rows_kernel(KernelArgs a) {
  pdl_begin();
  const int64_t i = blockIdx.x;
  if (i >= a.m) {
    write_padding_row(a, i, a.scale_reps);
    return;
  }
  const uint16_t* row = a.x + i * a.k;
  float scale = a.static_scale, zero = a.static_zero;
  if (a.dynamic) {
    float amax = 0.0f;
    int nan = 0;
    for (int64_t c = int64_t(threadIdx.x) * V; c < a.k; c += int64_t(blockDim.x) * V) {
      float v[V];
      load_bf16<V>(row, c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        amax = fmaxf(amax, fabsf(v[j]));  // fmaxf drops NaN, as std::fmax / torch's amax path
        nan |= isnan(v[j]);
      }
    }
    amax = block_max(amax);
    nan = __syncthreads_or(nan);
    if (kFp8) {
      scale = __fdiv_rn(amax, 448.0f);
    } else {
      scale = nan ? __int_as_float(0x7FC00000) : __fdiv_rn(amax, 127.5f);  // 127.5 = (qmax-qmin)/2
    }
    if (scale == 0.0f) scale = FLT_EPSILON;
    zero = 0.0f;
  } else if (a.tensor_amax != nullptr) {
    scale = __fdiv_rn(*a.tensor_amax, 448.0f);
    if (scale == 0.0f) scale = FLT_EPSILON;
  }
  for (int r = threadIdx.x; r < a.scale_reps; r += blockDim.x) a.scales[r * a.scale_ld + i] = scale;
  uint8_t* qrow = a.q + i * a.k;
  for (int64_t c = int64_t(threadIdx.x) * V; c < a.k; c += int64_t(blockDim.x) * V) {
    float v[V];
    load_bf16<V>(row, c, v);
    uint8_t b[V];
#pragma unroll
    for (int j = 0; j < V; ++j) b[j] = kFp8 ? fp8_code(v[j], scale) : int8_code(v[j], scale, zero);
    store_codes<V>(qrow, c, b);
  }
}

// fp8, one dynamic scale per (row, group): each warp takes whole groups.
template <int V>
__global__ void __launch_bounds__(kThreads) quant_groups_kernel(KernelArgs a) {
  pdl_begin();
  const int64_t i = blockIdx.x;
  const int64_t groups = a.k / a.group;
  if (i >= a.m) {
    write_padding_row(a, i, static_cast<int>(groups));
    return;
  }
  const uint16_t* row = a.x + i * a.k;
  uint8_t* qrow = a.q + i * a.k;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t g = warp; g < groups; g += blockDim.x / 32) {
    const int64_t begin = g * a.group, end = begin + a.group;
    float amax = 0.0f;
    for (int64_t c = begin + int64_t(lane) * V; c < end; c += 32 * V) {
      float v[V];
      load_bf16<V>(row, c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) amax = fmaxf(amax, fabsf(v[j]));
    }
    amax = warp_max(amax);
    float scale = __fdiv_rn(amax, 448.0f);
    if (scale == 0.0f) scale = FLT_EPSILON;
    if (lane == 0) a.scales[g * a.scale_ld + i] = scale;
    for (int64_t c = begin + int64_t(lane) * V; c < end; c += 32 * V) {
      float v[V];
      load_bf16<V>(row, c, v);
      uint8_t b[V];
#pragma unroll
      for (int j = 0; j < V; ++j) b[j] = fp8_code(v[j], scale);
      store_codes<V>(qrow, c, b);
    }
  }
}

// Per-tensor absmax: each block reduces one row, then one atomic max on the float's bits (valid
// for non-negative floats, which order like their bit patterns; NaN never reaches it).
template <int V>
__global__ void __launch_bounds__(kMaxRowThreads) row_amax_kernel(const uint16_t* x, int64_t k, float* amax) {
  const uint16_t* row = x + int64_t(blockIdx.x) * k;
  float local = 0.0f;
  for (int64_t c = int64_t(threadIdx.x) * V; c < k; c += int64_t(blockDim.x) * V) {
    float v[V];
    load_bf16<V>(row, c, v);
#pragma unroll
    for (int j = 0; j < V; ++j) local = fmaxf(local, fabsf(v[j]));
  }
  local = block_max(local);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(local));
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

void check_common(const char* fn, const uint16_t* x, int64_t m, int64_t k, const void* q,
                  const float* scales) {
  const std::string f = std::string(fn) + ": ";
  LOWBIT_CHECK(m >= 0, f + "m must be >= 0");
  LOWBIT_CHECK(k >= 1, f + "k must be >= 1");
  LOWBIT_CHECK(m < (int64_t(1) << 31), f + "m must be < 2^31");
  if (m == 0) return;
  LOWBIT_CHECK(x != nullptr, f + "x is null");
  LOWBIT_CHECK(q != nullptr, f + "q is null");
  LOWBIT_CHECK(scales != nullptr, f + "scales is null");
  LOWBIT_CHECK(aligned(x, 2), f + "x is not 2-byte aligned");
  LOWBIT_CHECK(aligned(scales, 4), f + "scales is not 4-byte aligned");
}

void check_static_scale(const char* fn, float scale) {
  LOWBIT_CHECK(std::isfinite(scale) && scale > 0.0f,
               std::string(fn) + ": static scale must be finite and positive");
}

}  // namespace

namespace detail {

void launch_act_quant(const ActQuantArgs& a, cudaStream_t stream) {
  if (a.rows_out == 0) return;
  LOWBIT_CHECK_AS(Internal, a.rows_out >= a.m && a.scale_ld >= a.rows_out && a.scale_reps >= 1,
                  "launch_act_quant: inconsistent row counts");
  LOWBIT_CHECK_AS(Internal, a.group == 0 || (a.fp8 && a.dynamic && a.k % a.group == 0),
                  "launch_act_quant: groups need fp8, dynamic, and a group size dividing k");
  const KernelArgs args{a.x,           a.m,          a.k,           static_cast<uint8_t*>(a.q),
                        a.scales,      a.scale_ld,   a.scale_reps,  a.group,
                        a.dynamic,     a.static_scale, a.static_zero, a.tensor_amax};
  // 16-byte loads of x and 8-byte stores of codes, when every row starts aligned.
  const bool vec = a.k % 8 == 0 && (a.group == 0 || a.group % 8 == 0) && aligned(a.x, 16) &&
                   aligned(a.q, 8);
  const dim3 grid(static_cast<unsigned>(a.rows_out));
  if (a.tensor_amax != nullptr && a.m > 0) {
    LOWBIT_CUDA_CHECK(cudaMemsetAsync(a.tensor_amax, 0, sizeof(float), stream));
    if (vec) {
      row_amax_kernel<8><<<static_cast<unsigned>(a.m), row_threads(a.rows_out, a.k, 8), 0, stream>>>(a.x, a.k, a.tensor_amax);
    } else {
      row_amax_kernel<1><<<static_cast<unsigned>(a.m), row_threads(a.rows_out, a.k, 1), 0, stream>>>(a.x, a.k, a.tensor_amax);
    }
    LOWBIT_CUDA_CHECK_LAUNCH();
  }
  if (a.group > 0) {
    if (vec) {
      launch_pdl(quant_groups_kernel<8>, grid, kThreads, 0, stream, args);
    } else {
      launch_pdl(quant_groups_kernel<1>, grid, kThreads, 0, stream, args);
    }
  } else if (a.fp8) {
    if (vec) {
      launch_pdl(quant_rows_kernel<true, 8>, grid, row_threads(a.rows_out, a.k, 8), 0, stream, args);
    } else {
      launch_pdl(quant_rows_kernel<true, 1>, grid, row_threads(a.rows_out, a.k, 1), 0, stream, args);
    }
  } else {
    if (vec) {
      launch_pdl(quant_rows_kernel<false, 8>, grid, row_threads(a.rows_out, a.k, 8), 0, stream, args);
    } else {
      launch_pdl(quant_rows_kernel<false, 1>, grid, row_threads(a.rows_out, a.k, 1), 0, stream, args);
    }
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace detail

namespace {

detail::ActQuantArgs base_args(const uint16_t* x, int64_t m, int64_t k, void* q, float* scales,
                               bool fp8) {
  detail::ActQuantArgs a;
  a.x = x;
  a.m = m;
  a.rows_out = m;
  a.k = k;
  a.fp8 = fp8;
  a.q = q;
  a.scales = scales;
  a.scale_ld = m;
  return a;
}

}  // namespace

void quantize_per_token_fp8(const uint16_t* x, int64_t m, int64_t k, uint8_t* q, float* scales,
                            cudaStream_t stream) {
  check_common("quantize_per_token_fp8", x, m, k, q, scales);
  detail::launch_act_quant(base_args(x, m, k, q, scales, true), stream);
}

void quantize_per_group_fp8(const uint16_t* x, int64_t m, int64_t k, int64_t group, uint8_t* q,
                            float* scales, int64_t scale_ld, cudaStream_t stream) {
  check_common("quantize_per_group_fp8", x, m, k, q, scales);
  LOWBIT_CHECK(group >= 1 && k % group == 0,
               "quantize_per_group_fp8: group " + std::to_string(group) + " does not divide k " +
                   std::to_string(k));
  LOWBIT_CHECK(scale_ld >= m, "quantize_per_group_fp8: scale_ld must be >= m");
  detail::ActQuantArgs a = base_args(x, m, k, q, scales, true);
  a.group = group;
  a.scale_ld = scale_ld;
  detail::launch_act_quant(a, stream);
}

void quantize_static_fp8(const uint16_t* x, int64_t m, int64_t k, float scale, uint8_t* q,
                         float* scales, cudaStream_t stream) {
  check_common("quantize_static_fp8", x, m, k, q, scales);
  check_static_scale("quantize_static_fp8", scale);
  detail::ActQuantArgs a = base_args(x, m, k, q, scales, true);
  a.dynamic = false;
  a.static_scale = scale;
  detail::launch_act_quant(a, stream);
}

void quantize_per_tensor_fp8(const uint16_t* x, int64_t m, int64_t k, uint8_t* q, float* scales,
                             float* amax_scratch, cudaStream_t stream) {
  check_common("quantize_per_tensor_fp8", x, m, k, q, scales);
  LOWBIT_CHECK(m == 0 || amax_scratch != nullptr, "quantize_per_tensor_fp8: amax_scratch is null");
  detail::ActQuantArgs a = base_args(x, m, k, q, scales, true);
  a.dynamic = false;
  a.tensor_amax = amax_scratch;
  detail::launch_act_quant(a, stream);
}

void quantize_per_token_int8(const uint16_t* x, int64_t m, int64_t k, int8_t* q, float* scales,
                             cudaStream_t stream) {
  check_common("quantize_per_token_int8", x, m, k, q, scales);
  detail::launch_act_quant(base_args(x, m, k, q, scales, false), stream);
}

void quantize_static_int8(const uint16_t* x, int64_t m, int64_t k, float scale, int32_t zero,
                          int8_t* q, float* scales, cudaStream_t stream) {
  check_common("quantize_static_int8", x, m, k, q, scales);
  check_static_scale("quantize_static_int8", scale);
  LOWBIT_CHECK(zero >= -128 && zero <= 127, "quantize_static_int8: zero outside [-128, 127]");
  detail::ActQuantArgs a = base_args(x, m, k, q, scales, false);
  a.dynamic = false;
  a.static_scale = scale;
  a.static_zero = static_cast<float>(zero);
  detail::launch_act_quant(a, stream);
}

}  // namespace lowbit::kernels::cuda
