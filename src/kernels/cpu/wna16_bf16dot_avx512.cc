// Weight-only integer matmul, decode path, 2..4-bit codes, AVX-512 + AVX512_BF16: x rounded to
// bf16 (nearest even; the activation precision "A16" names), multiplied by the exact integer codes
// with vdpbf16ps, scales applied per group in fp32. The only rounding beyond fp32 summation is
// x's: |Δy| ≤ 2^-9 · Σ|w·x|.
//
//   y[r] = Σ_g s[r][g] · (Σ_{c∈g} (q - z0) · bf16(x_c) - (z[r][g] - z0) · Σ_{c∈g} bf16(x_c))
//
// with z0 = 2^(bits-1): q - z0 is an integer in [-8, 7], exact in bf16, so each product is exact
// in fp32; symmetric weights (z = z0) need no correction term, asymmetric ones use the per-group
// sums of bf16(x) computed once per call (wna16_dispatch.cc).
//
// Why this is twice as fast as the fp32 path: the 32 bytes of two adjacent tile rows (64 codes)
// zero-extend to 32 16-bit lanes, whose low nibbles (then, after one shift, high nibbles) index a
// 16-entry bf16 table with vpermw: 4 shuffle-unit instructions per 64 weights instead of per 32,
// and one vdpbf16ps does 32 multiply-adds. Lanes 0-7 of an accumulator hold the first row, lanes
// 8-15 the second; each 16-column half of x is loaded into both halves of a vector
// (vbroadcasti64x4, a load-port operation) so that both rows meet the same columns. Storing x
// without that duplication keeps it at 2 bytes per column: 16 KiB for k = 8192, which stays in
// L1 beside the weight stream.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/wna16_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kRows = kWna16TileRows;
constexpr int kPairs = kRows / 2;
constexpr int kMaxGroup = 3;  // rows of x per pass over a tile: 2·4·G accumulators in registers

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

uint16_t bf16_of_small_int(int v) {  // exact for |v| < 256
  float f = static_cast<float>(v);
  uint32_t bits;
  __builtin_memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// 32 words: entry j = bf16((j mod 16) - z0). vpermw reads 5 index bits, and bit 4 of a
// zero-extended code byte is the high nibble's lowest bit, so both halves hold the same table.
__m512i code_table(int z0) {
  alignas(64) uint16_t t[32];
  for (int j = 0; j < 32; ++j) t[j] = bf16_of_small_int((j & 15) - z0);
  return _mm512_load_si512(t);
}

float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <int G>
struct PairAccumulators {
  __m512 v[G][kPairs];
  PairAccumulators() {
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) v[i][p] = _mm512_setzero_ps();
    }
  }
};

