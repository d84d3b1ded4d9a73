// The portable weight-only integer matmul kernels (any bits, any CPU) and the scalar weight
// decoder the AVX2 blocked path also packs with. Correct for every shape; not tuned.
#include <algorithm>

#include "kernels/cpu/wna16_kernels.h"

namespace lowbit::kernels::cpu::detail {

namespace {
constexpr int kLanes = 8;  // independent partial sums per dot product (SIMD-friendly order)
}  // namespace

void wna16_decode_row(const Wna16Layout& w, int64_t row, int64_t c0, int64_t c1, float* out,
                      int64_t stride) {
  const int64_t tile = row / kWna16TileRows;
  const int r = static_cast<int>(row % kWna16TileRows);
  for (int64_t cb = c0 / kWna16BlockCols; cb < c1 / kWna16BlockCols; ++cb) {
    const int32_t g = w.block_group[cb];
    const float scale = w.scale(tile, g, r);
    const uint8_t* zeros = w.tile_zeros(tile, g);
    const float zero = zeros ? static_cast<float>(zeros[r]) : w.default_zero;
    const uint8_t* codes = w.block(tile, cb) + r * w.block_bytes;
    float* dst = out + (cb * kWna16BlockCols - c0) * stride;
    for (int j = 0; j < kWna16BlockCols; ++j) {
      int code = codes[j];
      if (w.nibbles) code = j < 16 ? (codes[j] & 0xF) : (codes[j - 16] >> 4);
      dst[j * stride] = (static_cast<float>(code) - zero) * scale;
    }
  }
}

void wna16_gemv_scalar(const Wna16Args& a, Range tiles) {
  const Wna16Layout& w = *a.w;
  const int64_t kp = w.padded_cols;
  float* decoded = thread_scratch(1, static_cast<size_t>(kp));
  for (int64_t row = tiles.begin * kWna16TileRows;
       row < std::min(w.rows, tiles.end * kWna16TileRows); ++row) {
    wna16_decode_row(w, row, 0, kp, decoded, 1);
    for (int64_t i = 0; i < a.m; ++i) {
      const float* x = a.x + i * kp;
      float lanes[kLanes] = {};
      for (int64_t p = 0; p < kp; p += kLanes) {
        for (int l = 0; l < kLanes; ++l) lanes[l] += x[p + l] * decoded[p + l];
      }
      float sum = 0.0f;
      for (float v : lanes) sum += v;
      a.y[i * w.rows + row] = sum + (a.bias ? a.bias[row] : 0.0f);
    }
  }
}

void wna16_pack_panels_scalar(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                              int64_t kc, int nr, float* dst) {
  const auto& w = *static_cast<const Wna16Layout*>(args.w);
  for (int64_t panel_row = 0; panel_row < rows; panel_row += nr) {
    for (int r = 0; r < nr; ++r) {
      if (panel_row + r < rows) {
        wna16_decode_row(w, row0 + panel_row + r, k0, k0 + kc, dst + r, nr);
      } else {
        for (int64_t p = 0; p < kc; ++p) dst[p * nr + r] = 0.0f;
      }
    }
    dst += kc * nr;
  }
}

}  // namespace lowbit::kernels::cpu::detail
