// Internal to the CPU FP8 (E4M3) weight-only matmul: the packed layouts and the per-ISA entry
// points. ISA files follow the rules of matmul_kernels.h (anonymous namespaces; check with nm).
//
// Tiled layout (AVX2, AVX-512): rows in tiles of 16, a tile stored k-major: byte 16·c + lane =
// code[16t + lane][c]. One 16-byte load is one column of 16 rows, decoded into one fp32 vector
// whose lanes are output rows, multiplied by the rows' scales and FMA'd against x[i][c] broadcast:
// no horizontal sums, and a scale boundary may fall on any column. The same loads fill the fp32
// panels of the blocked (prefill) path without a transpose.
//
// Decode: the e4m3 byte is sign-extended to 16 bits, shifted left by 7 and bit 14 cleared, which
// is the fp16 pattern of e4m3 / 256 (sign to bit 15; exponent and mantissa bits land on fp16's
// with their bias 7 read as 15, i.e. ÷ 2^8; e4m3 subnormals become fp16 subnormals of the same
// ratio). vcvtph2ps converts it exactly (fp16 subnormals too, even under MXCSR.DAZ: checked on
// Zen 4). The stored scales are scale · 256 (exact: a power of two), so a weight multiplied by its
// stored scale is fl(e4m3 · scale), as in ref. The two NaN codes (0x7F, 0xFF) decode to ±480 / 256
// instead; rows holding one are recorded at pack time and their outputs set to NaN afterwards,
// which is what ref produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/fp8_matmul.h"

namespace lowbit::kernels::cpu::detail {

constexpr int kFp8TileRows = 16;

struct Fp8Tiles {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t tiles = 0;               // ceil(rows / 16)
  int64_t block_cols = 0;          // columns per scale
  int64_t col_blocks = 0;          // ceil(cols / block_cols)
  const uint8_t* codes = nullptr;  // [tiles][cols][16]
  const float* scales = nullptr;   // [tiles][col_blocks][16], each scale · 256
};

struct Fp8Plain {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  int64_t scale_cols = 0;
  const uint8_t* codes = nullptr;  // [rows][cols]
  const float* scales = nullptr;   // [ceil(rows / block_rows)][scale_cols]
  const float* decoded = nullptr;  // [256]: e4m3 value of every code (NaN for 0x7F / 0xFF)
};

class Fp8PackedImpl final : public Fp8Packed {
 public:
  Fp8PackedImpl(Fp8Kernel kernel, const Fp8Weights& weights);
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  const char* kernel_name() const override;
  size_t bytes() const override;

  Fp8Kernel kernel() const { return kernel_; }
  Fp8Tiles tiles() const;  // tiled kernels only
  Fp8Plain plain() const;  // SCALAR only
  const std::vector<int64_t>& nan_rows() const { return nan_rows_; }

 private:
  struct FreeBytes {
    void operator()(uint8_t* p) const;
  };

  Fp8Kernel kernel_;
  int64_t rows_ = 0, cols_ = 0, block_rows_ = 0, block_cols_ = 0;
  std::unique_ptr<uint8_t[], FreeBytes> codes_;  // 64-byte aligned
  size_t code_bytes_ = 0;
  std::vector<float> scales_;
  std::vector<float> decoded_;
  std::vector<int64_t> nan_rows_;  // rows with a NaN code (tiled kernels)
};

// Whether the tiled kernels can hold these scales: scale · 256 must stay finite.
bool fp8_tiled_fits(const Fp8Weights& weights);

// ---- per-ISA entry points ----------------------------------------------------------------------

// y [m, rows] (row stride w.rows) for output rows in `rows` / tiles in `tiles`, x [m, cols].
void fp8_rows_scalar(const Fp8Plain& w, const float* x, int64_t m, Range rows, const float* bias,
                     float* y);
void fp8_stream_avx2(const Fp8Tiles& w, const float* x, int64_t m, Range tiles, const float* bias,
                     float* y);
void fp8_stream_avx512(const Fp8Tiles& w, const float* x, int64_t m, Range tiles, const float* bias,
                       float* y);
// The whole product through run_blocked (threads inside) with the dense matmul's blocked kernel
// of the ISA (blocked_kernel_avx2/avx512): each block of W decoded once per thread into fp32
// panels, then its register-blocked micro-kernel. Needs nr % 16 == 0.
void fp8_blocked_avx2(const Fp8Tiles& w, const float* x, int64_t m, const float* bias, float* y);
void fp8_blocked_avx512(const Fp8Tiles& w, const float* x, int64_t m, const float* bias, float* y);

}  // namespace lowbit::kernels::cpu::detail
