// The group-16 layout's kernels (wna16_g16.h) for AVX2 + FMA CPUs (no AVX-512: Zen 3 and older),
// for any m. Two arithmetics over one decode:
//
// - wna16_g16_rows_i16dot_avx2 (the AVX2_I16DOT kernel; wna16_i16dot_avx2.cc's contract): x
//   quantized per call to int16 per row of x and per run of kG16SegmentUnits units (128 columns),
//   sx = max|x| / 32767 over the run, xq = round(x / sx) (i16_x in wna16_dispatch.cc, the same
//   code as the general layout's), and multiplied by the exact codes with vpmaddwd:
//     y = 2^-8 · Σ_run sx · Σ_g s_g · Σ_{c∈g} ((q_c - z0) · 2^8) · xq_c.
//   The codes sit in the high byte of their 16-bit lanes, (q - z0) · 2^8 in [-8192, 7936]: one
//   byte unpack per 16 codes and no sign extension. The integer sums are exact: an int32 lane adds
//   4 products of at most 32 · 2^8 · 32767 (1.07e9 < 2^31) and never crosses a group. So the only
//   rounding beyond fp32 arithmetic is x's, |x - sx · xq| <= ~sx / 2 <= 2^-16 · max|x| of the run
//   per element: |Δy| <= 2^-16 · Σ|w| · max|x| (finer than a bf16 rounding of the run's largest
//   element). The fp32 part: the int32 group sums converted (one rounding each), times the group's
//   scale into per-run sums, times sx, summed across lanes; 2^-8 is exact.
// - wna16_g16_rows_avx2 (the AVX2 kernel, and matmul_wna16_exact for both): fp32 x, each weight
//   decoded to the fp32 value ref forms, float(q - z0) · s (q - z0 exact), then FMA: equals
//   ref::matmul_wna16 up to fp32 summation order.
//
// Decode of a 64-column unit's body, 10 vector operations and 2 loads for 64 codes,
// leaving q - z0 as signed bytes, qa lane j = column j and qb lane j = column 32 + j: the low 4
// bits are lo[j] & 15 and lo[j] >> 4; the top 2 bits come from hi broadcast to both 128-bit lanes,
// one vpshufb of its low (high) nibble per vector through a table that differs per 128-bit lane
// (low lane: bits 0-1 of the nibble, the columns j < 16 of each half; high lane: bits 2-3, columns
// 16..31) and gives (top << 4) - z0 directly, whose low nibble is 0: one or merges it.
//
// i16dot: the decode, 2 vpermps for the scales and 4 byte unpacks are shared by the rows of x; per
// row 4 vpmaddwd, 2 vpaddd, 2 conversions and 2 FMAs: ~30 vector operations per 64 weights at
// m = 1, below the time 2 cores need to stream 64 bytes. The byte unpacks put columns 0-7 and
// 16-23 (groups 0 and 1) in one vector, 8-15 and 24-31 in the next: i16_x writes x in that order
// (8-column chunks 0, 2, 1, 3 of every 32 columns), so that one vpaddd of two vpmaddwd gives lanes
// 0-3 of group 0 and 4-7 of group 1, and one FMA applies both groups' scales.
//
// Up to 3 rows of x share each decoded unit (16 ymm registers); weight rows are walked in blocks of
// 16 so that with more rows of x (prefill) a block is read again from L2, not DRAM. Each thread's
// rows are one sequential stream, prefetched 2 KiB ahead into L2 (the hardware prefetchers stop at
// 4 KiB pages; see matmul_gemv_avx512.cc).
//
// ISA safety (matmul_kernels.h): everything here is in an anonymous namespace but the two entry
// points; no std:: templates or inline functions shared with other files.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/wna16_g16.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kMaxGroup = 3;  // rows of x per pass
constexpr int64_t kBlockRows = 16;
constexpr int kPrefetchBytes = 2048;

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

struct Decoder {
  __m256i low4;  // 0x0F in every byte
  __m256i top;   // per 128-bit lane: nibble n -> (top bits << 4) - z0 (see the file comment)
};

Decoder make_decoder(int z0) {
  alignas(32) int8_t t[32];
  for (int n = 0; n < 16; ++n) {
    t[n] = static_cast<int8_t>(((n & 3) << 4) - z0);
    t[16 + n] = static_cast<int8_t>(((n >> 2) << 4) - z0);
  }
  return {_mm256_set1_epi8(0x0F), _mm256_load_si256(reinterpret_cast<const __m256i*>(t))};
}

