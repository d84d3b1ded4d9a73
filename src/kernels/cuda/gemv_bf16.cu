// Streaming BF16 GEMV for decode (see gemv_bf16.h for the method).
//
// Fragment layout (mma.sync m16n8k16, A = 16 weight rows x 16 k, B = 16 k x 8 rows of x). Lane
// (g = lane / 4, t = lane % 4) holds A rows g and g + 8 at logical k {2t, 2t+1, 2t+8, 2t+9} and B
// column g at the same logical k. A lane loads 16 bytes of weight row g, 16 of row g + 8 and 16 of
// x row g, all at physical k = 32c + 8t .. +7 of chunk c; its 32-bit pairs P0..P3 of each go to
// logical k (2t, 2t+8) of the first mma and (2t, 2t+8) of the second. Every lane uses the same
// physical-to-logical map for A and B, so each mma still sums w·x over 16 distinct physical k.
#include "kernels/cuda/gemv_bf16.h"

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/stream_load.cuh"
#include "kernels/cuda/small_ops.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

namespace {

constexpr int kTileRows = 16;  // output features per CTA (the mma's M)
constexpr int kChunk = 32;     // k per lane load group: 4 lanes x 8 values
constexpr int kUnroll = 4;     // chunks in flight per warp
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kScalarWarps = 8;  // fallback kernel: one warp per output feature

struct GemvParams {
  const uint16_t* x = nullptr;  // row r at x + r * x_stride; silu: gate there, up k further
  int64_t x_stride = 0;
  const uint16_t* w = nullptr;
  const uint16_t* bias = nullptr;
  uint16_t* y = nullptr;  // [m, n]: the output, or the residual (kAdd)
  int64_t n = 0;
  int64_t k = 0;
  int m = 0;
  int chunks = 0;  // ceil(k / kChunk)
  // kNorm: normed = rmsnorm(residual) · norm_weight, by the CTA that finishes last.
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  uint16_t* normed = nullptr;
  uint32_t* counter = nullptr;
};

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits) {
  return __uint_as_float(bits << 16);  // exact
}

__device__ __forceinline__ uint32_t float_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));  // nearest even, as small_ops.cu
}

// silu_and_mul's formula and rounding (small_ops.cu), for the two bf16 of a gate word and an up
// word.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ uint32_t silu_mul_pair(uint32_t gate, uint32_t up) {
  const float lo = silu_mul(bf16_bits_to_float(gate & 0xFFFFu), bf16_bits_to_float(up & 0xFFFFu));
  const float hi = silu_mul(bf16_bits_to_float(gate >> 16), bf16_bits_to_float(up >> 16));
  return float_to_bf16_bits(lo) | (float_to_bf16_bits(hi) << 16);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The B fragment of chunk c for lane (g, t): x row g at k = 32c + 8t .. +7 as four bf16 pairs;
// zero for rows >= m and k past the end. `live`: the chunk exists (warp-uniform).
template <bool kSilu>
__device__ __forceinline__ void load_x(const GemvParams& p, int c, bool live, int lane,
                                       uint32_t (&xb)[4]) {
  const int g = lane >> 2, t = lane & 3;
  if constexpr (!kSilu) {
    const int64_t kk = static_cast<int64_t>(c) * kChunk + 8 * t;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (live && g < p.m && kk < p.k)
      v = __ldg(reinterpret_cast<const uint4*>(p.x + g * p.x_stride + kk));
    xb[0] = v.x;
    xb[1] = v.y;
    xb[2] = v.z;
    xb[3] = v.w;
  } else {
    // The activation of m rows x 32 k is computed once per warp, not once per lane that needs
    // it: in round j, lane L makes pair L % 16 of row 2j + L / 16 (two silu), then lane (g, t)
    // fetches its pairs 4t .. 4t+3 of row g from lanes (g % 2)·16 + 4t + i of round g / 2.
    xb[0] = xb[1] = xb[2] = xb[3] = 0;
    const int64_t kk = static_cast<int64_t>(c) * kChunk + 2 * (lane & 15);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (2 * j >= p.m) break;  // warp-uniform
      const int row = 2 * j + (lane >> 4);
      uint32_t pair = 0;
      if (live && row < p.m && kk < p.k) {
        const uint16_t* gp = p.x + row * p.x_stride + kk;  // 4-byte aligned: kk, stride even
        pair = silu_mul_pair(__ldg(reinterpret_cast<const uint32_t*>(gp)),
                             __ldg(reinterpret_cast<const uint32_t*>(gp + p.k)));
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t v = __shfl_sync(0xFFFFFFFFu, pair, ((g & 1) << 4) + 4 * t + i);
        if ((g >> 1) == j) xb[i] = v;
      }
    }
  }
}

