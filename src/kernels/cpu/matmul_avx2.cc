// Both matmul paths with AVX2 + FMA + F16C (8 fp32 lanes, 16 vector registers), for CPUs without
// AVX-512. Same structure as matmul_gemv_avx512.cc / matmul_gemm_avx512.cc (read those first):
// the streaming path decodes 16 weights per row per step (bf16 by shift/mask in the even/odd
// order x is packed in), the blocked path runs a 6 × 16 outer-product micro-kernel.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

// ---- streaming path ----------------------------------------------------------------------------

constexpr int kChunk = 16;     // weights per row per step
constexpr int kMaxGroup = 4;   // rows of x per pass over a block of W rows
constexpr int kBlockRows = 8;  // weight rows per block

// 16 weights → two fp32 vectors. AVX2 has no 16-bit masked load, so a partial chunk is first
// copied into a zero-padded buffer (once per row per call).
template <typename T>
const T* tail_chunk(const T* p, int64_t count, T* buffer) {
  std::memset(buffer, 0, kChunk * sizeof(T));
  std::memcpy(buffer, p, static_cast<size_t>(count) * sizeof(T));
  return buffer;
}

struct Bf16Loader {
  using T = uint16_t;
  static void load(const T* p, __m256& lo, __m256& hi) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

struct F16Loader {
  using T = uint16_t;
  static void load(const T* p, __m256& lo, __m256& hi) {
    lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
};

struct F32Loader {
  using T = float;
  static void load(const T* p, __m256& lo, __m256& hi) {
    lo = _mm256_loadu_ps(p);
    hi = _mm256_loadu_ps(p + 8);
  }
};

float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <class Loader, int R, int G>
void dot_block(const typename Loader::T* w, int64_t k, const float* xp, int64_t padded_k,
               float* out) {
  using T = typename Loader::T;
  __m256 acc[G][R];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[g][r] = _mm256_setzero_ps();
  }
  auto step = [&](int r, int64_t c, const T* p) {
    __m256 wl, wh;
    Loader::load(p, wl, wh);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      acc[g][r] = _mm256_fmadd_ps(wl, _mm256_load_ps(xp + g * padded_k + c), acc[g][r]);
      acc[g][r] = _mm256_fmadd_ps(wh, _mm256_load_ps(xp + g * padded_k + c + 8), acc[g][r]);
    }
  };
  const int64_t full = k / kChunk * kChunk;
  for (int64_t c = 0; c < full; c += kChunk) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // 2 KiB ahead into L2, as in matmul_gemv_avx512.cc.
      _mm_prefetch(reinterpret_cast<const char*>(w + r * k + c) + 2048, _MM_HINT_T1);
      step(r, c, w + r * k + c);
    }
  }
  if (full < k) {
    T tail[kChunk];
    for (int r = 0; r < R; ++r) step(r, full, tail_chunk(w + r * k + full, k - full, tail));
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) out[g * R + r] = horizontal_sum(acc[g][r]);
  }
}

template <int G>
constexpr int rows_per_block() {
  return G <= 2 ? 4 : 2;  // G·R accumulators + 2 weight vectors fit in 16 registers
}

// y for rows [row, row + count) of W (count <= kBlockRows) and rows [g0, g0 + G) of x.
template <class Loader, int G>
void block_for_group(const MatmulArgs& a, int64_t row, int count, int64_t g0, const float* xp,
                     int64_t padded_k) {
  constexpr int R = rows_per_block<G>();
  static_assert(kBlockRows % R == 0);
  using T = typename Loader::T;
  const T* w = static_cast<const T*>(a.w);
  float out[G * R];
  const float* xg = xp + g0 * padded_k;
  auto emit = [&](int64_t first, int rows) {
    for (int g = 0; g < G; ++g) {
      float* y = a.y + (g0 + g) * a.n + first;
      for (int r = 0; r < rows; ++r) y[r] = out[g * rows + r] + (a.bias ? a.bias[first + r] : 0.0f);
    }
  };
  int r0 = 0;
  for (; r0 + R <= count; r0 += R) {
    dot_block<Loader, R, G>(w + (row + r0) * a.k, a.k, xg, padded_k, out);
    emit(row + r0, R);
  }
  for (; r0 < count; ++r0) {
    dot_block<Loader, 1, G>(w + (row + r0) * a.k, a.k, xg, padded_k, out);
    emit(row + r0, 1);
  }
}

