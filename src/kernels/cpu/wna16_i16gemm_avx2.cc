// Weight-only integer matmul, prefill path (many rows of x), AVX2: the arithmetic of the i16-dot
// decode kernel (wna16_i16dot_avx2.cc: x as int16 per run of up to 128 columns, exact int32
// sums of code · xq, one fp32 scale product and zero-point fold per run) as a register-blocked
// GEMM. vpmaddwd does 16 products per instruction where the fp32 blocked kernel's FMA does 8, so
// the compute ceiling doubles; the codes need no decode to fp32 panels either.
//
// Per thread, for each run of up to 16 row tiles (128 weight rows) and each segment of the packed
// columns (up to 128 of one group):
//  1. the segment's codes of each tile pair are unpacked once into a panel of int16 pairs,
//     panel[j][t] = 8 int32 lanes holding (w[row][2j], w[row][2j + 1]) for the 8 rows of tile t
//     (an 8x8 transpose of the row-major codes per 16 columns), 4 KiB per pair, 32 KiB a run;
//  2. every sliver of kMr rows of x meets each panel: per column pair one int32 broadcast of
//     (xq[i][2j], xq[i][2j + 1]) per row of x (xq_pairs: the sliver's segment is one contiguous
//     KiB) and one vpmaddwd + vpaddd per (row of x, tile);
//  3. the sums go into y: y += cvt(sum) · (scale · sx) - scale · zero · sx · Σxq, 8 rows a vector.
// y starts from the bias (or 0); the run's y (m · 128 floats) stays in L2 across segments, and x
// is streamed once per run (a first version streamed it once per tile pair, from L3, and ran at
// the fp32 kernel's speed).
#include <immintrin.h>

#include "kernels/cpu/wna16_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kRows = kWna16TileRows;
// 3 rows of x × 2 tiles: 6 int32 accumulators, 2 panel vectors, 3 broadcasts and products in
// registers; 5 loads per 6 vpmaddwd keep the two multiply pipes busy. (4 × 2 would need 12-13
// registers, and GCC 12 then spilled one accumulator per iteration: a load-add-store chain that
// cost ~40 %, measured; 6 × 2 spilled a third of them.)
constexpr int kMr = kWna16I16GemmRows;
constexpr int kPairsPerBlock = kWna16BlockCols / 2;
constexpr int64_t kMaxPanelPairs = kWna16I16SegmentBlocks * kPairsPerBlock;

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Columns of the 8x8 int32 matrix whose rows are r[0..7].
void transpose8(__m256i r[8]) {
  const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
  r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
  r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
  r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
  r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
  r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
  r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
  r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
  r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// Column blocks [cb0, cb1) of tile `tile` as int16 pairs: panel[(j · T + slot) · 8 + r] (int32
// units), j the column pair within the segment.
template <int T>
void pack_panel(const Wna16Layout& w, int64_t tile, int slot, int64_t cb0, int64_t cb1,
                int32_t* panel) {
  const __m256i low_nibble = _mm256_set1_epi16(0xF);
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const uint8_t* codes = w.codes + (tile * w.col_blocks + cb) * kRows * w.block_bytes;
    __m256i lo[kRows], hi[kRows];  // per row: column pairs 0-7 and 8-15 of the block
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* p = codes + r * w.block_bytes;
      if (w.nibbles) {  // byte b: column b (low nibble) and b + 16 (high nibble)
        const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        lo[r] = _mm256_and_si256(v, low_nibble);
        hi[r] = _mm256_srli_epi16(v, 4);
      } else {
        lo[r] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        hi[r] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
      }
    }
    transpose8(lo);
    transpose8(hi);
    int32_t* out = panel + (cb - cb0) * kPairsPerBlock * T * kRows;
    for (int j = 0; j < kPairsPerBlock / 2; ++j) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + (j * T + slot) * kRows), lo[j]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + ((j + 8) * T + slot) * kRows), hi[j]);
    }
  }
}

// What the micro-kernel needs of one segment: its x, its length, and per tile its scales.
struct Segment {
  const int32_t* x = nullptr;  // the segment's first sliver in xq_pairs
  int64_t pairs = 0;
  int64_t index = 0;
};

// y rows [i0, i0 + MR) × tiles tile0 .. tile0 + T - 1 += the segment's contribution.
template <int MR, int T>
void micro(const Wna16Args& a, const int32_t* panel, const Segment& seg, int64_t i0,
           int64_t tile0, const __m256* scale, const __m256* scale_zero) {
  const Wna16Layout& w = *a.w;
  // Every loop over acc is unrolled completely, so that it lives in registers (an array GCC
  // cannot index at compile time goes to the stack, and the sums then chain through memory).
  __m256i acc[MR][T];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_si256();
  }
  const int32_t* x = seg.x + (i0 / kMr) * seg.pairs * kMr;
  for (int64_t j = 0; j < seg.pairs; ++j) {
    __m256i wv[T];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) wv[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(panel + (j * T + t) * kRows));
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256i xb = _mm256_set1_epi32(x[j * kMr + i]);
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_madd_epi16(wv[t], xb));
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const int64_t s = (i0 + i) * a.segments + seg.index;
    const __m256 sx = _mm256_set1_ps(a.xq_scale[s]);
    const __m256 sx_sum = _mm256_set1_ps(a.xq_sum[s]);
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) {
      const int64_t row0 = (tile0 + t) * kRows;
      float* y = a.y + (i0 + i) * w.rows + row0;
      __m256 part = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[i][t]), _mm256_mul_ps(scale[t], sx));
      part = _mm256_fnmadd_ps(scale_zero[t], sx_sum, part);
      if (row0 + kRows <= w.rows) {
        _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), part));
      } else {  // the last tile's rows past n are padding
        alignas(32) float lanes[kRows];
        _mm256_store_ps(lanes, part);
        for (int r = 0; r < w.rows - row0; ++r) y[r] += lanes[r];
      }
    }
  }
}