// out = bf16(sum) (or the residual update) for feature `row` of x row `col`.
template <bool kAdd>
__device__ __forceinline__ void store_out(const GemvParams& p, int col, int64_t row, float sum) {
  if (p.bias != nullptr) sum += bf16_bits_to_float(p.bias[row]);
  uint16_t* out = p.y + col * p.n + row;
  uint32_t bits = float_to_bf16_bits(sum);
  if constexpr (kAdd)
    bits = float_to_bf16_bits(bf16_bits_to_float(*out) + bf16_bits_to_float(bits));
  *out = static_cast<uint16_t>(bits);
}

// Sum of squares of the 8 bf16 of a pack, in element order (rmsnorm_kernel<8>'s inner loop).
__device__ __forceinline__ float pack_sumsq(const uint4& raw, float sum) {
  const uint32_t wd[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float f = bf16_bits_to_float((wd[i / 2] >> (16 * (i % 2))) & 0xFFFFu);
    sum += f * f;
  }
  return sum;
}

// out[0..8) = bf16((r · inv) · weight) for the pack at element e of a row.
__device__ __forceinline__ void normalize_pack(const uint4& raw, float inv, const float* weight,
                                               uint16_t* out) {
  const uint32_t wd[4] = {raw.x, raw.y, raw.z, raw.w};
  const float4 w0 = __ldg(reinterpret_cast<const float4*>(weight));
  const float4 w1 = __ldg(reinterpret_cast<const float4*>(weight + 4));
  const float w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float lo = bf16_bits_to_float(wd[i] & 0xFFFFu), hi = bf16_bits_to_float(wd[i] >> 16);
    o[i] = float_to_bf16_bits((lo * inv) * w[2 * i]) |
           (float_to_bf16_bits((hi * inv) * w[2 * i + 1]) << 16);
  }
  *reinterpret_cast<uint4*>(out) = make_uint4(o[0], o[1], o[2], o[3]);
}

