// W8A8 / W4A8 with AVX2, on the same 16-row tiles as the VNNI kernel (w8a8_kernels.h), each
// 64-byte block taken as two halves of 8 rows. vpmaddubsw (unsigned × signed bytes → pairs summed
// into int16) saturates for 8-bit codes (255 · 128 · 2 > 32767), so every code is split into
// nibbles: code = 16·hi + lo, each product pair at most 15 · 128 · 2 = 3840, exact; vpmaddwd then
// widens the pairs to one int32 per row (by 1 for lo, by 16 for hi). For 4-bit codes the two
// nibbles are two different blocks of k and share one vpmaddwd.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cpu/w8a8_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

// Software prefetch of the weight stream this far ahead into L2: the hardware prefetchers stop at
// every 4 KiB page (as in wna16 and the dense GEMV, bench/NOTES.md).
constexpr int64_t kPrefetchAhead = 2048;

struct Job {
  const W8a8Tiles& w;
  const Int8Rows& x;
  const float* bias;
  float* y;
};

__m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Σ over one 32-byte half block (8 rows) for one row of x at q, added to acc.
template <bool kNibbles>
__m256i dot_half(__m256i acc, __m256i lo, __m256i hi, const int8_t* q) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kNibbles) {
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast4(q)),
                                           _mm256_maddubs_epi16(hi, broadcast4(q + 4)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
  } else {
    const __m256i xq = broadcast4(q);
    const __m256i sum =
        _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, xq), ones),
                         _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xq), _mm256_set1_epi16(16)));
    return _mm256_add_epi32(acc, sum);
  }
}

// y rows i0..i0+MR-1 × the 16 output rows of tile t.
template <int MR, bool kNibbles, bool kGrouped>
void tile_kernel(const Job& job, int64_t i0, int64_t t) {
  const W8a8Tiles& w = job.w;
  const Int8Rows& x = job.x;
  const uint8_t* wt = w.codes + t * w.blocks * kW8a8BlockBytes;
  const int8_t* xr = x.codes + i0 * x.stride;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const int64_t groups = kGrouped ? w.groups : 1;
  __m256 out[MR][2];
  if constexpr (kGrouped) {
    for (int i = 0; i < MR; ++i) out[i][0] = out[i][1] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b0 = g * w.group_blocks, b1 = std::min(w.blocks, b0 + w.group_blocks);
    int32_t sums[MR];
    __m256i acc[MR][2];
    for (int i = 0; i < MR; ++i) {
      sums[i] = x.group_sums[(i0 + i) * w.groups + g];
      const __m256i init =
          w.zeros ? _mm256_setzero_si256()
                  : _mm256_set1_epi32(static_cast<int32_t>(
                        -static_cast<uint32_t>(w.symmetric_zero) * static_cast<uint32_t>(sums[i])));
      acc[i][0] = acc[i][1] = init;
    }
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* block = wt + b * kW8a8BlockBytes;
      // Tiles are contiguous: this runs on into the next tile's codes. Only the first pass over
      // a tile (i0 = 0) prefetches; later ones read it from cache.
      if (i0 == 0) _mm_prefetch(reinterpret_cast<const char*>(block) + kPrefetchAhead, _MM_HINT_T1);
      for (int h = 0; h < 2; ++h) {
        const __m256i codes = _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 32 * h));
        const __m256i lo = _mm256_and_si256(codes, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(codes, 4), low4);
        for (int i = 0; i < MR; ++i) {
          acc[i][h] = dot_half<kNibbles>(acc[i][h], lo, hi, xr + i * x.stride + w.kblock * b);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int64_t slot = (t * w.groups + g) * kW8a8TileRows + 8 * h;
      if (w.zeros) {
        const __m256i z =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.zeros + slot)));
        for (int i = 0; i < MR; ++i) {
          acc[i][h] =
              _mm256_sub_epi32(acc[i][h], _mm256_mullo_epi32(z, _mm256_set1_epi32(sums[i])));
        }
      }
      const __m256 s = _mm256_loadu_ps(w.scales + slot);
      for (int i = 0; i < MR; ++i) {
        const __m256 f = _mm256_cvtepi32_ps(acc[i][h]);
        out[i][h] = kGrouped ? _mm256_fmadd_ps(f, s, out[i][h]) : _mm256_mul_ps(f, s);
      }
    }
  }
  const __m256 zx = _mm256_set1_ps(static_cast<float>(x.zero));
  for (int h = 0; h < 2; ++h) {
    const int64_t r = t * kW8a8TileRows + 8 * h;
    const int64_t left = std::min<int64_t>(8, w.rows - r);
    if (left <= 0) break;
    alignas(32) int32_t lanes[8];
    for (int j = 0; j < 8; ++j) lanes[j] = j < left ? -1 : 0;
    const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    const __m256 e = _mm256_loadu_ps(w.zero_x_terms + r);
    const __m256 b = job.bias ? _mm256_maskload_ps(job.bias + r, mask) : _mm256_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      __m256 o = out[i][h];
      if (x.zero != 0) o = _mm256_fnmadd_ps(zx, e, o);
      o = _mm256_fmadd_ps(o, _mm256_set1_ps(x.scales[i0 + i]), b);
      _mm256_maskstore_ps(job.y + (i0 + i) * w.rows + r, mask, o);
    }
  }
}

