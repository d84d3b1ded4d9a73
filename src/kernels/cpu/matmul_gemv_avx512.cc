// Decode-shaped matmul (few rows of x) with AVX-512: memory-bound, so the goal is to stream every
// weight byte exactly once at full bandwidth. Each step takes 32 consecutive weights from R rows
// of W, decodes them to fp32 in registers and multiply-adds them against G rows of x (R×G
// independent accumulators), so each loaded weight serves all G rows of x.
//
// BF16 decode costs two integer ops per 32 weights and no shuffle: one 64-byte load holds 32 bf16
// values; `v << 16` turns the even ones into fp32 lanes, `v & 0xFFFF0000` the odd ones. x is
// pre-arranged in the same even/odd order (pack_activation_rows), so no lane ever moves. Products
// and sums are fp32 (activations are never rounded to bf16); only the summation order differs
// from ref::matmul.
//
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (_mm512_undefined_ps),
// which -Wuninitialized reports at every inlined use of e.g. _mm512_cvtph_ps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/matmul_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kChunk = 32;     // weights per row per step
constexpr int kMaxGroup = 4;   // rows of x per pass over a block of W rows
constexpr int kBlockRows = 8;  // weight rows per block
// Software prefetch of each weight row 2 KiB ahead into L2. The hardware prefetchers stop at
// every 4 KiB page (one bf16 row of k = 2048); prefetching across it kept more DRAM reads in
// flight: +5-15% weight GB/s on Zen 4 with 1 and 2 threads (bench/NOTES.md). Past a row's end it
// touches the next row, which is harmless.
constexpr int kPrefetchBytes = 2048;

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

// With more than kMaxGroup rows of x, a block of W rows is passed over several times: the first
// pass streams it from DRAM, the later ones compute from cache. So that DRAM never idles, pass
// `part` of `parts` also prefetches every parts-th chunk (from chunk `part` on) of the next block
// into L2; together the passes fetch the whole next block, spread over the time they run.
template <typename T>
struct NextBlock {
  const T* rows = nullptr;  // the next block's rows matching this call's rows (null: none)
  int64_t part = 0;
  int64_t parts = 1;
};

// out[g * R + r] = dot(x row g, w row r) for R weight rows starting at w (row stride k) and G
// rows of packed x.
template <class Loader, int R, int G>
void dot_block(const typename Loader::T* w, int64_t k, const float* xp, int64_t padded_k,
               NextBlock<typename Loader::T> next, float* out) {
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
    if (next.rows != nullptr && (c / kChunk) % next.parts == next.part) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const char* line = reinterpret_cast<const char*>(next.rows + r * k + c);
        for (size_t b = 0; b < kChunk * sizeof(*w); b += 64) _mm_prefetch(line + b, _MM_HINT_T1);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w + r * k + c) + kPrefetchBytes, _MM_HINT_T1);
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
                     int64_t padded_k, NextBlock<typename Loader::T> next) {
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
  auto next_from = [&](int r0) {
    NextBlock<T> shifted = next;
    if (shifted.rows != nullptr) shifted.rows += r0 * a.k;
    return shifted;
  };
  int r0 = 0;
  for (; r0 + R <= count; r0 += R) {
    dot_block<Loader, R, G>(w + (row + r0) * a.k, a.k, xg, padded_k, next_from(r0), out);
    emit(row + r0, R);
  }
  for (; r0 < count; ++r0) {
    dot_block<Loader, 1, G>(w + (row + r0) * a.k, a.k, xg, padded_k, next_from(r0), out);
    emit(row + r0, 1);
  }
}

// Each block of kBlockRows weight rows is read from memory once and, for m > kMaxGroup, reused
// from L1/L2 by the later groups of x rows.
template <class Loader>
void gemv_rows(const MatmulArgs& a, Range rows, const float* xp, int64_t padded_k) {
  using T = typename Loader::T;
  const int64_t passes = (a.m + kMaxGroup - 1) / kMaxGroup;
  for (int64_t row = rows.begin; row < rows.end; row += kBlockRows) {
    const int count = static_cast<int>(std::min<int64_t>(kBlockRows, rows.end - row));
    const bool has_next = passes > 1 && row + kBlockRows + kBlockRows <= rows.end;
    for (int64_t g0 = 0; g0 < a.m; g0 += kMaxGroup) {
      NextBlock<T> next;
      if (has_next) {
        next = {static_cast<const T*>(a.w) + (row + kBlockRows) * a.k, g0 / kMaxGroup, passes};
      }
      switch (std::min<int64_t>(kMaxGroup, a.m - g0)) {
        case 1: block_for_group<Loader, 1>(a, row, count, g0, xp, padded_k, next); break;
        case 2: block_for_group<Loader, 2>(a, row, count, g0, xp, padded_k, next); break;
        case 3: block_for_group<Loader, 3>(a, row, count, g0, xp, padded_k, next); break;
        default: block_for_group<Loader, 4>(a, row, count, g0, xp, padded_k, next); break;
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
    default: throw_bad_dtype("gemv_avx512", args.w_dtype);
  }
}

}  // namespace lowbit::kernels::cpu::detail
