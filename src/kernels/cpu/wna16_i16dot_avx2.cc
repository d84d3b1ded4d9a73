// Weight-only integer matmul, decode path, AVX2 (CPUs without AVX-512): x quantized per call to
// int16 and multiplied by the exact integer codes with vpmaddwd, 16 products per instruction
// against the 8 of an fp32 FMA, and no per-weight conversion to float.
//
//   y[r] = Σ_seg s[r][g] · (sx_seg · Σ_{c∈seg} q_c · xq_c  -  z[r][g] · sx_seg · Σ_{c∈seg} xq_c)
//
// A segment is up to kWna16I16SegmentBlocks column blocks (128 columns) inside one group; x has
// one scale per (row of x, segment), sx = max|x| / 32767 over the segment, xq = round(x / sx)
// (wna16_dispatch.cc). The integer sums are exact: |q · xq| <= 255 · 32767 and a segment adds at
// most 4 · 32 of them per row (1.07e9 < 2^31). The only rounding beyond fp32 arithmetic is x's:
// |x - sx · xq| <= ~sx / 2 <= max|x| · 2^-16, finer than a bf16 rounding of the segment's largest
// element (2^-9 relative); the contract in wna16_matmul.h.
//
// Per 32 weights of a row: one vpmovzxbw of the 16 code bytes (low nibbles are columns 0-15, high
// nibbles 16-31: the layout of wna16_kernels.h), an and and a shift, two vpmaddwd against the two
// int16 halves of x (loaded once per block for all rows), two adds: 7 vector operations where the
// exact kernel (wna16_avx2.cc) spends ~24. The codes stay unsigned (zero point folded at the end,
// once per segment and 4 rows), so no subtraction per weight either.
#include <immintrin.h>

#include "kernels/cpu/wna16_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kRows = kWna16TileRows;
constexpr int kMaxGroup = 2;  // rows of x per pass: G · 4 · Q int32 accumulators in registers

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Lanes 0..3: the sums of the 8 lanes of a[0..3] (exact int32 adds).
__m128i row_sums(const __m256i* a) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

__m128 load_scales(const Wna16Layout& w, int64_t at) {
  return w.scales_f16 ? _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales_f16 + at)))
                      : _mm_loadu_ps(w.scales + at);
}

__m128 load_zeros(const Wna16Layout& w, int64_t at) {
  if (w.zeros == nullptr) return _mm_set1_ps(w.default_zero);
  int32_t four;
  __builtin_memcpy(&four, w.zeros + at, 4);
  return _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(four)));
}

