// FP8 (E4M3) weight-only matmul with AVX-512 on 16-row tiles (fp8_kernels.h).
//
// Streaming path (decode, few rows of x): per column, 16 codes of a tile are decoded to fp32 in
// registers (sign-extend, shift, and, vcvtph2ps: exact) and FMA'd into one accumulator per row of
// x; each scale block's sum is then multiplied by the rows' scales. NV tiles are streamed side by
// side so that each decoded weight serves every row of x and several loads are in flight.
//
// Blocked path (prefill): the dense matmul's blocked kernel (blocked_kernel_avx512: threads, cache
// blocking, x packing, fp32 outer-product micro-kernel) with its weight panels filled by decoding
// the tiles, which are already k-major, so no transpose is needed.
//
// GCC 12's AVX-512 headers trip -Wuninitialized (see matmul_gemm_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/fp8_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

// 16 codes → fp32 e4m3 / 256 (fp8_kernels.h), exact.
__m512 decode16(const uint8_t* p) {
  const __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i f16 =
      _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(static_cast<short>(0xBFFF)));
  return _mm512_cvtph_ps(f16);
}

// Lanes [0, left) of 16.
__mmask16 row_mask(int64_t left) {
  if (left <= 0) return 0;
  return left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
}

// ---- streaming ---------------------------------------------------------------------------------

// y rows i0..i0+MR-1 × output rows of tiles t0..t0+NV-1. The scale multiplies each scale block's
// partial sum, not each weight: decoding is then 5 operations per 16 weights instead of 6, which
// lifts the one-thread decode rate from ~16 to ~19 G weights/s on Zen 4 (bench/NOTES.md), above
// what DRAM delivers to two cores. kOneBlock: one scale per row (per tensor or channel).
template <int MR, int NV, bool kOneBlock>
void stream_kernel(const Fp8Tiles& w, const float* x, int64_t i0, int64_t t0, const float* bias,
                   float* y) {
  const int64_t k = w.cols;
  const float* xr = x + i0 * k;
  const uint8_t* wt = w.codes + t0 * k * kFp8TileRows;
  const int64_t tile_bytes = k * kFp8TileRows;
  __m512 acc[MR][NV];
  for (int64_t seg = 0; seg < w.col_blocks; ++seg) {
    const int64_t c0 = seg * w.block_cols, c1 = std::min(k, c0 + w.block_cols);
    __m512 part[MR][NV];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) part[i][v] = _mm512_setzero_ps();
    }
    for (int64_t c = c0; c < c1; ++c) {
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const __m512 wv = decode16(wt + v * tile_bytes + c * kFp8TileRows);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) {
          part[i][v] = _mm512_fmadd_ps(_mm512_set1_ps(xr[i * k + c]), wv, part[i][v]);
        }
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __m512 s = _mm512_loadu_ps(w.scales + ((t0 + v) * w.col_blocks + seg) * kFp8TileRows);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        acc[i][v] = kOneBlock || seg == 0 ? _mm512_mul_ps(part[i][v], s)
                                          : _mm512_fmadd_ps(part[i][v], s, acc[i][v]);
      }
    }
    if constexpr (kOneBlock) break;
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const int64_t r = (t0 + v) * kFp8TileRows;
    const __mmask16 mask = row_mask(w.rows - r);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + r) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      _mm512_mask_storeu_ps(y + (i0 + i) * w.rows + r, mask, _mm512_add_ps(acc[i][v], b));
    }
  }
}

template <int MR, bool kOneBlock>
void stream_rows(const Fp8Tiles& w, const float* x, int64_t i0, int64_t t_begin, int64_t t_end,
                 const float* bias, float* y) {
  // Accumulators (two sets with several scale blocks) within the 32 registers.
  constexpr int NV = MR == 1 ? 8 : (kOneBlock || MR == 2 ? 4 : 2);
  int64_t t = t_begin;
  for (; t + NV <= t_end; t += NV) stream_kernel<MR, NV, kOneBlock>(w, x, i0, t, bias, y);
  for (; t < t_end; ++t) stream_kernel<MR, 1, kOneBlock>(w, x, i0, t, bias, y);
}