// A row's units in order: each one's 48-byte body and its four fp32 scales, in the plain form or
// (COMPACT) the compact one, whose scales float(sc_g) · d are formed once per super-block.
template <bool COMPACT>
struct UnitWalk {
  const uint8_t* row;
  alignas(32) float scales[16];

  // Unit u's body; s4: its scales. Units must be visited in increasing order, each super-block
  // from its first unit on (every caller walks whole rows or runs of kG16SegmentUnits units).
  inline const uint8_t* unit(int64_t u, const float*& s4) {
    if constexpr (COMPACT) {
      const uint8_t* super = row + (u / kG16SuperUnits) * kG16SuperBytes;
      const int64_t q = u % kG16SuperUnits;
      if (q == 0) {
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(super));
        const __m256 d = _mm256_broadcast_ss(reinterpret_cast<const float*>(super + 16));
        _mm256_store_ps(scales, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d));
        _mm256_store_ps(
            scales + 8,
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d));
      }
      s4 = scales + 4 * q;
      return super + 20 + q * kG16BodyBytes;
    } else {
      const uint8_t* p = row + u * kG16UnitBytes;
      s4 = reinterpret_cast<const float*>(p);
      return p + 16;
    }
  }
};

// q - z0 as signed bytes from a unit's body: qa lane j = column j, qb lane j = column 32 + j
// (wna16_g16.h).
inline void decode_unit(const uint8_t* p, const Decoder& d, __m256i& qa, __m256i& qb) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32)));
  // (epi16 shifts: the bits they move across bytes are masked off.)
  qa = _mm256_or_si256(_mm256_and_si256(lo, d.low4),
                       _mm256_shuffle_epi8(d.top, _mm256_and_si256(hi, d.low4)));
  qb = _mm256_or_si256(
      _mm256_and_si256(_mm256_srli_epi16(lo, 4), d.low4),
      _mm256_shuffle_epi8(d.top, _mm256_and_si256(_mm256_srli_epi16(hi, 4), d.low4)));
}

float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// ---- int16 x, vpmaddwd --------------------------------------------------------------------------

// y[i0 + g][r] for g < G and weight rows [r0, r1).
template <int G, bool COMPACT>
void rows_i16(const Wna16G16Args& a, const Decoder& d, int64_t r0, int64_t r1, int64_t i0) {
  constexpr int S = G <= 2 ? 2 : 1;  // run accumulators per row of x (two FMA chains at m <= 2)
  const int64_t kp = a.units * kG16UnitCols;
  const __m256i zero = _mm256_setzero_si256();
  const __m256i pick01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const __m256i pick23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
  for (int64_t r = r0; r < r1; ++r) {
    UnitWalk<COMPACT> walk{a.data + r * a.row_bytes, {}};
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    for (int64_t u0 = 0, run = 0; u0 < a.units; u0 += kG16SegmentUnits, ++run) {
      const int64_t u1 = min64(a.units, u0 + kG16SegmentUnits);
      __m256 part[G][S];
      for (int g = 0; g < G; ++g) {
        for (int h = 0; h < S; ++h) part[g][h] = _mm256_setzero_ps();
      }
      for (int64_t u = u0; u < u1; ++u) {
        const float* scales;
        const uint8_t* p = walk.unit(u, scales);
        _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T1);
        __m256i qa, qb;
        decode_unit(p, d, qa, qb);
        const __m256 s4 = _mm256_castps128_ps256(_mm_loadu_ps(scales));
        const __m256 s01 = _mm256_permutevar8x32_ps(s4, pick01);  // groups 0 | 1
        const __m256 s23 = _mm256_permutevar8x32_ps(s4, pick23);  // groups 2 | 3
        // (q - z0) · 2^8 in 16-bit lanes, columns 0-7 | 16-23, 8-15 | 24-31, 32-39 | 48-55 and
        // 40-47 | 56-63.
        const __m256i c0 = _mm256_unpacklo_epi8(zero, qa);
        const __m256i c1 = _mm256_unpackhi_epi8(zero, qa);
        const __m256i c2 = _mm256_unpacklo_epi8(zero, qb);
        const __m256i c3 = _mm256_unpackhi_epi8(zero, qb);
#pragma GCC unroll 3
        for (int g = 0; g < G; ++g) {
          const auto* x = reinterpret_cast<const __m256i*>(a.xq + (i0 + g) * kp + u * kG16UnitCols);
          const __m256i d01 = _mm256_add_epi32(_mm256_madd_epi16(c0, _mm256_loadu_si256(x)),
                                               _mm256_madd_epi16(c1, _mm256_loadu_si256(x + 1)));
          const __m256i d23 = _mm256_add_epi32(_mm256_madd_epi16(c2, _mm256_loadu_si256(x + 2)),
                                               _mm256_madd_epi16(c3, _mm256_loadu_si256(x + 3)));
          part[g][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d01), s01, part[g][0]);
          part[g][S - 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d23), s23, part[g][S - 1]);
        }
      }
      for (int g = 0; g < G; ++g) {
        const __m256 sum = S == 2 ? _mm256_add_ps(part[g][0], part[g][S - 1]) : part[g][0];
        acc[g] =
            _mm256_fmadd_ps(sum, _mm256_set1_ps(a.xq_scale[(i0 + g) * a.segments + run]), acc[g]);
      }
    }
    const float b = a.bias ? a.bias[r] : 0.0f;
    for (int g = 0; g < G; ++g) a.y[(i0 + g) * a.rows + r] = sum8(acc[g]) * (1.0f / 256.0f) + b;
  }
}