// out[i · 4Q + r] = dot(x row i0 + i, weight row 8·tile + r0 + r), r < 4Q, for G rows of x.
// (G, Q) = (1, 2): a whole tile per pass; (2, 1): half a tile, two rows of x. Nibbles: codes of
// 2..4 bits (16 bytes per row and block), else one byte per code.
template <int G, int Q, bool Nibbles>
void tile_rows(const Wna16Args& a, int64_t tile, int r0, int64_t i0, const uint8_t* next,
               float* out) {
  constexpr int R = 4 * Q;
  const Wna16Layout& w = *a.w;
  const int64_t kp = w.padded_cols;
  const int64_t bb = w.block_bytes;
  const __m256i low_nibble = _mm256_set1_epi16(0xF);
  __m128 acc[G][Q], correction[G][Q];
  for (int i = 0; i < G; ++i) {
    for (int q = 0; q < Q; ++q) acc[i][q] = correction[i][q] = _mm_setzero_ps();
  }
  int64_t seg = 0;
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t at = (tile * w.groups + g) * kRows + r0;
    __m128 scale[Q], scale_zero[Q];
    for (int q = 0; q < Q; ++q) {
      scale[q] = load_scales(w, at + 4 * q);
      scale_zero[q] = _mm_mul_ps(scale[q], load_zeros(w, at + 4 * q));
    }
    const int64_t g_end = w.group_blocks[g + 1];
    for (int64_t cb0 = w.group_blocks[g]; cb0 < g_end; cb0 += kWna16I16SegmentBlocks, ++seg) {
      const int64_t cb1 = min64(cb0 + kWna16I16SegmentBlocks, g_end);
      __m256i sums[G][R];
      for (int i = 0; i < G; ++i) {
        for (int r = 0; r < R; ++r) sums[i][r] = _mm256_setzero_si256();
      }
      for (int64_t cb = cb0; cb < cb1; ++cb) {
        const int64_t block_at = (tile * w.col_blocks + cb) * kRows;
        const uint8_t* codes = w.codes + (block_at + r0) * bb;
        if (next != nullptr) {  // the next tile's block, into L2 (see wna16_gemv_i16dot_avx2)
          const char* line = reinterpret_cast<const char*>(next + (cb * kRows + r0) * bb);
          for (int64_t off = 0; off < R * bb; off += 64) _mm_prefetch(line + off, _MM_HINT_T1);
        }
        __m256i x_lo[G], x_hi[G];
        for (int i = 0; i < G; ++i) {
          const auto* x = reinterpret_cast<const __m256i*>(a.xq + (i0 + i) * kp + cb * kWna16BlockCols);
          x_lo[i] = _mm256_loadu_si256(x);
          x_hi[i] = _mm256_loadu_si256(x + 1);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = codes + r * bb;
          __m256i lo, hi;
          if constexpr (Nibbles) {  // byte b: column b (low nibble) and b + 16 (high nibble)
            const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
            lo = _mm256_and_si256(v, low_nibble);
            hi = _mm256_srli_epi16(v, 4);
          } else {  // byte b: column b
            lo = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
            hi = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
          }
#pragma GCC unroll 2
          for (int i = 0; i < G; ++i) {
            sums[i][r] = _mm256_add_epi32(sums[i][r], _mm256_madd_epi16(lo, x_lo[i]));
            sums[i][r] = _mm256_add_epi32(sums[i][r], _mm256_madd_epi16(hi, x_hi[i]));
            // Keeps GCC from hoisting the next rows' loads above this row's arithmetic, which
            // made it spill half the accumulators to the stack (seen in objdump).
            __asm__("" : "+x"(sums[i][r]));
          }
        }
      }
      for (int i = 0; i < G; ++i) {
        const int64_t s = (i0 + i) * a.segments + seg;
        const __m128 sx = _mm_set1_ps(a.xq_scale[s]);
        const __m128 sx_sum = _mm_set1_ps(a.xq_sum[s]);
        for (int q = 0; q < Q; ++q) {
          const __m128 dots = _mm_cvtepi32_ps(row_sums(&sums[i][4 * q]));
          acc[i][q] = _mm_fmadd_ps(dots, _mm_mul_ps(scale[q], sx), acc[i][q]);
          correction[i][q] = _mm_fmadd_ps(scale_zero[q], sx_sum, correction[i][q]);
        }
      }
    }
  }
  for (int i = 0; i < G; ++i) {
    for (int q = 0; q < Q; ++q) _mm_storeu_ps(out + i * R + 4 * q, _mm_sub_ps(acc[i][q], correction[i][q]));
  }
}

