// Decode-shaped matmul (few rows of x) with AVX-512: memory-bound, so the goal is to stream every
// weight byte exactly once at full bandwidth. Each step takes 32 consecutive weights from R rows
// of W, decodes them to fp32 in registers and multiply-adds them against G rows of x (R×G
// independent accumulators), so each loaded weight serves all G rows of x.
//
// BF16 decode costs two integer ops per 32 weights and no shuffle: one 64-byte load holds 32 bf16
// values; `v << 16` turns the even ones into fp32 lanes, `v & 0xFFFF0000` the odd ones. x is
// pre-arranged in the same even/odd order (pack_activation_rows), so no lane ever moves. The sum
// is exact-order-independent fp32 (activations are never rounded to bf16).
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (_mm512_undefined_ps),
// which -Wuninitialized reports at every inlined use of e.g. _mm512_cvtph_ps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/matmul_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kChunk = 32;    // weights per row per step
constexpr int kMaxGroup = 4;
constexpr int kBlockRows = 8;  // weight rows per block  // rows of x per pass over a block of W rows
// Software prefetch distance along each weight row (0 = rely on the hardware prefetchers).
#ifndef LOWBIT_GEMV_PREFETCH
#define LOWBIT_GEMV_PREFETCH 0
#endif
constexpr int kPrefetchBytes = LOWBIT_GEMV_PREFETCH;
#ifndef LOWBIT_GEMV_PREFETCH_HINT
#define LOWBIT_GEMV_PREFETCH_HINT _MM_HINT_T0
#endif

// Loaders: 32 weights at p → two fp32 vectors in the order x is packed in; load_tail reads only
// the `mask`ed ones (zero elsewhere), for the ragged end of a row.
struct Bf16Loader {
  using T = uint16_t;
  static void split(__m512i v, __m512& lo, __m512& hi) {
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static void load(const T* p, __m512& lo, __m512& hi) { split(_mm512_loadu_si512(p), lo, hi); }
  static void load_tail(const T* p, __mmask32 mask, __m512& lo, __m512& hi) {
    split(_mm512_maskz_loadu_epi16(mask, p), lo, hi);
  }
};

struct F16Loader {
  using T = uint16_t;
  static void load(const T* p, __m512& lo, __m512& hi) {
    lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  static void load_tail(const T* p, __mmask32 mask, __m512& lo, __m512& hi) {
    lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>(mask), p));
    hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>(mask >> 16), p + 16));
  }
};

struct F32Loader {
  using T = float;
  static void load(const T* p, __m512& lo, __m512& hi) {
    lo = _mm512_loadu_ps(p);
    hi = _mm512_loadu_ps(p + 16);
  }
  static void load_tail(const T* p, __mmask32 mask, __m512& lo, __m512& hi) {
    lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), p);
    hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), p + 16);
  }
};

template <int R, int G>
struct Accumulators {
  __m512 v[G][R];

  // acc[g][r] += wl·xl[g] + wh·xh[g] for one weight row r.
  void add(int r, __m512 wl, __m512 wh, const __m512* xl, const __m512* xh) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      v[g][r] = _mm512_fmadd_ps(wl, xl[g], v[g][r]);
      v[g][r] = _mm512_fmadd_ps(wh, xh[g], v[g][r]);
    }
  }
};

// out[g * R + r] = dot(x row g, w row r) for R weight rows starting at w (row stride k) and G
// rows of packed x.
template <class Loader, int R, int G>
void dot_block(const typename Loader::T* w, int64_t k, const float* xp, int64_t padded_k,
               float* out) {
  Accumulators<R, G> acc;
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc.v[g][r] = _mm512_setzero_ps();
  }
  __m512 xl[G], xh[G];
  auto load_x = [&](int64_t c) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      xl[g] = _mm512_load_ps(xp + g * padded_k + c);
      xh[g] = _mm512_load_ps(xp + g * padded_k + c + 16);
    }
  };
  const int64_t full = k / kChunk * kChunk;
  for (int64_t c = 0; c < full; c += kChunk) {
    load_x(c);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (kPrefetchBytes > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(w + r * k + c) + kPrefetchBytes, LOWBIT_GEMV_PREFETCH_HINT);
      }
      __m512 wl, wh;
      Loader::load(w + r * k + c, wl, wh);
      acc.add(r, wl, wh, xl, xh);
    }
  }
  if (full < k) {
    load_x(full);
    const auto mask = static_cast<__mmask32>((uint64_t{1} << (k - full)) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 wl, wh;
      Loader::load_tail(w + r * k + full, mask, wl, wh);
      acc.add(r, wl, wh, xl, xh);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) out[g * R + r] = _mm512_reduce_add_ps(acc.v[g][r]);
  }
}

// Rows per block for G rows of x: enough independent accumulators to hide FMA latency and keep
// several weight streams in flight, few enough to stay in the 32 vector registers.
template <int G>
constexpr int rows_per_block() {
  return G == 1 ? 8 : 4;
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
// from L1/L2 by the later groups of x rows.
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

}  // namespace

void gemv_avx512(const MatmulArgs& args) {
  switch (args.w_dtype) {
    case DType::BF16: run_streaming(args, kChunk, true, gemv_rows<Bf16Loader>); return;
    case DType::F16: run_streaming(args, kChunk, false, gemv_rows<F16Loader>); return;
    case DType::F32: run_streaming(args, kChunk, false, gemv_rows<F32Loader>); return;
    default: throw Internal("gemv_avx512: weight dtype " + std::string(dtype_name(args.w_dtype)));
  }
}

}  // namespace lowbit::kernels::cpu::detail