template <bool kOneBlock>
void stream_tiles(const Fp8Tiles& w, const float* x, int64_t m, Range tiles, const float* bias,
                  float* y) {
  // Blocks of tiles small enough to stay in L2 while every group of ≤ 4 rows of x passes over.
  const int64_t per_block = std::max<int64_t>(8, (256 * 1024) / (w.cols * kFp8TileRows) / 8 * 8);
  for (int64_t tb = tiles.begin; tb < tiles.end; tb += per_block) {
    const int64_t te = std::min(tiles.end, tb + per_block);
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      switch (std::min<int64_t>(4, m - i0)) {
        case 1:
          stream_rows<1, kOneBlock>(w, x, i0, tb, te, bias, y);
          break;
        case 2:
          stream_rows<2, kOneBlock>(w, x, i0, tb, te, bias, y);
          break;
        case 3:
          stream_rows<3, kOneBlock>(w, x, i0, tb, te, bias, y);
          break;
        default:
          stream_rows<4, kOneBlock>(w, x, i0, tb, te, bias, y);
          break;
      }
    }
  }
}

// ---- blocked -----------------------------------------------------------------------------------

// pack_weight_panels' layout (matmul_kernels.h) from the tiles, nr (a multiple of 16) rows per
// panel: dst[(panel · kc + p) · nr + r], each 16 rows one decoded column of a tile.
void pack_panels(const MatmulArgs& a, int64_t row0, int64_t rows, int64_t k0, int64_t kc, int nr,
                 float* dst) {
  const Fp8Tiles& w = *static_cast<const Fp8Tiles*>(a.w);
  for (int64_t panel = 0; panel < rows; panel += nr) {
    for (int part = 0; part < nr / kFp8TileRows; ++part) {
      const int64_t t = (row0 + panel) / kFp8TileRows + part;
      float* out = dst + kFp8TileRows * part;
      if (panel + kFp8TileRows * part >= rows || t >= w.tiles) {
        for (int64_t p = 0; p < kc; ++p) _mm512_store_ps(out + p * nr, _mm512_setzero_ps());
        continue;
      }
      const uint8_t* src = w.codes + (t * w.cols + k0) * kFp8TileRows;
      int64_t seg = k0 / w.block_cols, next = (seg + 1) * w.block_cols;
      __m512 s = _mm512_loadu_ps(w.scales + (t * w.col_blocks + seg) * kFp8TileRows);
      for (int64_t p = 0; p < kc; ++p) {
        if (k0 + p == next) {
          ++seg;
          next += w.block_cols;
          s = _mm512_loadu_ps(w.scales + (t * w.col_blocks + seg) * kFp8TileRows);
        }
        _mm512_store_ps(out + p * nr, _mm512_mul_ps(decode16(src + p * kFp8TileRows), s));
      }
    }
    dst += kc * nr;
  }
}

}  // namespace

void fp8_stream_avx512(const Fp8Tiles& w, const float* x, int64_t m, Range tiles, const float* bias,
                       float* y) {
  w.col_blocks == 1 ? stream_tiles<true>(w, x, m, tiles, bias, y)
                    : stream_tiles<false>(w, x, m, tiles, bias, y);
}

void fp8_blocked_avx512(const Fp8Tiles& w, const float* x, int64_t m, const float* bias, float* y) {
  MatmulArgs args;
  args.x = x;
  args.m = m;
  args.k = w.cols;
  args.n = w.rows;
  args.w = &w;
  args.w_dtype = DType::F8_E4M3;
  args.bias = bias;
  args.y = y;
  BlockedKernel kernel = blocked_kernel_avx512();
  kernel.pack = pack_panels;
  run_blocked(args, kernel);
}

}  // namespace lowbit::kernels::cpu::detail