float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// One row of x against a whole tile when every group is a single column block (group size <= 32:
// GGUF's Q4_0 / Q8_0). Reducing 8 rows' int32 lanes per block (tile_rows) would cost as much as
// the block's products; here each row's 8 lanes go to fp32 and into its own fp32 accumulator with
// the row's scale product (cvt + fma per row and block), summed across lanes once per tile.
template <bool Nibbles>
void tile_single_blocks(const Wna16Args& a, int64_t tile, const uint8_t* next, float* out) {
  const Wna16Layout& w = *a.w;
  const int64_t bb = w.block_bytes;
  const __m256i low_nibble = _mm256_set1_epi16(0xF);
  __m256 acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
  __m256 correction = _mm256_setzero_ps();
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t cb = w.group_blocks[g];  // the group's one block, segment g
    const int64_t at = (tile * w.groups + g) * kRows;
    const __m256 scale = w.scales_f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales_f16 + at)))
                                      : _mm256_loadu_ps(w.scales + at);
    const __m256 zero = w.zeros ? _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.zeros + at))))
                                : _mm256_set1_ps(w.default_zero);
    correction = _mm256_fmadd_ps(_mm256_mul_ps(scale, zero), _mm256_set1_ps(a.xq_sum[g]), correction);
    alignas(32) float row_scale[kRows];  // scale · sx per row, broadcast from memory below
    _mm256_store_ps(row_scale, _mm256_mul_ps(scale, _mm256_set1_ps(a.xq_scale[g])));
    const uint8_t* codes = w.codes + (tile * w.col_blocks + cb) * kRows * bb;
    if (next != nullptr) {
      const char* line = reinterpret_cast<const char*>(next + cb * kRows * bb);
      for (int64_t off = 0; off < kRows * bb; off += 64) _mm_prefetch(line + off, _MM_HINT_T1);
    }
    const auto* x = reinterpret_cast<const __m256i*>(a.xq + cb * kWna16BlockCols);
    const __m256i x_lo = _mm256_loadu_si256(x), x_hi = _mm256_loadu_si256(x + 1);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* p = codes + r * bb;
      __m256i lo, hi;
      if constexpr (Nibbles) {
        const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        lo = _mm256_and_si256(v, low_nibble);
        hi = _mm256_srli_epi16(v, 4);
      } else {
        lo = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        hi = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
      }
      const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(lo, x_lo), _mm256_madd_epi16(hi, x_hi));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(row_scale + r), acc[r]);
      __asm__("" : "+x"(acc[r]));  // as in tile_rows: no hoisting of the next rows' loads
    }
  }
  alignas(32) float corr[kRows];
  _mm256_store_ps(corr, correction);
  for (int r = 0; r < kRows; ++r) out[r] = sum8(acc[r]) - corr[r];
}

template <int G, int Q>
void rows_for_group(const Wna16Args& a, int64_t tile, int r0, int64_t i0, const uint8_t* next) {
  const Wna16Layout& w = *a.w;
  constexpr int R = 4 * Q;
  const int64_t row0 = tile * kRows + r0;
  if (row0 >= w.rows) return;
  float out[G * R];
  if (w.nibbles) {
    tile_rows<G, Q, true>(a, tile, r0, i0, next, out);
  } else {
    tile_rows<G, Q, false>(a, tile, r0, i0, next, out);
  }
  const int rows = static_cast<int>(min64(R, w.rows - row0));
  for (int i = 0; i < G; ++i) {
    float* y = a.y + (i0 + i) * w.rows + row0;
    for (int r = 0; r < rows; ++r) y[r] = out[i * R + r] + (a.bias ? a.bias[row0 + r] : 0.0f);
  }
}

}  // namespace

// As in wna16_gemv_bf16dot_avx512: while a tile is computed, its blocks prefetch the next tile's
// into L2 (the hardware prefetchers stop at every 4 KiB page). Only the first pass over a tile
// prefetches; later passes (m > 1) read it from cache.
void wna16_gemv_i16dot_avx2(const Wna16Args& a, Range tiles) {
  const Wna16Layout& w = *a.w;
  for (int64_t tile = tiles.begin; tile < tiles.end; ++tile) {
    const uint8_t* next = tile + 1 < tiles.end ? w.codes + (tile + 1) * w.tile_bytes() : nullptr;
    if (a.m == 1 && w.groups == w.col_blocks) {  // every group one block
      const int64_t row0 = tile * kRows;
      float out[kRows];
      if (w.nibbles) {
        tile_single_blocks<true>(a, tile, next, out);
      } else {
        tile_single_blocks<false>(a, tile, next, out);
      }
      const int rows = static_cast<int>(min64(kRows, w.rows - row0));
      for (int r = 0; r < rows; ++r) a.y[row0 + r] = out[r] + (a.bias ? a.bias[row0 + r] : 0.0f);
      continue;
    }
    if (a.m == 1) {
      rows_for_group<1, 2>(a, tile, 0, 0, next);
      continue;
    }
    for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGroup) {
      for (int r0 = 0; r0 < kRows; r0 += 4) {
        const uint8_t* prefetch = i0 == 0 ? next : nullptr;
        if (a.m - i0 >= 2) {
          rows_for_group<2, 1>(a, tile, r0, i0, prefetch);
        } else {
          rows_for_group<1, 1>(a, tile, r0, i0, prefetch);
        }
      }
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
