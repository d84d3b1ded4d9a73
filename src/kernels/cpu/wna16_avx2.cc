// Weight-only integer matmul, streaming (decode) path with AVX2 + FMA (8 fp32 lanes, 16 vector
// registers), for CPUs without AVX-512. Same structure as wna16_avx512.cc (read that first), but
// AVX2 has no 16-entry float lookup, so codes are converted (vcvtdq2ps) and dequantized with the
// same sub and mul as ref. A tile's 8 rows are done 4 at a time to keep the accumulators in
// registers. The blocked (prefill) path packs with wna16_pack_panels_scalar and runs the dense
// AVX2 micro-kernel (wna16_dispatch.cc).
#include <immintrin.h>

#include "kernels/cpu/wna16_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {

constexpr int kRows = kWna16TileRows;
constexpr int kSub = 4;       // tile rows per pass
constexpr int kMaxGroup = 2;  // rows of x per pass

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

__m256i load8_u8(const uint8_t* p) {  // 8 bytes zero-extended to 32-bit lanes
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

__m256 dequantize(__m256i codes, __m256 zero, __m256 scale) {
  return _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(codes), zero), scale);
}

// out[i · kSub + s] = dot(x row i, weight row 8·tile + r0 + s), G rows of x (row stride kp).
template <int G>
void sub_tile(const Wna16Layout& w, int64_t tile, int r0, const float* x, float* out) {
  const int64_t kp = w.padded_cols;
  __m256 acc[G][kSub];
  for (int i = 0; i < G; ++i) {
    for (int s = 0; s < kSub; ++s) acc[i][s] = _mm256_setzero_ps();
  }
  auto add = [&](int s, __m256 wv, int64_t c) {
#pragma GCC unroll 2
    for (int i = 0; i < G; ++i) acc[i][s] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * kp + c), acc[i][s]);
  };
  const __m256i low_nibble = _mm256_set1_epi32(0xF);
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t at = (tile * w.groups + g) * kRows + r0;
    __m256 zero[kSub], scale[kSub];
    for (int s = 0; s < kSub; ++s) {
      zero[s] = _mm256_set1_ps(w.zeros ? static_cast<float>(w.zeros[at + s]) : w.default_zero);
      scale[s] = _mm256_set1_ps(w.scales_f16 ? _cvtsh_ss(w.scales_f16[at + s]) : w.scales[at + s]);
    }
    for (int64_t cb = w.group_blocks[g]; cb < w.group_blocks[g + 1]; ++cb) {
      const uint8_t* codes = w.codes + ((tile * w.col_blocks + cb) * kRows + r0) * w.block_bytes;
      const int64_t c = cb * kWna16BlockCols;
#pragma GCC unroll 4
      for (int s = 0; s < kSub; ++s) {
        const uint8_t* p = codes + s * w.block_bytes;
        if (w.nibbles) {  // byte b: column b (low nibble) and b + 16 (high nibble)
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m256i v = load8_u8(p + 8 * h);
            add(s, dequantize(_mm256_and_si256(v, low_nibble), zero[s], scale[s]), c + 8 * h);
            add(s, dequantize(_mm256_srli_epi32(v, 4), zero[s], scale[s]), c + 16 + 8 * h);
          }
        } else {
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) add(s, dequantize(load8_u8(p + 8 * q), zero[s], scale[s]), c + 8 * q);
        }
      }
    }
  }
  for (int i = 0; i < G; ++i) {
    for (int s = 0; s < kSub; ++s) out[i * kSub + s] = horizontal_sum(acc[i][s]);
  }
}

template <int G>
void tile_for_group(const Wna16Args& a, int64_t tile, int64_t i0) {
  const Wna16Layout& w = *a.w;
  const float* x = a.x + i0 * w.padded_cols;
  for (int r0 = 0; r0 < kRows; r0 += kSub) {
    const int64_t row0 = tile * kRows + r0;
    if (row0 >= w.rows) break;
    float out[G * kSub];
    sub_tile<G>(w, tile, r0, x, out);
    const int rows = static_cast<int>(min64(kSub, w.rows - row0));
    for (int i = 0; i < G; ++i) {
      float* y = a.y + (i0 + i) * w.rows + row0;
      for (int s = 0; s < rows; ++s) y[s] = out[i * kSub + s] + (a.bias ? a.bias[row0 + s] : 0.0f);
    }
  }
}

}  // namespace

void wna16_gemv_avx2(const Wna16Args& a, Range tiles) {
  for (int64_t tile = tiles.begin; tile < tiles.end; ++tile) {
    for (int64_t i0 = 0; i0 < a.m; i0 += kMaxGroup) {
      if (a.m - i0 >= 2) {
        tile_for_group<2>(a, tile, i0);
      } else {
        tile_for_group<1>(a, tile, i0);
      }
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
