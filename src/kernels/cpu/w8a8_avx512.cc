// W8A8 / W4A8 with AVX-512 VNNI: one vpdpbusd multiplies 64 unsigned weight codes (16 rows × 4 k
// of a tile, w8a8_kernels.h) by 4 signed activation codes broadcast to every lane and adds the
// four products into each row's int32 lane: 64 exact MACs per instruction, no horizontal sums.
//
// The micro-kernel keeps MR rows of x × NV tiles (16·NV rows of W) of int32 accumulators in
// registers. At the end of each group the zero-point term is removed exactly in int32 and the sum
// is converted and scaled into fp32 accumulators (in registers too when there are several groups,
// hence the smaller MR × NV there). Decode (m ≤ 4) streams NV = 4 tiles at once, so each loaded
// weight serves every row of x; prefill walks x in slivers of MR rows over a block of tiles that
// stays in L2.
//
// GCC 12's AVX-512 headers trip -Wuninitialized (see matmul_gemm_avx512.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/cpu/w8a8_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

struct Job {
  const W8a8Tiles& w;
  const Int8Rows& x;
  const float* bias;
  float* y;
};

// The 4 activation codes at p in every lane (folded into vpdpbusd as a {1to16} memory operand).
__m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// acc[i][v] += Σ over blocks [b0, b1) of tile v (codes at wt, tiles tile_bytes apart) · x row i.
template <int MR, int NV, bool kNibbles>
[[gnu::always_inline]] inline void dot_blocks(const uint8_t* wt, int64_t tile_bytes,
                                              const int8_t* xr, int64_t x_stride, int64_t kblock,
                                              int64_t b0, int64_t b1, __m512i (&acc)[MR][NV]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = b0; b < b1; ++b) {
    // All NV weight vectors first, then one broadcast of x at a time (consumed at once): hoisting
    // the MR broadcasts instead made GCC spill accumulators.
    const uint8_t* block = wt + b * kW8a8BlockBytes;
    __m512i lo[NV], hi[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m512i codes = _mm512_load_si512(block + v * tile_bytes);
      if constexpr (kNibbles) {
        lo[v] = _mm512_and_si512(codes, low4);
        hi[v] = _mm512_and_si512(_mm512_srli_epi16(codes, 4), low4);
      } else {
        lo[v] = codes;
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const int8_t* q = xr + i * x_stride + kblock * b;
      const __m512i xa = broadcast4(q);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], lo[v], xa);
      if constexpr (kNibbles) {
        const __m512i xb = broadcast4(q + 4);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], hi[v], xb);
      }
    }
  }
}

// y[i0 + i][rows of tile t0 + v] = sx · (out - zx · E) + bias, masked at the last tile.
template <int MR, int NV>
[[gnu::always_inline]] inline void store_tiles(const Job& job, int64_t i0, int64_t t0,
                                               __m512 (&out)[MR][NV]) {
  const W8a8Tiles& w = job.w;
  const Int8Rows& x = job.x;
  const __m512 zx = _mm512_set1_ps(static_cast<float>(x.zero));
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const int64_t r = (t0 + v) * kW8a8TileRows;
    const int64_t left = w.rows - r;
    if (left <= 0) break;
    const __mmask16 mask = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
    const __m512 e = _mm512_loadu_ps(w.zero_x_terms + r);
    const __m512 b = job.bias ? _mm512_maskz_loadu_ps(mask, job.bias + r) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      __m512 o = out[i][v];
      if (x.zero != 0) o = _mm512_fnmadd_ps(zx, e, o);
      o = _mm512_fmadd_ps(o, _mm512_set1_ps(x.scales[i0 + i]), b);
      _mm512_mask_storeu_ps(job.y + (i0 + i) * w.rows + r, mask, o);
    }
  }
}

// y rows i0..i0+MR-1 × output rows of tiles t0..t0+NV-1.
template <int MR, int NV, bool kNibbles, bool kGrouped>
void tile_kernel(const Job& job, int64_t i0, int64_t t0) {
  const W8a8Tiles& w = job.w;
  const Int8Rows& x = job.x;
  const int64_t tile_bytes = w.blocks * kW8a8BlockBytes;
  const int64_t groups = kGrouped ? w.groups : 1;
  __m512 out[MR][NV];
  if constexpr (kGrouped) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) out[i][v] = _mm512_setzero_ps();
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    int32_t sums[MR];
    __m512i acc[MR][NV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      sums[i] = x.group_sums[(i0 + i) * w.groups + g];
      // Symmetric: start from -zero·Σq, the whole zero-point term (exact, modulo 2^32).
      const auto minus_zq =
          -static_cast<uint32_t>(w.symmetric_zero) * static_cast<uint32_t>(sums[i]);
      const __m512i init =
          w.zeros ? _mm512_setzero_si512() : _mm512_set1_epi32(static_cast<int32_t>(minus_zq));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = init;
    }
    const int64_t b0 = g * w.group_blocks, b1 = std::min(w.blocks, b0 + w.group_blocks);
    dot_blocks<MR, NV, kNibbles>(w.codes + t0 * tile_bytes, tile_bytes, x.codes + i0 * x.stride,
                                 x.stride, w.kblock, b0, b1, acc);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int64_t slot = ((t0 + v) * w.groups + g) * kW8a8TileRows;
      if (w.zeros) {  // per-row zero points: acc -= zero[r] · Σq
        const __m512i z =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.zeros + slot)));
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          acc[i][v] =
              _mm512_sub_epi32(acc[i][v], _mm512_mullo_epi32(z, _mm512_set1_epi32(sums[i])));
        }
      }
      const __m512 s = _mm512_loadu_ps(w.scales + slot);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 f = _mm512_cvtepi32_ps(acc[i][v]);
        out[i][v] = kGrouped ? _mm512_fmadd_ps(f, s, out[i][v]) : _mm512_mul_ps(f, s);
      }
    }
  }
  store_tiles<MR, NV>(job, i0, t0, out);
}