// small_ops.cu's rmsnorm_kernel<8> over the m updated residual rows (n values each), run by this
// CTA's kThreads threads standing in for the tv = row_threads(n / 8) threads that kernel launches:
// real warp w plays virtual warps w, w + 8, ...; each virtual thread sums its packs in the same
// order, and the shuffle trees and the warp-total tree are block_sum's, so the bits are those of
// rmsnorm (and of fused_add_rmsnorm's norm). Rows of <= 1024 packs (n <= 8192: one pack per
// virtual thread) are loaded once, all at once, and kept in registers for the second pass.
// Residual reads go to L2 (__ldcg): other CTAs wrote it, and this SM's L1 may hold stale lines.
__device__ void rmsnorm_rows(const GemvParams& p) {
  constexpr int kMaxVirtual = 1024 / kThreads;  // virtual threads per real thread
  __shared__ float warp_totals[32];
  __shared__ float total;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t packs = p.n / 8;
  const int tv = static_cast<int>(min(max((packs + 31) / 32 * 32, int64_t{32}), int64_t{1024}));
  const bool held = packs <= 1024;  // CTA-uniform
  for (int r = 0; r < p.m; ++r) {
    const uint16_t* row = p.y + r * p.n;
    uint4 v[kMaxVirtual];
    if (held) {
#pragma unroll
      for (int j = 0; j < kMaxVirtual; ++j) {
        const int64_t pk = (warp + j * kWarps) * 32 + lane;
        v[j] = pk < packs ? __ldcg(reinterpret_cast<const uint4*>(row + pk * 8))
                          : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxVirtual; ++j) {
      const int vw = warp + j * kWarps;
      if (vw >= tv / 32) break;  // warp-uniform
      float sum = 0.0f;
      if (held) {
        if (vw * 32 + lane < packs) sum = pack_sumsq(v[j], sum);
      } else {
        for (int64_t pk = vw * 32 + lane; pk < packs; pk += tv) {
          sum = pack_sumsq(__ldcg(reinterpret_cast<const uint4*>(row + pk * 8)), sum);
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
      if (lane == 0) warp_totals[vw] = sum;
    }
    __syncthreads();
    if (warp == 0) {
      float t = lane < tv / 32 ? warp_totals[lane] : 0.0f;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) t += __shfl_xor_sync(0xFFFFFFFFu, t, offset);
      if (lane == 0) total = t;
    }
    __syncthreads();
    const float inv = rsqrtf(total / static_cast<float>(p.n) + p.eps);
    uint16_t* out = p.normed + r * p.n;
    if (held) {
#pragma unroll
      for (int j = 0; j < kMaxVirtual; ++j) {
        const int64_t pk = (warp + j * kWarps) * 32 + lane;
        if (pk < packs) normalize_pack(v[j], inv, p.norm_weight + pk * 8, out + pk * 8);
      }
    } else {
      for (int64_t pk = threadIdx.x; pk < packs; pk += blockDim.x) {
        normalize_pack(__ldcg(reinterpret_cast<const uint4*>(row + pk * 8)), inv,
                       p.norm_weight + pk * 8, out + pk * 8);
      }
    }
    __syncthreads();  // warp_totals and total are reused by the next row
  }
}

// 3 CTAs per SM (<= 80 registers); the silu variant needs ~100 registers and runs 2.
template <bool kSilu, bool kAdd, bool kNorm>
__global__ void __launch_bounds__(kThreads, kSilu ? 2 : 3) gemv_kernel(const GemvParams p) {
  __shared__ float2 partial[kWarps][kTileRows][4];  // per warp: [16 features][8 x rows]
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  // Features past n re-read the last one (always valid memory); their sums are never stored.
  const int64_t ra = min(row0 + g, p.n - 1), rb = min(row0 + g + 8, p.n - 1);
  const uint16_t* wa = p.w + ra * p.k + 8 * t;
  const uint16_t* wb = p.w + rb * p.k + 8 * t;
  // The weights do not depend on the previous kernel: start the first iteration's into L2 while
  // it finishes (PDL, pdl.cuh), then wait for x.
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = warp + u * kWarps;
    const int64_t off = static_cast<int64_t>(c) * kChunk;
    if (c < p.chunks && off + 8 * t < p.k) {
      prefetch_l2(wa + off);
      prefetch_l2(wb + off);
    }
  }
  pdl_wait();
  // Two accumulator sets (even / odd chunks) halve the chain of dependent mma per iteration.
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  for (int c0 = warp; c0 < p.chunks; c0 += kWarps * kUnroll) {
    uint4 a[kUnroll], b[kUnroll];
    uint32_t xb[kUnroll][4];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      const int64_t off = static_cast<int64_t>(c) * kChunk;
      const bool ok = c < p.chunks && off + 8 * t < p.k;
      a[u] = ok ? load_stream(wa + off) : make_uint4(0, 0, 0, 0);
      b[u] = ok ? load_stream(wb + off) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      load_x<kSilu>(p, c0 + u * kWarps, c0 + u * kWarps < p.chunks, lane, xb[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      mma_bf16(acc[u & 1], a[u].x, b[u].x, a[u].y, b[u].y, xb[u][0], xb[u][1]);
      mma_bf16(acc[u & 1], a[u].z, b[u].z, a[u].w, b[u].w, xb[u][2], xb[u][3]);
    }
  }
  // The next kernel's CTAs may be scheduled now, as this one's drain (pdl.cuh). Not earlier: CTAs
  // of a GEMV waiting on this one would take SM slots and unbalance its own grid (measured: down
  // 29 -> 37 us with the trigger at the start).
  pdl_launch_dependents();
  // acc: features g (acc 0, 1) and g + 8 (acc 2, 3), x rows 2t and 2t + 1.
  partial[warp][g][t] = make_float2(acc[0][0] + acc[1][0], acc[0][1] + acc[1][1]);
  partial[warp][g + 8][t] = make_float2(acc[0][2] + acc[1][2], acc[0][3] + acc[1][3]);
  __syncthreads();
  if (threadIdx.x < kTileRows * 8) {
    const int r = static_cast<int>(threadIdx.x >> 3), col = static_cast<int>(threadIdx.x & 7);
    const int64_t row = row0 + r;
    if (col < p.m && row < p.n) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float2 v = partial[w][r][col >> 1];
        sum += (col & 1) ? v.y : v.x;
      }
      store_out<kAdd>(p, col, row, sum);
    }
  }
  if constexpr (kNorm) {
    // The CTA that finishes last normalizes the rows (the CUDA guide's threadfence reduction):
    // every CTA fences its residual stores before counting itself; the last one resets the
    // counter for the next launch on the stream.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(p.counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (last) {
      __threadfence();
      rmsnorm_rows(p);
      if (threadIdx.x == 0) *p.counter = 0u;
    }
  }
}