template <int T>
void micro_rows(const Wna16Args& a, const int32_t* panel, const Segment& seg, int64_t i0,
                int64_t tile0, const __m256* scale, const __m256* scale_zero) {
  static_assert(kMr == 3, "one case per row count below");
  switch (min64(kMr, a.m - i0)) {
    case 1: micro<1, T>(a, panel, seg, i0, tile0, scale, scale_zero); break;
    case 2: micro<2, T>(a, panel, seg, i0, tile0, scale, scale_zero); break;
    default: micro<kMr, T>(a, panel, seg, i0, tile0, scale, scale_zero); break;
  }
}

__m256 tile_scales(const Wna16Layout& w, int64_t at) {
  return w.scales_f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales_f16 + at)))
                      : _mm256_loadu_ps(w.scales + at);
}

__m256 tile_zeros(const Wna16Layout& w, int64_t at) {
  if (w.zeros == nullptr) return _mm256_set1_ps(w.default_zero);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.zeros + at))));
}

// A run of up to kPairsPerRun tile pairs [tile0, tile1) against every row of x: per segment,
// their panels are packed once (up to 32 KiB, L1/L2), then every sliver of x (1 KiB, L1) meets
// each of them. The run's y (m · 128 floats) stays in L2 across segments; x is read once per run.
constexpr int kPairsPerRun = 8;

void run_of_tiles(const Wna16Args& a, int64_t tile0, int64_t tile1, int32_t* panels) {
  const Wna16Layout& w = *a.w;
  constexpr int64_t panel_ints = kMaxPanelPairs * 2 * kRows;
  int64_t seg_index = 0;
  for (int64_t g = 0; g < w.groups; ++g) {
    __m256 scale[2 * kPairsPerRun], scale_zero[2 * kPairsPerRun];
    for (int64_t t = tile0; t < tile1; ++t) {
      const int64_t at = (t * w.groups + g) * kRows;
      scale[t - tile0] = tile_scales(w, at);
      scale_zero[t - tile0] = _mm256_mul_ps(scale[t - tile0], tile_zeros(w, at));
    }
    const int64_t g_end = w.group_blocks[g + 1];
    for (int64_t cb0 = w.group_blocks[g]; cb0 < g_end; cb0 += kWna16I16SegmentBlocks, ++seg_index) {
      const int64_t cb1 = min64(cb0 + kWna16I16SegmentBlocks, g_end);
      Segment seg;
      seg.index = seg_index;
      seg.pairs = (cb1 - cb0) * kPairsPerBlock;
      seg.x = a.xq_pairs + cb0 * kPairsPerBlock * a.slivers * kMr;
      for (int64_t t = tile0; t < tile1; t += 2) {
        int32_t* panel = panels + (t - tile0) / 2 * panel_ints;
        if (t + 2 <= tile1) {
          pack_panel<2>(w, t, 0, cb0, cb1, panel);
          pack_panel<2>(w, t + 1, 1, cb0, cb1, panel);
        } else {
          pack_panel<1>(w, t, 0, cb0, cb1, panel);
        }
      }
      for (int64_t i0 = 0; i0 < a.m; i0 += kMr) {
        for (int64_t t = tile0; t < tile1; t += 2) {
          const int32_t* panel = panels + (t - tile0) / 2 * panel_ints;
          if (t + 2 <= tile1) {
            micro_rows<2>(a, panel, seg, i0, t, scale + (t - tile0), scale_zero + (t - tile0));
          } else {
            micro_rows<1>(a, panel, seg, i0, t, scale + (t - tile0), scale_zero + (t - tile0));
          }
        }
      }
    }
  }
}

}  // namespace

void wna16_gemm_i16dot_avx2(const Wna16Args& a, Range tiles) {
  const Wna16Layout& w = *a.w;
  if (tiles.begin >= tiles.end) return;
  for (int64_t i = 0; i < a.m; ++i) {
    float* y = a.y + i * w.rows;
    const int64_t r0 = tiles.begin * kRows, r1 = min64(tiles.end * kRows, w.rows);
    for (int64_t r = r0; r < r1; ++r) y[r] = a.bias ? a.bias[r] : 0.0f;
  }
  alignas(32) int32_t panels[kPairsPerRun * kMaxPanelPairs * 2 * kRows];  // 32 KiB
  for (int64_t tile = tiles.begin; tile < tiles.end; tile += 2 * kPairsPerRun) {
    run_of_tiles(a, tile, min64(tile + 2 * kPairsPerRun, tiles.end), panels);
  }
}

}  // namespace lowbit::kernels::cpu::detail
