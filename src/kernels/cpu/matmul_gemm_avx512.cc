// Prefill-shaped matmul (many rows of x) with AVX-512: compute-bound, so the goal is to keep the
// FMA units busy. A block of W (kc × nc) is decoded to fp32 once per thread into a k-major panel
// that stays in L2 (pack_weight_panels) and reused by every row of x; x is packed into k-major
// slivers of kMr rows that stay in L1. The micro-kernel keeps a kMr × (16·kNv) tile of y in
// registers and per k step does kNv vector loads of W, kMr broadcasts of x and kMr·kNv FMAs.
// Both operands are packed 16×16 at a time through an in-register transpose.
//
// The same blocking also runs the opt-in bf16-dot kernel (cpu::matmul_bf16_dot): operands packed
// as bf16 pairs and one vdpbf16ps per two k instead of an FMA per k.
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

// 12 × 32 keeps 24 accumulators in registers; 8 × 48 and 6 × 64 measured the same on Zen 4, and
// every variant reached 85-90% of the FMA-loop peak per core (bench/NOTES.md).
constexpr int kMr = 12;        // rows of x per micro-tile
constexpr int kNv = 2;         // vectors of 16 outputs per micro-tile row
constexpr int kNr = 16 * kNv;  // columns of y (rows of W) per micro-tile
// kc 512 / nc 128 beat 256 / 256 by ~10% (x sliver 12·512·4 = 24 KiB stays in the 32 KiB L1;
// W block 128·512·4 = 256 KiB in L2).
constexpr int64_t kKc = 512;   // k per block
constexpr int64_t kNc = 128;   // W rows per block

__mmask16 column_mask(int64_t valid_columns, int v) {
  int64_t left = valid_columns - 16 * v;
  if (left >= 16) return 0xFFFF;
  if (left <= 0) return 0;
  return static_cast<__mmask16>((1u << left) - 1);
}

// See MicroKernel in matmul_kernels.h. kBf16Dot: xs and wp hold bf16 pairs (k, k+1) in 32-bit
// units at the float positions of their first k, i.e. only half of each buffer is used, and each
// step is one vdpbf16ps (two k per instruction) instead of an fp32 FMA.
template <bool kBf16Dot>
void micro_kernel(const float* xs, const float* wp, int64_t kc, float* y, int64_t ldy, int rows,
                  int64_t columns, const float* bias, bool first) {
  __mmask16 mask[kNv];
  for (int v = 0; v < kNv; ++v) mask[v] = column_mask(columns, v);
  __m512 acc[kMr][kNv];
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) {
      if (i >= rows) {
        acc[i][v] = _mm512_setzero_ps();
      } else if (!first) {
        acc[i][v] = _mm512_maskz_loadu_ps(mask[v], y + i * ldy + 16 * v);
      } else {
        acc[i][v] = bias ? _mm512_maskz_loadu_ps(mask[v], bias + 16 * v) : _mm512_setzero_ps();
      }
    }
  }
  const int64_t steps = kBf16Dot ? (kc + 1) / 2 : kc;
  for (int64_t p = 0; p < steps; ++p) {
    __m512 b[kNv];
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) b[v] = _mm512_load_ps(wp + p * kNr + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
      __m512 a = _mm512_set1_ps(xs[p * kMr + i]);
#pragma GCC unroll 4
      for (int v = 0; v < kNv; ++v) {
        if constexpr (kBf16Dot) {
          acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)_mm512_castps_si512(a),
                                       (__m512bh)_mm512_castps_si512(b[v]));
        } else {
          acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < kMr; ++i) {
    if (i >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < kNv; ++v) _mm512_mask_storeu_ps(y + i * ldy + 16 * v, mask[v], acc[i][v]);
  }
}

// ---- packing W: 16 rows × 16 k at a time, transposed in registers -----------------------------