// NV tiles per micro-tile: as many int32 (and, with groups, fp32) accumulators as leave room for
// the weight vectors in the 32 registers.
template <int MR, bool kGrouped>
constexpr int tiles_per_step() {
  if constexpr (kGrouped) return MR >= 4 ? 3 : 4;
  return MR >= 8 ? 3 : 4;
}

template <int MR, bool kNibbles, bool kGrouped>
void sweep(const Job& job, int64_t i0, int64_t t_begin, int64_t t_end) {
  constexpr int NV = tiles_per_step<MR, kGrouped>();
  int64_t t = t_begin;
  for (; t + NV <= t_end; t += NV) tile_kernel<MR, NV, kNibbles, kGrouped>(job, i0, t);
  for (; t < t_end; ++t) tile_kernel<MR, 1, kNibbles, kGrouped>(job, i0, t);
}

template <bool kNibbles, bool kGrouped>
void run_tiles(const Job& job, Range tiles) {
  const int64_t m = job.x.m;
  const int64_t tile_bytes = job.w.blocks * kW8a8BlockBytes;
  // Tiles per L2 block (~384 KiB, read again by every sliver of x), a multiple of 12 = lcm(3, 4).
  const int64_t per_block = std::max<int64_t>(12, (384 * 1024 / tile_bytes) / 12 * 12);
  for (int64_t tb = tiles.begin; tb < tiles.end; tb += per_block) {
    const int64_t te = std::min(tiles.end, tb + per_block);
    for (int64_t i0 = 0; i0 < m;) {
      const int64_t left = m - i0;
      const int mr = !kGrouped && left >= 8 ? 8 : static_cast<int>(std::min<int64_t>(4, left));
      switch (mr) {
        case 1:
          sweep<1, kNibbles, kGrouped>(job, i0, tb, te);
          break;
        case 2:
          sweep<2, kNibbles, kGrouped>(job, i0, tb, te);
          break;
        case 3:
          sweep<3, kNibbles, kGrouped>(job, i0, tb, te);
          break;
        case 4:
          sweep<4, kNibbles, kGrouped>(job, i0, tb, te);
          break;
        default:
          if constexpr (!kGrouped) sweep<8, kNibbles, kGrouped>(job, i0, tb, te);
          break;
      }
      i0 += mr;
    }
  }
}

}  // namespace

void w8a8_tiles_avx512(const W8a8Tiles& w, const Int8Rows& x, Range tiles, const float* bias,
                       float* y) {
  const Job job{w, x, bias, y};
  const bool grouped = w.groups > 1;
  if (w.nibbles) {
    grouped ? run_tiles<true, true>(job, tiles) : run_tiles<true, false>(job, tiles);
  } else {
    grouped ? run_tiles<false, true>(job, tiles) : run_tiles<false, false>(job, tiles);
  }
}

void w8a8_quantize_avx512(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                          int64_t stride, int8_t* codes, float* scales) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    int8_t* out = codes + i * stride;
    float scale = act.static_scale;
    float zero = static_cast<float>(act.static_zero);
    if (act.dynamic) {
      __m512 absmax = _mm512_setzero_ps();
      __mmask16 nan = 0;
      for (int64_t c = 0; c < k; c += 16) {
        const __mmask16 mask = k - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (k - c)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(mask, row + c);
        absmax = _mm512_max_ps(_mm512_abs_ps(v), absmax);  // a NaN first operand yields absmax
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      }
      scale = nan ? NAN : _mm512_reduce_max_ps(absmax) / 127.5f;
      if (scale == 0.0f) scale = FLT_EPSILON;
      zero = 0.0f;
    }
    scales[i] = scale;
    const __m512 vs = _mm512_set1_ps(scale), vz = _mm512_set1_ps(zero);
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (int64_t c = 0; c < k; c += 16) {
      const __mmask16 mask = k - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (k - c)) - 1);
      __m512 q = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(mask, row + c), vs), vz);
      q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);  // NaN → 0
      q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
      const __m512i qi = _mm512_cvt_roundps_epi32(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm512_mask_cvtepi32_storeu_epi8(out + c, mask, qi);
    }
    std::memset(out + k, 0, static_cast<size_t>(stride - k));
  }
}

}  // namespace lowbit::kernels::cpu::detail