// ---- fp32 x, exact weights ----------------------------------------------------------------------

template <int G, bool COMPACT>
void rows_exact(const Wna16G16Args& a, const Decoder& d, int64_t r0, int64_t r1, int64_t i0) {
  constexpr int A = G <= 2 ? 4 : 2;  // accumulators per row of x
  const int64_t kp = a.units * kG16UnitCols;
  for (int64_t r = r0; r < r1; ++r) {
    UnitWalk<COMPACT> walk{a.data + r * a.row_bytes, {}};
    __m256 acc[G][A];
    for (int g = 0; g < G; ++g) {
      for (int h = 0; h < A; ++h) acc[g][h] = _mm256_setzero_ps();
    }
    for (int64_t u = 0; u < a.units; ++u) {
      const float* scales;
      const uint8_t* p = walk.unit(u, scales);
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T1);
      __m256i qa, qb;
      decode_unit(p, d, qa, qb);
      const __m128i bytes[4] = {_mm256_castsi256_si128(qa), _mm256_extracti128_si256(qa, 1),
                                _mm256_castsi256_si128(qb), _mm256_extracti128_si256(qb, 1)};
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {  // group q of the unit: columns 16q .. 16q + 15
        const __m256 s = _mm256_broadcast_ss(scales + q);
        // float(q - z0) · s: the fp32 weight ref forms, (q - zero) · scale.
        const __m256 w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes[q])), s);
        const __m256 w1 =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes[q], 8))), s);
#pragma GCC unroll 3
        for (int g = 0; g < G; ++g) {
          const float* x = a.x + (i0 + g) * kp + u * kG16UnitCols + 16 * q;
          acc[g][(2 * q) % A] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[g][(2 * q) % A]);
          acc[g][(2 * q + 1) % A] =
              _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc[g][(2 * q + 1) % A]);
        }
      }
    }
    const float b = a.bias ? a.bias[r] : 0.0f;
    for (int g = 0; g < G; ++g) {
      __m256 sum = acc[g][0];
      for (int h = 1; h < A; ++h) sum = _mm256_add_ps(sum, acc[g][h]);
      a.y[(i0 + g) * a.rows + r] = sum8(sum) + b;
    }
  }
}

using RowsFn = void (*)(const Wna16G16Args&, const Decoder&, int64_t, int64_t, int64_t);

void walk_rows(const Wna16G16Args& a, int64_t row_begin, int64_t row_end,
               const RowsFn fns[kMaxGroup]) {
  const Decoder d = make_decoder(a.zero);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kBlockRows) {
    const int64_t r1 = min64(row_end, r0 + kBlockRows);
    for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGroup) {
      fns[min64(kMaxGroup, a.m - i0) - 1](a, d, r0, r1, i0);
    }
  }
}

}  // namespace

void wna16_g16_rows_i16dot_avx2(const Wna16G16Args& a, int64_t row_begin, int64_t row_end) {
  const RowsFn plain[kMaxGroup] = {rows_i16<1, false>, rows_i16<2, false>, rows_i16<3, false>};
  const RowsFn compact[kMaxGroup] = {rows_i16<1, true>, rows_i16<2, true>, rows_i16<3, true>};
  walk_rows(a, row_begin, row_end, a.compact ? compact : plain);
}

void wna16_g16_rows_avx2(const Wna16G16Args& a, int64_t row_begin, int64_t row_end) {
  const RowsFn plain[kMaxGroup] = {rows_exact<1, false>, rows_exact<2, false>,
                                   rows_exact<3, false>};
  const RowsFn compact[kMaxGroup] = {rows_exact<1, true>, rows_exact<2, true>, rows_exact<3, true>};
  walk_rows(a, row_begin, row_end, a.compact ? compact : plain);
}

}  // namespace lowbit::kernels::cpu::detail