template <bool kNibbles, bool kGrouped>
void run_tiles(const Job& job, Range tiles) {
  constexpr int kMr = kGrouped ? 2 : 4;  // accumulators within the 16 ymm registers
  for (int64_t t = tiles.begin; t < tiles.end; ++t) {
    int64_t i0 = 0;
    for (; i0 + kMr <= job.x.m; i0 += kMr) tile_kernel<kMr, kNibbles, kGrouped>(job, i0, t);
    for (; i0 < job.x.m; ++i0) tile_kernel<1, kNibbles, kGrouped>(job, i0, t);
  }
}

// round_half_even(clamp(q, -128, 127)) of 8 lanes, NaN → 0, stored as 8 bytes.
void store_codes8(__m256 q, int8_t* out) {
  q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
  const __m256i v =
      _mm256_cvttps_epi32(_mm256_round_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packs_epi16(words, words));
}

int8_t code_of(float v) {  // the scalar form of store_codes8
  if (std::isnan(v)) return 0;
  const float clamped = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
  return static_cast<int8_t>(std::nearbyint(clamped));
}

}  // namespace

void w8a8_tiles_avx2(const W8a8Tiles& w, const Int8Rows& x, Range tiles, const float* bias,
                     float* y) {
  const Job job{w, x, bias, y};
  const bool grouped = w.groups > 1;
  if (w.nibbles) {
    grouped ? run_tiles<true, true>(job, tiles) : run_tiles<true, false>(job, tiles);
  } else {
    grouped ? run_tiles<false, true>(job, tiles) : run_tiles<false, false>(job, tiles);
  }
}

void w8a8_quantize_avx2(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                        int64_t stride, int8_t* codes, float* scales) {
  const int64_t full = k / 8 * 8;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    int8_t* out = codes + i * stride;
    float scale = act.static_scale;
    float zero = static_cast<float>(act.static_zero);
    if (act.dynamic) {
      __m256 absmax = _mm256_setzero_ps();
      __m256 nan = _mm256_setzero_ps();
      const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
      for (int64_t c = 0; c < full; c += 8) {
        const __m256 v = _mm256_loadu_ps(row + c);
        absmax = _mm256_max_ps(_mm256_and_ps(v, abs_mask), absmax);  // NaN first operand: absmax
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, absmax);
      float a = 0.0f;
      for (float l : lanes) a = l > a ? l : a;
      bool has_nan = _mm256_movemask_ps(nan) != 0;
      for (int64_t c = full; c < k; ++c) {
        const float v = std::fabs(row[c]);
        a = v > a ? v : a;
        has_nan = has_nan || v != v;
      }
      scale = has_nan ? NAN : a / 127.5f;
      if (scale == 0.0f) scale = FLT_EPSILON;
      zero = 0.0f;
    }
    scales[i] = scale;
    const __m256 vs = _mm256_set1_ps(scale), vz = _mm256_set1_ps(zero);
    for (int64_t c = 0; c < full; c += 8) {
      store_codes8(_mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(row + c), vs), vz), out + c);
    }
    for (int64_t c = full; c < k; ++c) out[c] = code_of(row[c] / scale + zero);
    std::memset(out + k, 0, static_cast<size_t>(stride - k));
  }
}

}  // namespace lowbit::kernels::cpu::detail
