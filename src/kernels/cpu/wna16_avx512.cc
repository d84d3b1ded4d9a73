// Weight-only integer matmul with AVX-512, weights decoded to fp32 exactly as ref (the products
// and sums are fp32; only the summation order differs from ref::matmul_wna16).
//
// Streaming (decode) path: one pass over a tile of 8 weight rows is one sequential stream of
// codes (wna16_kernels.h); every step decodes a block of 32 codes per row and multiply-adds it
// against up to 4 rows of x (8·G accumulators). Decoding 2..4-bit codes: one zero-extension of 16
// bytes to 32-bit lanes puts the 16 low nibbles in the low bits of the lanes, one shift the 16
// high nibbles; vpermps then looks each up in a per-(row, group) table of 16 floats,
// (q - zero) · scale, computed once per group with the same two fp32 operations as ref. That is 4
// shuffle-unit instructions and 2 FMAs per 32 weights of a row. 5..8-bit codes (one byte each)
// are converted (vcvtdq2ps) and dequantized with the same sub and mul as ref.
//
// Blocked (prefill) path: wna16_pack_panels_avx512 decodes 16 rows × 32 columns at a time the
// same way and transposes them in registers into the k-major panels of the dense AVX-512 blocked
// kernel (matmul_gemm_avx512.cc), whose micro-kernel then does the FMAs.
//
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (_mm512_undefined_ps),
// which -Wuninitialized reports at every inlined use of e.g. _mm512_cvtph_ps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/wna16_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kRows = kWna16TileRows;
constexpr int kMaxGroup = 4;  // rows of x per pass over a tile

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

const uint8_t* block_codes(const Wna16Layout& w, int64_t tile, int64_t cb) {
  return w.codes + (tile * w.col_blocks + cb) * kRows * w.block_bytes;
}

// Scale i of the packed layout, stored as fp32 or fp16 (wna16_kernels.h).
float scale_at(const Wna16Layout& w, int64_t i) {
  return w.scales_f16 ? _cvtsh_ss(w.scales_f16[i]) : w.scales[i];
}

// Per-row dequantization constants of (tile, group): zero and scale of each of the 8 rows.
struct GroupParams {
  float zero[kRows];
  float scale[kRows];
  GroupParams(const Wna16Layout& w, int64_t tile, int64_t g) {
    const int64_t at = (tile * w.groups + g) * kRows;
    const uint8_t* z = w.zeros ? w.zeros + at : nullptr;
    for (int r = 0; r < kRows; ++r) {
      zero[r] = z ? static_cast<float>(z[r]) : w.default_zero;
      scale[r] = scale_at(w, at + r);
    }
  }
};

// table[q] = (q - zero) · scale, the dequantized value of code q, as ref computes it.
__m512 nibble_table(float zero, float scale) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(zero)), _mm512_set1_ps(scale));
}

// 32 codes of one row (16 bytes, see wna16_kernels.h) → columns 0-15 and 16-31 dequantized.
void decode_nibbles(const uint8_t* p, __m512 table, __m512& lo, __m512& hi) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  lo = _mm512_permutexvar_ps(v, table);
  hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
}

// 16 one-byte codes → (q - zero) · scale.
__m512 decode_bytes(const uint8_t* p, __m512 zero, __m512 scale) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(v), zero), scale);
}

// ---- streaming path ----------------------------------------------------------------------------

template <int G>
struct TileAccumulators {
  __m512 v[G][kRows];
  TileAccumulators() {
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) v[i][r] = _mm512_setzero_ps();
    }
  }
  // acc[i][r] += lo · x_i[c..c+16) + hi · x_i[c+16..c+32) for the G rows of x.
  void add(int r, __m512 lo, __m512 hi, const float* x, int64_t kp, int64_t c) {
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
      v[i][r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + i * kp + c), v[i][r]);
      v[i][r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + i * kp + c + 16), v[i][r]);
    }
  }
  void store(float* out) const {
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) out[i * kRows + r] = _mm512_reduce_add_ps(v[i][r]);
    }
  }
};

