// Internal to the CPU W8A8 / W4A8 matmul: the packed weight layouts, the quantized activations of
// one call, and the per-ISA entry points. ISA files follow the rules of matmul_kernels.h (code in
// anonymous namespaces, no shared inline or template instantiations; check with nm).
//
// Tiled layout (AVX2, AVX-512 VNNI). Rows are grouped in tiles of 16; a tile is a run of 64-byte
// blocks along k, each holding 4 consecutive k of all 16 rows: byte 4·lane + j = code[16t + lane]
// [4b + j]. That is the operand order of vpdpbusd: lane `lane` of the int32 accumulator sums
// code·x over the 4 bytes, with the 4 codes of x broadcast to every lane, so each lane is one
// output row and no horizontal sums are needed. Codes of ≤ 4 bits are stored two per byte: block b
// covers 8 k, the low nibble of byte 4·lane + j holds k = 8b + j and the high nibble k = 8b + 4 + j
// (one and, one shift-and give two such blocks). The weights are the unsigned operand (codes are
// stored unsigned) and the activations the signed one, so no +128 offset is needed; the zero point
// enters as zero[r][g] · Σ_{c∈g} q[i][c], a per-row-of-x sum computed once per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/w8a8_matmul.h"

namespace lowbit::kernels::cpu::detail {

constexpr int kW8a8TileRows = 16;
constexpr int64_t kW8a8BlockBytes = 64;

struct W8a8Tiles {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t tiles = 0;     // ceil(rows / 16)
  bool nibbles = false;  // two codes per byte (2..4 bits)
  int64_t kblock = 4;    // k per block: 4, or 8 with nibbles
  int64_t blocks = 0;    // blocks per tile: ceil(cols / kblock)
  int64_t groups = 1;
  int64_t group_blocks = 0;        // blocks per group (the last group may be shorter)
  const uint8_t* codes = nullptr;  // [tiles][blocks][64]
  const float* scales = nullptr;   // [tiles][groups][16]
  const uint8_t* zeros = nullptr;  // [tiles][groups][16]; null: every zero is symmetric_zero
  int32_t symmetric_zero = 0;
  const float* zero_x_terms = nullptr;  // [tiles · 16]: E[r], see W8a8PackedImpl
};

struct W8a8Plain {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t group_size = 0;
  int64_t groups = 1;
  const uint8_t* codes = nullptr;  // [rows][cols]
  const float* scales = nullptr;   // [rows][groups]
  const uint8_t* zeros = nullptr;  // [rows][groups]; null: symmetric_zero
  int32_t symmetric_zero = 0;
  const float* zero_x_terms = nullptr;  // [rows]
};

// The activations of one call, quantized.
struct Int8Rows {
  int64_t m = 0;
  int64_t stride = 0;                   // bytes per row of codes, a multiple of 64, ≥ k
  const int8_t* codes = nullptr;        // [m][stride], zero past k
  const float* scales = nullptr;        // [m]
  const int32_t* group_sums = nullptr;  // [m][groups]: Σ_{c∈g} q[i][c]
  int32_t zero = 0;                     // static zero point zx (0 for dynamic rows)
};

// The packed weights behind W8a8Packed: one of the two layouts above, chosen by `kernel`.
class W8a8PackedImpl final : public W8a8Packed {
 public:
  W8a8PackedImpl(W8a8Kernel kernel, const IntWeights& weights);
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  const char* kernel_name() const override;
  size_t bytes() const override;

  W8a8Kernel kernel() const { return kernel_; }
  int64_t groups() const { return groups_; }
  int64_t group_size() const { return group_size_; }
  // Columns of x per 64-byte-aligned row of codes the kernel reads.
  int64_t x_stride() const;
  W8a8Tiles tiles() const;  // tiled kernels only
  W8a8Plain plain() const;  // SCALAR only

 private:
  struct FreeBytes {
    void operator()(uint8_t* p) const;
  };
  void pack_tiled(const IntWeights& w);
  void pack_plain(const IntWeights& w);

  W8a8Kernel kernel_;
  int64_t rows_ = 0, cols_ = 0, group_size_ = 0, groups_ = 1;
  int bits_ = 8;
  int32_t symmetric_zero_ = 0;
  std::unique_ptr<uint8_t[], FreeBytes> codes_;  // 64-byte aligned
  size_t code_bytes_ = 0;
  std::vector<float> scales_;
  std::vector<uint8_t> zeros_;  // empty: symmetric
  // E[r] = Σ_g s[r][g] · Σ_{c∈g} (code[r][c] - zero[r][g]): with a static zero point zx the sum
  // Σ (q - zx)(code - zero) is Σ q·(code - zero) - zx·D[r][g]; the zx part is applied as -zx·E[r].
  std::vector<float> zero_x_terms_;
};

// Whether the tiled layout can hold these weights (whole blocks per group).
bool w8a8_tiled_fits(const IntWeights& weights);

// ---- per-ISA entry points ----------------------------------------------------------------------

// Quantizes rows of x [m, k] (see w8a8_matmul.h) into codes [m][stride] (zero past k) and scales.
void w8a8_quantize_scalar(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                          int64_t stride, int8_t* codes, float* scales);
void w8a8_quantize_avx2(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                        int64_t stride, int8_t* codes, float* scales);
void w8a8_quantize_avx512(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                          int64_t stride, int8_t* codes, float* scales);

// y [m, rows] (row stride w.rows) for output rows in `rows` (SCALAR) or tiles in `tiles`.
void w8a8_rows_scalar(const W8a8Plain& w, const Int8Rows& x, Range rows, const float* bias,
                      float* y);
void w8a8_tiles_avx2(const W8a8Tiles& w, const Int8Rows& x, Range tiles, const float* bias,
                     float* y);
void w8a8_tiles_avx512(const W8a8Tiles& w, const Int8Rows& x, Range tiles, const float* bias,
                       float* y);

}  // namespace lowbit::kernels::cpu::detail