// Each block of kBlockRows weight rows is read from memory once and, for m > kMaxGroup, reused
// from L1/L2 by the later groups of x rows. (Unlike the AVX-512 version, the later passes do not
// prefetch the next block: this fallback was not tuned for 5 <= m <= 32.)
template <class Loader>
void gemv_rows(const MatmulArgs& a, Range rows, const float* xp, int64_t padded_k) {
  for (int64_t row = rows.begin; row < rows.end; row += kBlockRows) {
    const int count = static_cast<int>(std::min<int64_t>(kBlockRows, rows.end - row));
    for (int64_t g0 = 0; g0 < a.m; g0 += kMaxGroup) {
      switch (std::min<int64_t>(kMaxGroup, a.m - g0)) {
        case 1: block_for_group<Loader, 1>(a, row, count, g0, xp, padded_k); break;
        case 2: block_for_group<Loader, 2>(a, row, count, g0, xp, padded_k); break;
        case 3: block_for_group<Loader, 3>(a, row, count, g0, xp, padded_k); break;
        default: block_for_group<Loader, 4>(a, row, count, g0, xp, padded_k); break;
      }
    }
  }
}

// ---- blocked path ------------------------------------------------------------------------------

constexpr int kMr = 6;
constexpr int kNv = 2;
constexpr int kNr = 8 * kNv;

__m256i column_mask(int64_t valid_columns, int v) {
  int64_t left = std::clamp<int64_t>(valid_columns - 8 * v, 0, 8);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lanes);
}

void micro_kernel(const float* xs, const float* wp, int64_t kc, float* y, int64_t ldy, int rows,
                  int64_t columns, const float* bias, bool first) {
  __m256i mask[kNv];
  for (int v = 0; v < kNv; ++v) mask[v] = column_mask(columns, v);
  __m256 acc[kMr][kNv];
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      if (i >= rows) {
        acc[i][v] = _mm256_setzero_ps();
      } else if (!first) {
        acc[i][v] = _mm256_maskload_ps(y + i * ldy + 8 * v, mask[v]);
      } else {
        acc[i][v] = bias ? _mm256_maskload_ps(bias + 8 * v, mask[v]) : _mm256_setzero_ps();
      }
    }
  }
  for (int64_t p = 0; p < kc; ++p) {
    __m256 b[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) b[v] = _mm256_load_ps(wp + p * kNr + 8 * v);
#pragma GCC unroll 8
    for (int i = 0; i < kMr; ++i) {
      __m256 a = _mm256_broadcast_ss(xs + p * kMr + i);
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) acc[i][v] = _mm256_fmadd_ps(a, b[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMr; ++i) {
    if (i >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) _mm256_maskstore_ps(y + i * ldy + 8 * v, mask[v], acc[i][v]);
  }
}

}  // namespace

void gemv_avx2(const MatmulArgs& args) {
  switch (args.w_dtype) {
    case DType::BF16: run_streaming(args, kChunk, true, gemv_rows<Bf16Loader>); return;
    case DType::F16: run_streaming(args, kChunk, false, gemv_rows<F16Loader>); return;
    case DType::F32: run_streaming(args, kChunk, false, gemv_rows<F32Loader>); return;
    default: throw_bad_dtype("gemv_avx2", args.w_dtype);
  }
}

BlockedKernel blocked_kernel_avx2() {
  // x sliver 6·512·4 = 12 KiB (L1); W block 128·512·4 = 256 KiB (L2).
  return BlockedKernel{kMr, kNr, 512, 128, micro_kernel};
}

void gemm_avx2(const MatmulArgs& args) { run_blocked(args, blocked_kernel_avx2()); }

}  // namespace lowbit::kernels::cpu::detail
