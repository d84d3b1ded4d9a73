// FP8 (E4M3) weight-only matmul with AVX2 + F16C on 16-row tiles (fp8_kernels.h): the two paths of
// the AVX-512 kernel with 8-lane halves; the blocked one around the dense matmul's AVX2 kernel.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/fp8_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

// 16 codes → two fp32 vectors (rows 0-7, 8-15) of e4m3 / 256, exact (fp8_kernels.h).
void decode16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i f16 =
      _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16(static_cast<short>(0xBFFF)));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(f16));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(f16, 1));
}

// y rows i0..i0+MR-1 × the 16 output rows of tile t.
template <int MR>
void tile_kernel(const Fp8Tiles& w, const float* x, int64_t i0, int64_t t, const float* bias,
                 float* y) {
  const int64_t k = w.cols;
  const float* xr = x + i0 * k;
  const uint8_t* wt = w.codes + t * k * kFp8TileRows;
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t seg = 0; seg < w.col_blocks; ++seg) {
    const int64_t c0 = seg * w.block_cols, c1 = std::min(k, c0 + w.block_cols);
    const float* scale = w.scales + (t * w.col_blocks + seg) * kFp8TileRows;
    const __m256 s0 = _mm256_loadu_ps(scale), s1 = _mm256_loadu_ps(scale + 8);
    for (int64_t c = c0; c < c1; ++c) {
      __m256 lo, hi;
      decode16(wt + c * kFp8TileRows, lo, hi);
      lo = _mm256_mul_ps(lo, s0);
      hi = _mm256_mul_ps(hi, s1);
      for (int i = 0; i < MR; ++i) {
        const __m256 xv = _mm256_broadcast_ss(xr + i * k + c);
        acc[i][0] = _mm256_fmadd_ps(xv, lo, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(xv, hi, acc[i][1]);
      }
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t r = t * kFp8TileRows + 8 * h;
    const int64_t left = std::min<int64_t>(8, w.rows - r);
    if (left <= 0) break;
    alignas(32) int32_t lanes[8];
    for (int j = 0; j < 8; ++j) lanes[j] = j < left ? -1 : 0;
    const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    const __m256 b = bias ? _mm256_maskload_ps(bias + r, mask) : _mm256_setzero_ps();
    for (int i = 0; i < MR; ++i) {
      _mm256_maskstore_ps(y + (i0 + i) * w.rows + r, mask, _mm256_add_ps(acc[i][h], b));
    }
  }
}

// pack_weight_panels' layout from the tiles, nr (a multiple of 16) rows per panel.
void pack_panels(const MatmulArgs& a, int64_t row0, int64_t rows, int64_t k0, int64_t kc, int nr,
                 float* dst) {
  const Fp8Tiles& w = *static_cast<const Fp8Tiles*>(a.w);
  for (int64_t panel = 0; panel < rows; panel += nr) {
    for (int part = 0; part < nr / kFp8TileRows; ++part) {
      const int64_t t = (row0 + panel) / kFp8TileRows + part;
      float* out = dst + kFp8TileRows * part;
      if (panel + kFp8TileRows * part >= rows || t >= w.tiles) {
        for (int64_t p = 0; p < kc; ++p) {
          _mm256_store_ps(out + p * nr, _mm256_setzero_ps());
          _mm256_store_ps(out + p * nr + 8, _mm256_setzero_ps());
        }
        continue;
      }
      const uint8_t* src = w.codes + (t * w.cols + k0) * kFp8TileRows;
      int64_t seg = k0 / w.block_cols, next = (seg + 1) * w.block_cols;
      const float* scale = w.scales + (t * w.col_blocks + seg) * kFp8TileRows;
      for (int64_t p = 0; p < kc; ++p) {
        if (k0 + p == next) {
          ++seg;
          next += w.block_cols;
          scale = w.scales + (t * w.col_blocks + seg) * kFp8TileRows;
        }
        __m256 lo, hi;
        decode16(src + p * kFp8TileRows, lo, hi);
        _mm256_store_ps(out + p * nr, _mm256_mul_ps(lo, _mm256_loadu_ps(scale)));
        _mm256_store_ps(out + p * nr + 8, _mm256_mul_ps(hi, _mm256_loadu_ps(scale + 8)));
      }
    }
    dst += kc * nr;
  }
}

}  // namespace

void fp8_stream_avx2(const Fp8Tiles& w, const float* x, int64_t m, Range tiles, const float* bias,
                     float* y) {
  for (int64_t t = tiles.begin; t < tiles.end; ++t) {
    int64_t i0 = 0;
    for (; i0 + 4 <= m; i0 += 4) tile_kernel<4>(w, x, i0, t, bias, y);
    for (; i0 < m; ++i0) tile_kernel<1>(w, x, i0, t, bias, y);
  }
}

void fp8_blocked_avx2(const Fp8Tiles& w, const float* x, int64_t m, const float* bias, float* y) {
  MatmulArgs args;
  args.x = x;
  args.m = m;
  args.k = w.cols;
  args.n = w.rows;
  args.w = &w;
  args.w_dtype = DType::F8_E4M3;
  args.bias = bias;
  args.y = y;
  BlockedKernel kernel = blocked_kernel_avx2();
  kernel.pack = pack_panels;
  run_blocked(args, kernel);
}

}  // namespace lowbit::kernels::cpu::detail