// out[i · 8 + r] = dot(bf16 x row i, weight row 8·tile + r) for G rows of x.
template <int G>
void tile_dot(const Wna16Args& a, int64_t tile, int64_t i0, const uint8_t* next, int64_t part,
              int64_t parts, float* out) {
  const Wna16Layout& w = *a.w;
  const int64_t per_row = w.padded_cols;
  const uint16_t* xb = a.xb + i0 * per_row;
  const int z0 = static_cast<int>(w.default_zero);
  const __m512i table = code_table(z0);
  const uint8_t* tile_codes = w.codes + tile * w.col_blocks * kRows * 16;
  PairAccumulators<G> acc;
  __m256 correction[G];
  for (int i = 0; i < G; ++i) correction[i] = _mm256_setzero_ps();
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t cb0 = w.group_blocks[g], cb1 = w.group_blocks[g + 1];
    if (cb0 == cb1) continue;
    PairAccumulators<G> sums;  // Σ (q - z0) · bf16(x) over the group
    for (int64_t cb = cb0; cb < cb1; ++cb) {
      const uint8_t* codes = tile_codes + cb * kRows * 16;
      if (next != nullptr && cb % parts == part) {  // see wna16_gemv_bf16dot_avx512
        _mm_prefetch(reinterpret_cast<const char*>(next + cb * kRows * 16), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(next + cb * kRows * 16) + 64, _MM_HINT_T1);
      }
      __m512bh x_lo[G], x_hi[G];
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) {
        const __m256i* x = reinterpret_cast<const __m256i*>(xb + i * per_row + cb * kWna16BlockCols);
        x_lo[i] = (__m512bh)_mm512_broadcast_i64x4(_mm256_loadu_si256(x));
        x_hi[i] = (__m512bh)_mm512_broadcast_i64x4(_mm256_loadu_si256(x + 1));
      }
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) {
        const __m512i v = _mm512_cvtepu8_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + p * 32)));
        const __m512bh lo = (__m512bh)_mm512_permutexvar_epi16(v, table);
        const __m512bh hi = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), table);
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i) {
          sums.v[i][p] = _mm512_dpbf16_ps(sums.v[i][p], lo, x_lo[i]);
          sums.v[i][p] = _mm512_dpbf16_ps(sums.v[i][p], hi, x_hi[i]);
        }
      }
    }
    const int64_t at = (tile * w.groups + g) * kRows;
    const __m256 s8_256 = w.scales_f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales_f16 + at)))
                                       : _mm256_loadu_ps(w.scales + at);
    const __m512 s8 = _mm512_castps256_ps512(s8_256);
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) {
      // Lanes 0-7: scale of row 2p, lanes 8-15: of row 2p + 1.
      const __m512i pick = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
      const __m512 scale = _mm512_permutexvar_ps(pick, s8);
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) acc.v[i][p] = _mm512_fmadd_ps(sums.v[i][p], scale, acc.v[i][p]);
    }
    if (w.zeros != nullptr) {
      const uint8_t* z = w.zeros + (tile * w.groups + g) * kRows;
      const __m256 dz = _mm256_sub_ps(
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(z)))),
          _mm256_set1_ps(static_cast<float>(z0)));
      const __m256 dz_scale = _mm256_mul_ps(dz, _mm512_castps512_ps256(s8));
      for (int i = 0; i < G; ++i) {
        const float xsum = a.xsum[(i0 + i) * w.groups + g];
        correction[i] = _mm256_fmadd_ps(dz_scale, _mm256_set1_ps(xsum), correction[i]);
      }
    }
  }
  for (int i = 0; i < G; ++i) {
    alignas(32) float corr[kRows];
    _mm256_store_ps(corr, correction[i]);
    for (int p = 0; p < kPairs; ++p) {
      out[i * kRows + 2 * p] = sum8(_mm512_castps512_ps256(acc.v[i][p])) - corr[2 * p];
      out[i * kRows + 2 * p + 1] = sum8(_mm512_extractf32x8_ps(acc.v[i][p], 1)) - corr[2 * p + 1];
    }
  }
}

template <int G>
void tile_for_group(const Wna16Args& a, int64_t tile, int64_t i0, const uint8_t* next,
                    int64_t passes) {
  const Wna16Layout& w = *a.w;
  float out[G * kRows];
  tile_dot<G>(a, tile, i0, next, i0 / kMaxGroup, passes, out);
  const int64_t row0 = tile * kRows;
  const int rows = static_cast<int>(min64(kRows, w.rows - row0));
  for (int i = 0; i < G; ++i) {
    float* y = a.y + (i0 + i) * w.rows + row0;
    for (int r = 0; r < rows; ++r) y[r] = out[i * kRows + r] + (a.bias ? a.bias[row0 + r] : 0.0f);
  }
}

}  // namespace

// Every tile prefetches the next one into L2 as it goes, one block of the next tile per block of
// this one: the hardware prefetchers stop at each 4 KiB page, and at m = 1 this alone raised the
// weight stream from ~44 to ~50-70 GB/s on the 1B shapes (bench/NOTES.md, 2026-12-01). With m > 3
// a tile is passed over more than once: pass `part` of `parts` prefetches every parts-th block, so
// that DRAM streams while the later passes compute from cache (as in wna16_avx512.cc).
void wna16_gemv_bf16dot_avx512(const Wna16Args& a, Range tiles) {
  const Wna16Layout& w = *a.w;
  const int64_t passes = (a.m + kMaxGroup - 1) / kMaxGroup;
  for (int64_t tile = tiles.begin; tile < tiles.end; ++tile) {
    const uint8_t* next = tile + 1 < tiles.end
                              ? w.codes + (tile + 1) * w.col_blocks * kRows * 16
                              : nullptr;
    for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGroup) {
      switch (min64(kMaxGroup, a.m - i0)) {
        case 1: tile_for_group<1>(a, tile, i0, next, passes); break;
        case 2: tile_for_group<2>(a, tile, i0, next, passes); break;
        default: tile_for_group<3>(a, tile, i0, next, passes); break;
      }
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