// Prefetching besides the hardware's. Own stream: kPrefetchAhead bytes ahead into L1 (the
// hardware prefetcher stops at 4 KiB pages; +10% weight GB/s for k = 8192, bench/NOTES.md). Next
// tile: with m > 4 a tile is passed over several times, the first pass streaming from DRAM and
// the later ones computing from cache; so that DRAM never idles, pass `part` of `parts` also
// fetches every parts-th block of the next tile into L2 (as matmul_gemv_avx512.cc does).
constexpr int kPrefetchAhead = 512;

struct NextTile {
  const uint8_t* codes = nullptr;  // null: no next tile
  int64_t part = 0;
  int64_t parts = 1;
};

template <int kBlockBytes>
void prefetch_for_block(const uint8_t* block, int64_t cb, NextTile next) {
  if (next.part == 0) {
    for (int b = 0; b < kRows * kBlockBytes; b += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(block) + kPrefetchAhead + b, _MM_HINT_T0);
    }
  }
  if (next.codes != nullptr && cb % next.parts == next.part) {
    const auto* line = reinterpret_cast<const char*>(next.codes + cb * kRows * kBlockBytes);
    for (int b = 0; b < kRows * kBlockBytes; b += 64) _mm_prefetch(line + b, _MM_HINT_T1);
  }
}

// out[i · 8 + r] = dot(x row i, weight row 8·tile + r) for G rows of x (row stride kp).
template <int G, bool kNibbles>
void tile_dot(const Wna16Layout& w, int64_t tile, const float* x, NextTile next, float* out) {
  constexpr int kBlockBytes = kNibbles ? 16 : 32;
  const int64_t kp = w.padded_cols;
  const uint8_t* codes = w.codes + tile * w.col_blocks * kRows * kBlockBytes;
  TileAccumulators<G> acc;
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t cb0 = w.group_blocks[g], cb1 = w.group_blocks[g + 1];
    if (cb0 == cb1) continue;
    const GroupParams params(w, tile, g);
    __m512 table[kRows];  // nibbles: (q - zero) · scale per row
    if constexpr (kNibbles) {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) table[r] = nibble_table(params.zero[r], params.scale[r]);
    }
    for (int64_t cb = cb0; cb < cb1; ++cb) {
      const uint8_t* block = codes + cb * kRows * kBlockBytes;
      prefetch_for_block<kBlockBytes>(block, cb, next);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        __m512 lo, hi;
        if constexpr (kNibbles) {
          decode_nibbles(block + r * 16, table[r], lo, hi);
        } else {
          const __m512 zero = _mm512_set1_ps(params.zero[r]), scale = _mm512_set1_ps(params.scale[r]);
          lo = decode_bytes(block + r * 32, zero, scale);
          hi = decode_bytes(block + r * 32 + 16, zero, scale);
        }
        acc.add(r, lo, hi, x, kp, cb * kWna16BlockCols);
      }
    }
  }
  acc.store(out);
}

template <int G>
void tile_for_group(const Wna16Args& a, int64_t tile, int64_t i0, NextTile next) {
  const Wna16Layout& w = *a.w;
  float out[G * kRows];
  const float* x = a.x + i0 * w.padded_cols;
  if (w.nibbles) {
    tile_dot<G, true>(w, tile, x, next, out);
  } else {
    tile_dot<G, false>(w, tile, x, next, out);
  }
  const int64_t row0 = tile * kRows;
  const int rows = static_cast<int>(min64(kRows, w.rows - row0));
  for (int i = 0; i < G; ++i) {
    float* y = a.y + (i0 + i) * w.rows + row0;
    for (int r = 0; r < rows; ++r) y[r] = out[i * kRows + r] + (a.bias ? a.bias[row0 + r] : 0.0f);
  }
}

// ---- blocked path: decode + transpose into fp32 panels ------------------------------------------

