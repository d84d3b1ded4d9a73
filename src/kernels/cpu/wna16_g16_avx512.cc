// The group-16 layout's kernel (wna16_g16.h), AVX-512 + AVX512_BF16, for any m.
//
// Per 64-column unit: the 48 code bytes zero-extend to 16-bit lanes and one bit
// select per half (vpternlogd) leaves column c's 6-bit code in the low 6 bits of lane c (higher
// bits hold other columns' bits: vpermt2w reads only 6 index bits), a 64-entry table lookup turns
// the codes into bf16(q - z0), exact, and vdpbf16ps multiplies them by bf16(x): lane l of the
// result sums columns 2l and 2l + 1, so lanes 0-7 are group 2h and lanes 8-15 group 2h + 1 of half
// h. One fma per half then applies both groups' scales at once. ~16 vector instructions per 64
// weights at m = 1: below the time a 2-core Zen 4 needs to stream the 64 bytes.
//
// Up to 4 rows of x share each decoded unit; weight rows are walked in blocks of 16 so that with
// more rows of x (prefill) a block is read again from L2, not DRAM. Each thread's rows are one
// sequential stream, prefetched 2 KiB ahead into L2 (the hardware prefetchers stop at 4 KiB
// pages; see matmul_gemv_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/wna16_g16.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kMaxGroup = 4;      // rows of x per pass
constexpr int64_t kBlockRows = 16;
constexpr int kPrefetchBytes = 2048;

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

uint16_t bf16_of_small_int(int v) {  // exact for |v| < 256
  float f = static_cast<float>(v);
  uint32_t bits;
  __builtin_memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

struct Tables {
  __m512i lo, hi;  // bf16(j - z0) for j = 0..31 and 32..63
};

Tables code_tables(int z0) {
  alignas(64) uint16_t t[64];
  for (int j = 0; j < 64; ++j) t[j] = bf16_of_small_int(j - z0);
  return {_mm512_load_si512(t), _mm512_load_si512(t + 32)};
}

// The 16 fp32 scales of a compact super-block (wna16_g16.h): float(sc_g) · d, the plain form's
// scales bit for bit.
__m512 super_scales(const uint8_t* super) {
  const __m512 sc = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super))));
  float d;
  __builtin_memcpy(&d, super + 16, 4);
  return _mm512_mul_ps(sc, _mm512_set1_ps(d));
}

// y[i0 + g][r] for g < G: the dot of weight row r with bf16 x rows i0 .. i0 + G - 1. COMPACT: the
// layout's compact form (units walked in super-blocks of kG16SuperUnits).
template <int G, bool COMPACT>
void row_dot(const Wna16G16Args& a, const Tables& t, int64_t r, int64_t i0, float* out) {
  constexpr int64_t kUnitsPer = COMPACT ? kG16SuperUnits : 1;
  constexpr int64_t kBlockBytes = COMPACT ? kG16SuperBytes : kG16UnitBytes;
  const int64_t kp = a.units * kG16UnitCols;
  const uint8_t* row = a.data + r * a.row_bytes;
  const __m512i low4 = _mm512_set1_epi16(0x000F);
  // Lanes 0-7 take scale 0 (2), lanes 8-15 scale 1 (3) of the unit: the groups of the two halves'
  // lanes. Compact: the unit's scales are lanes 4q .. 4q + 3 of the super-block's 16.
  const __m512i pick0 = _mm512_inserti64x4(_mm512_set1_epi32(0), _mm256_set1_epi32(1), 1);
  const __m512i pick1 = _mm512_inserti64x4(_mm512_set1_epi32(2), _mm256_set1_epi32(3), 1);
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.units / kUnitsPer; ++b) {
    const uint8_t* block = row + b * kBlockBytes;
    __m512 s16;
    if constexpr (COMPACT) {
      s16 = super_scales(block);
    } else {
      s16 = _mm512_castps128_ps512(_mm_loadu_ps(reinterpret_cast<const float*>(block)));
    }
#pragma GCC unroll 4
    for (int q = 0; q < kUnitsPer; ++q) {
      const uint8_t* p = COMPACT ? block + 20 + q * kG16BodyBytes : block + 16;  // the unit's body
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T1);
      const __m512i shift = _mm512_set1_epi32(4 * q);
      const __m512 s0 = _mm512_permutexvar_ps(_mm512_add_epi32(pick0, shift), s16);
      const __m512 s1 = _mm512_permutexvar_ps(_mm512_add_epi32(pick1, shift), s16);
      const __m512i lo =
          _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      const __m256i hb =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32)));
      // Lane j < 16: hi[j]; lane j + 16: hi[j] >> 2. Bits 0-1 then hold the top of column j (j +
      // 16) of the first half, bits 4-5 the top of column 32 + j (48 + j).
      const __m512i hi =
          _mm512_inserti64x4(_mm512_castsi256_si512(hb), _mm256_srli_epi16(hb, 2), 1);
      // (first & 15) | (second & ~15), 0xE4 = "c ? a : b" with c the mask.
      const __m512i idx0 = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi16(hi, 4), low4, 0xE4);
      const __m512i idx1 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(lo, 4), hi, low4, 0xE4);
      const __m512bh w0 = (__m512bh)_mm512_permutex2var_epi16(t.lo, idx0, t.hi);
      const __m512bh w1 = (__m512bh)_mm512_permutex2var_epi16(t.lo, idx1, t.hi);
      const int64_t u = b * kUnitsPer + q;
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const uint16_t* x = a.xb + (i0 + g) * kp + u * kG16UnitCols;
        const __m512bh x0 = (__m512bh)_mm512_loadu_si512(x);
        const __m512bh x1 = (__m512bh)_mm512_loadu_si512(x + 32);
        acc[g] = _mm512_fmadd_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w0, x0), s0, acc[g]);
        acc[g] = _mm512_fmadd_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), w1, x1), s1, acc[g]);
      }
    }
  }
  for (int g = 0; g < G; ++g) out[g] = _mm512_reduce_add_ps(acc[g]);
}

template <int G>
void rows_for_group(const Wna16G16Args& a, const Tables& t, int64_t r0, int64_t r1, int64_t i0) {
  float out[G];
  for (int64_t r = r0; r < r1; ++r) {
    if (a.compact) {
      row_dot<G, true>(a, t, r, i0, out);
    } else {
      row_dot<G, false>(a, t, r, i0, out);
    }
    const float b = a.bias ? a.bias[r] : 0.0f;
    for (int g = 0; g < G; ++g) a.y[(i0 + g) * a.rows + r] = out[g] + b;
  }
}

}  // namespace

void wna16_g16_rows_avx512(const Wna16G16Args& a, int64_t row_begin, int64_t row_end) {
  const Tables t = code_tables(a.zero);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kBlockRows) {
    const int64_t r1 = min64(row_end, r0 + kBlockRows);
    for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGroup) {
      switch (min64(kMaxGroup, a.m - i0)) {
        case 1: rows_for_group<1>(a, t, r0, r1, i0); break;
        case 2: rows_for_group<2>(a, t, r0, r1, i0); break;
        case 3: rows_for_group<3>(a, t, r0, r1, i0); break;
        default: rows_for_group<4>(a, t, r0, r1, i0); break;
      }
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