// 16 consecutive weights of one row as fp32; lanes outside `mask` are zero.
template <DType kDType>
__m512 load_row16(const void* w, int64_t offset, __mmask16 mask) {
  if constexpr (kDType == DType::F32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + offset);
  } else {
    __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + offset);
    if constexpr (kDType == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// In-place transpose of a 16×16 fp32 block held as 16 row vectors (4 stages × 16 shuffles).
void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {  // pairs of rows interleaved by 32 bits
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // then by 64 bits: u[4g + c] lane L = rows 4g..4g+3 of col 4L+c
    for (int h = 0; h < 2; ++h) {
      __m512d a = _mm512_castps_pd(t[i + h]), b = _mm512_castps_pd(t[i + h + 2]);
      r[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  }
  for (int c = 0; c < 4; ++c) {  // gather lane L of the four row groups: column 4L + c
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

// pack_weight_panels for nr = kNr, with vector loads and stores: each row is read 16 elements at a
// time and the 16×16 block transposed in registers. (Reading the 32 rows, which are k apart and
// often in one L1 set, an element at a time made packing 20% of a prefill matmul.)
template <DType kDType>
void pack_weights(const MatmulArgs& a, int64_t row0, int64_t rows, int64_t k0, int64_t kc, int nr,
                  float* dst) {
  for (int64_t panel_row = 0; panel_row < rows; panel_row += kNr) {
    for (int half = 0; half < kNr / 16; ++half) {
      const int64_t first = panel_row + 16 * half;
      const int64_t valid = std::clamp<int64_t>(rows - first, 0, 16);
      const int64_t base = (row0 + first) * a.k + k0;
      for (int64_t p = 0; p < kc; p += 16) {
        const int64_t count = std::min<int64_t>(16, kc - p);
        const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
        __m512 v[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          v[i] = i < valid ? load_row16<kDType>(a.w, base + i * a.k + p, mask) : _mm512_setzero_ps();
        }
        transpose16(v);
        for (int64_t j = 0; j < count; ++j) _mm512_store_ps(dst + (p + j) * kNr + 16 * half, v[j]);
      }
    }
    dst += kc * kNr;
  }
}

PackWeights pack_for(DType dtype) {
  switch (dtype) {
    case DType::BF16: return pack_weights<DType::BF16>;
    case DType::F16: return pack_weights<DType::F16>;
    case DType::F32: return pack_weights<DType::F32>;
    default: throw_bad_dtype("gemm_avx512", dtype);
  }
}

// ---- the opt-in bf16-dot path ------------------------------------------------------------------

// W (BF16) packed as bf16 pairs: unit (p / 2) · kNr + r of a panel holds w[r][k0 + p], w[r][k0 + p
// + 1] — the 16 pairs of one row are one 64-byte load, transposed as 32-bit units. No rounding.
void pack_weight_pairs(const MatmulArgs& a, int64_t row0, int64_t rows, int64_t k0, int64_t kc,
                       int nr, float* dst) {
  const auto* w = static_cast<const uint16_t*>(a.w);
  for (int64_t panel_row = 0; panel_row < rows; panel_row += kNr) {
    for (int half = 0; half < kNr / 16; ++half) {
      const int64_t first = panel_row + 16 * half;
      const int64_t valid = std::clamp<int64_t>(rows - first, 0, 16);
      for (int64_t p = 0; p < kc; p += 32) {
        const int64_t count = std::min<int64_t>(32, kc - p);
        const auto mask = static_cast<__mmask32>((uint64_t{1} << count) - 1);
        __m512 v[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          const uint16_t* src = w + (row0 + first + i) * a.k + k0 + p;
          v[i] = i < valid ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mask, src))
                           : _mm512_setzero_ps();
        }
        transpose16(v);
        for (int64_t j = 0; j < (count + 1) / 2; ++j) {
          _mm512_store_ps(dst + (p / 2 + j) * kNr + 16 * half, v[j]);
        }
      }
    }
    dst += kc * kNr;  // the driver's panel stride (only the first half is used)
  }
}

// ---- packing x: kMr rows × 16 units at a time, transposed in registers -------------------------

// 16 fp32 values of x from p on (zero past `count`): one packed unit per value.
__m512 load_x16(const float* x, int64_t count) {
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((uint64_t{1} << std::min<int64_t>(count, 16)) - 1), x);
}

// 32 values of x rounded to bf16 (nearest even, as vcvtne2ps2bf16), as 16 pairs (p, p + 1).
__m512 load_x32_as_bf16_pairs(const float* x, int64_t count) {
  __m512 lo = load_x16(x, count);
  __m512 hi = count > 16 ? load_x16(x + 16, count - 16) : _mm512_setzero_ps();
  return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// pack_activation_slivers for mr = kMr (kPairs = false), or its bf16-pair version for the
// bf16-dot kernel (unit (p / 2) · kMr + i holds x[i][k0 + p], x[i][k0 + p + 1] rounded to bf16,
// the second zero past k). Rows are read 16 units at a time and transposed in registers, like W.
template <bool kPairs>
void pack_x(const MatmulArgs& a, int64_t row0, int64_t rows, int64_t k0, int64_t kc, int mr,
            float* dst) {
  static_assert(kMr <= 16);
  constexpr int64_t kStep = kPairs ? 32 : 16;  // k values per 16 units
  for (int64_t sliver = 0; sliver < rows; sliver += kMr) {
    const int64_t valid = std::min<int64_t>(kMr, rows - sliver);
    for (int64_t p = 0; p < kc; p += kStep) {
      const int64_t count = std::min(kStep, kc - p);
      __m512 v[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        if (i >= valid) {
          v[i] = _mm512_setzero_ps();
          continue;
        }
        const float* x = a.x + (row0 + sliver + i) * a.k + k0 + p;
        v[i] = kPairs ? load_x32_as_bf16_pairs(x, count) : load_x16(x, count);
      }
      transpose16(v);
      const int64_t units = kPairs ? (count + 1) / 2 : count;
      const int64_t first_unit = kPairs ? p / 2 : p;
      for (int64_t j = 0; j < units; ++j) {
        _mm512_mask_storeu_ps(dst + (first_unit + j) * kMr, (1u << kMr) - 1, v[j]);
      }
    }
    dst += kc * kMr;  // the driver's sliver stride (for pairs only the first half is used)
  }
}

}  // namespace

BlockedKernel blocked_kernel_avx512() {
  return BlockedKernel{kMr, kNr, kKc, kNc, micro_kernel<false>, nullptr, pack_x<false>};
}

BlockedKernel blocked_kernel_bf16_dot_avx512() {
  return BlockedKernel{kMr, kNr, kKc, kNc, micro_kernel<true>, nullptr, pack_x<true>};
}

void gemm_avx512(const MatmulArgs& args) {
  run_blocked(args, BlockedKernel{kMr, kNr, kKc, kNc, micro_kernel<false>, pack_for(args.w_dtype),
                                  pack_x<false>});
}

void gemm_bf16_dot_avx512(const MatmulArgs& args) {
  if (args.w_dtype != DType::BF16) {
    throw_bad_dtype("gemm_bf16_dot_avx512", args.w_dtype);
  }
  run_blocked(args, BlockedKernel{kMr, kNr, kKc, kNc, micro_kernel<true>, pack_weight_pairs,
                                  pack_x<true>});
}

}  // namespace lowbit::kernels::cpu::detail