// In-place transpose of a 16×16 fp32 block held as 16 row vectors (as in matmul_gemm_avx512.cc).
void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    for (int h = 0; h < 2; ++h) {
      __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + h + 2]);
      r[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  for (int c = 0; c < 4; ++c) {
    __m512 s0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44);
    __m512 s1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
    __m512 s2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
    __m512 s3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_shuffle_f32x4(s0, s2, 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Columns 32·cb .. 32·cb + 31 of weight row `row`, dequantized.
void decode_block(const Wna16Layout& w, int64_t row, int64_t cb, __m512& lo, __m512& hi) {
  const int64_t tile = row / kRows;
  const int r = static_cast<int>(row % kRows);
  const int64_t at = (tile * w.groups + w.block_group[cb]) * kRows + r;
  const float zero = w.zeros ? static_cast<float>(w.zeros[at]) : w.default_zero;
  const float scale = scale_at(w, at);
  const uint8_t* codes = block_codes(w, tile, cb) + r * w.block_bytes;
  if (w.nibbles) {
    decode_nibbles(codes, nibble_table(zero, scale), lo, hi);
  } else {
    lo = decode_bytes(codes, _mm512_set1_ps(zero), _mm512_set1_ps(scale));
    hi = decode_bytes(codes + 16, _mm512_set1_ps(zero), _mm512_set1_ps(scale));
  }
}

}  // namespace

void wna16_gemv_avx512(const Wna16Args& a, Range tiles) {
  const Wna16Layout& w = *a.w;
  const int64_t passes = (a.m + kMaxGroup - 1) / kMaxGroup;
  for (int64_t tile = tiles.begin; tile < tiles.end; ++tile) {
    for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGroup) {
      NextTile next;
      next.part = i0 / kMaxGroup;
      next.parts = passes;
      if (passes > 1 && tile + 1 < tiles.end) {
        next.codes = w.codes + (tile + 1) * w.col_blocks * kRows * w.block_bytes;
      }
      switch (min64(kMaxGroup, a.m - i0)) {
        case 1: tile_for_group<1>(a, tile, i0, next); break;
        case 2: tile_for_group<2>(a, tile, i0, next); break;
        case 3: tile_for_group<3>(a, tile, i0, next); break;
        default: tile_for_group<4>(a, tile, i0, next); break;
      }
    }
  }
}

namespace {

// The blocked path's weight panels of nr rows: 16 rows × 32 columns decoded at a time and
// transposed in registers. fp32 (kPairs false): unit p of a panel row holds column k0 + p. bf16
// pairs (kPairs true, the bf16-dot micro-kernel's layout): the decoded values rounded to bf16
// (nearest even), unit p / 2 holding columns k0 + p and k0 + p + 1.
template <bool kPairs>
void pack_panels(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0, int64_t kc,
                 int nr, float* dst) {
  const auto& w = *static_cast<const Wna16Layout*>(args.w);
  for (int64_t panel_row = 0; panel_row < rows; panel_row += nr) {
    for (int half = 0; half < nr / 16; ++half) {
      const int64_t first = panel_row + 16 * half;
      const int64_t valid = min64(16, rows - first);
      for (int64_t cb = k0 / kWna16BlockCols; cb < (k0 + kc) / kWna16BlockCols; ++cb) {
        __m512 lo[16], hi[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          if (i < valid) {
            decode_block(w, row0 + first + i, cb, lo[i], hi[i]);
            // Row i's 32 columns as 16 bf16 pairs (2u, 2u + 1).
            if constexpr (kPairs) lo[i] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi[i], lo[i]));
          } else {
            lo[i] = hi[i] = _mm512_setzero_ps();
          }
        }
        transpose16(lo);
        if constexpr (kPairs) {
          float* out = dst + (cb * kWna16BlockCols - k0) / 2 * nr + 16 * half;
          for (int u = 0; u < 16; ++u) _mm512_store_ps(out + u * nr, lo[u]);
        } else {
          transpose16(hi);
          float* out = dst + (cb * kWna16BlockCols - k0) * nr + 16 * half;
          for (int j = 0; j < 16; ++j) {
            _mm512_store_ps(out + j * nr, lo[j]);
            _mm512_store_ps(out + (16 + j) * nr, hi[j]);
          }
        }
      }
    }
    dst += kc * nr;  // the driver's panel stride (pairs use only its first half)
  }
}

}  // namespace

void wna16_pack_panels_avx512(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                              int64_t kc, int nr, float* dst) {
  pack_panels<false>(args, row0, rows, k0, kc, nr, dst);
}

void wna16_pack_pairs_avx512(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                             int64_t kc, int nr, float* dst) {
  pack_panels<true>(args, row0, rows, k0, kc, nr, dst);
}

}  // namespace lowbit::kernels::cpu::detail