// Any shape and alignment: one warp per output feature, lanes strided over k, a shuffle tree.
template <bool kSilu, bool kAdd>
__global__ void gemv_scalar_kernel(const GemvParams p) {
  pdl_begin();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kScalarWarps + (threadIdx.x >> 5);
  if (row >= p.n) return;  // warp-uniform
  const int lane = static_cast<int>(threadIdx.x & 31);
  const uint16_t* wr = p.w + row * p.k;
  float acc[kGemvMaxRows] = {};
  for (int64_t i = lane; i < p.k; i += 32) {
    const float wv = bf16_bits_to_float(wr[i]);
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) {
      if (r >= p.m) break;
      const uint16_t* xr = p.x + r * p.x_stride;
      float xv = bf16_bits_to_float(xr[i]);
      if constexpr (kSilu) {
        xv = bf16_bits_to_float(float_to_bf16_bits(silu_mul(xv, bf16_bits_to_float(xr[p.k + i]))));
      }
      acc[r] = fmaf(wv, xv, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
    if (r >= p.m) break;
    float v = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
    if (lane == 0) store_out<kAdd>(p, r, row, v);
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Checks the arguments; the GemvParams of a call (m == 0: nothing to do, returns false).
bool make_params(const char* fn, const uint16_t* x, int64_t x_stride, int64_t m, int64_t k,
                 const uint16_t* w, int64_t n, uint16_t* y, const uint16_t* bias, GemvParams& p) {
  const std::string f = fn;
  LOWBIT_CHECK(m >= 0 && m <= kGemvMaxRows,
               f + ": m (rows of x) is " + std::to_string(m) + ", must be in [0, 8]");
  LOWBIT_CHECK(n >= 1 && k >= 1 && k <= INT_MAX / 2, f + ": weight shape [n=" + std::to_string(n) +
                                                         ", k=" + std::to_string(k) +
                                                         "] must have n >= 1 and 1 <= k < 2^30");
  LOWBIT_CHECK(n <= static_cast<int64_t>(INT_MAX) * kScalarWarps / 2,
               f + ": n = " + std::to_string(n) + " is too large");
  LOWBIT_CHECK(w != nullptr, f + ": w must be non-null");
  if (m == 0) return false;
  LOWBIT_CHECK(x != nullptr && y != nullptr, f + ": x and the output must be non-null");
  LOWBIT_CHECK(aligned(x, 2) && aligned(w, 2) && aligned(y, 2) && aligned(bias, 2),
               f + ": x, w, the output and bias must be 2-byte aligned (bf16 elements)");
  p.x = x;
  p.x_stride = x_stride;
  p.w = w;
  p.bias = bias;
  p.y = y;
  p.n = n;
  p.k = k;
  p.m = static_cast<int>(m);
  p.chunks = static_cast<int>((k + kChunk - 1) / kChunk);
  return true;
}

template <bool kSilu, bool kAdd, bool kNorm = false>
void launch(const GemvParams& p, cudaStream_t stream) {
  if (gemv_bf16_vectorized(p.x, p.x_stride, p.k, p.w)) {
    const auto tiles = static_cast<unsigned>((p.n + kTileRows - 1) / kTileRows);
    launch_pdl(gemv_kernel<kSilu, kAdd, kNorm>, tiles, kThreads, 0, stream, p);
  } else {
    // kNorm callers take this path only with the streaming kernel (the norm is in its epilogue).
    LOWBIT_CHECK_AS(Internal, !kNorm, "gemv_bf16: the fused norm needs the streaming kernel");
    const auto blocks = static_cast<unsigned>((p.n + kScalarWarps - 1) / kScalarWarps);
    launch_pdl(gemv_scalar_kernel<kSilu, kAdd>, blocks, kScalarWarps * 32, 0, stream, p);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <bool kSilu>
void run(const char* fn, const uint16_t* x, int64_t x_stride, int64_t m, int64_t k,
         const uint16_t* w, int64_t n, uint16_t* y, const uint16_t* bias, cudaStream_t stream) {
  GemvParams p;
  if (make_params(fn, x, x_stride, m, k, w, n, y, bias, p)) launch<kSilu, false>(p, stream);
}

// residual += x · wᵀ, then the norm: in the GEMV's last CTA when both paths are vectorized, else
// as the residual epilogue followed by small_ops' rmsnorm (the same bits either way).
template <bool kSilu>
void run_add_rmsnorm(const char* fn, const uint16_t* x, int64_t x_stride, int64_t m, int64_t k,
                     const uint16_t* w, int64_t n, const GemvResidualNorm& norm,
                     cudaStream_t stream, const uint16_t* bias) {
  GemvParams p;
  const std::string f = fn;
  LOWBIT_CHECK(norm.weight != nullptr && norm.out != nullptr && norm.counter != nullptr,
               f + ": norm.weight, norm.out and norm.counter must be non-null");
  LOWBIT_CHECK(norm.out != norm.residual, f + ": norm.out must not be the residual");
  if (!make_params(fn, x, x_stride, m, k, w, n, norm.residual, bias, p)) return;
  p.norm_weight = norm.weight;
  p.eps = norm.eps;
  p.normed = norm.out;
  p.counter = norm.counter;
  if (gemv_bf16_rmsnorm_fused(x, x_stride, k, w, n, norm)) {
    launch<kSilu, true, true>(p, stream);
  } else {
    launch<kSilu, true>(p, stream);
    rmsnorm(norm.residual, norm.weight, norm.eps, m, n, norm.out, stream);
  }
}

}  // namespace

bool gemv_bf16_vectorized(const void* x, int64_t x_stride, int64_t k, const void* w) {
  return k % 8 == 0 && x_stride % 8 == 0 && aligned(x, 16) && aligned(w, 16);
}

bool gemv_bf16_rmsnorm_fused(const void* x, int64_t x_stride, int64_t k, const void* w, int64_t n,
                             const GemvResidualNorm& norm) {
  return gemv_bf16_vectorized(x, x_stride, k, w) && n % 8 == 0 && aligned(norm.residual, 16) &&
         aligned(norm.out, 16) && aligned(norm.weight, 16);
}

void gemv_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, uint16_t* y,
               cudaStream_t stream, const uint16_t* bias) {
  run<false>("gemv_bf16", x, k, m, k, w, n, y, bias, stream);
}

void gemv_bf16_silu(const uint16_t* gate_up, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                    uint16_t* y, cudaStream_t stream, const uint16_t* bias) {
  run<true>("gemv_bf16_silu", gate_up, 2 * k, m, k, w, n, y, bias, stream);
}

void gemv_bf16_add(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                   uint16_t* residual, cudaStream_t stream, const uint16_t* bias) {
  GemvParams p;
  if (make_params("gemv_bf16_add", x, k, m, k, w, n, residual, bias, p)) {
    launch<false, true>(p, stream);
  }
}

void gemv_bf16_add_rmsnorm(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                           const GemvResidualNorm& norm, cudaStream_t stream,
                           const uint16_t* bias) {
  run_add_rmsnorm<false>("gemv_bf16_add_rmsnorm", x, k, m, k, w, n, norm, stream, bias);
}

void gemv_bf16_silu_add_rmsnorm(const uint16_t* gate_up, int64_t m, int64_t k, const uint16_t* w,
                                int64_t n, const GemvResidualNorm& norm, cudaStream_t stream,
                                const uint16_t* bias) {
  run_add_rmsnorm<true>("gemv_bf16_silu_add_rmsnorm", gate_up, 2 * k, m, k, w, n, norm, stream,
                        bias);
}

}  // namespace lowbit::kernels::cuda
