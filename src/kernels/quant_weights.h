// The canonical, format-independent description of a quantized weight matrix that the CPU
// quantized-matmul kernels repack from. Every checkpoint format (compressed-tensors, GPTQ, AWQ,
// vLLM's FP8, ...) is decoded by its quantization method into one of these; each kernel family then
// packs it into its own layout once, at load (process_weights_after_loading), so the formats never
// reach the kernels and the kernels never parse a format.
//
// Dequantized value of weight (row r, column c):
//   IntWeights: (codes[r][c] - zero(r, g)) * scales[r][g] with g = group_of(c)
//   Fp8Weights: e4m3(codes[r][c]) * scales[r / block_rows][c / block_cols]
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::kernels {

// Integer weights of 2..8 bits, stored unsigned. Symmetric schemes use the implicit zero
// 2^(bits-1) (compressed-tensors' signed [-8, 7] codes become [0, 15] with zero 8, GPTQ's
// uint4b8); asymmetric ones carry an explicit zero point per (row, group).
struct IntWeights {
  int bits = 4;
  int64_t rows = 0;        // output features n
  int64_t cols = 0;        // input features k
  int64_t group_size = 0;  // input columns per scale; == cols for per-channel scales
  std::vector<uint8_t> codes;  // [rows, cols], each < 2^bits
  std::vector<float> scales;   // [rows, groups], groups = ceil(cols / group_size)
  std::vector<uint8_t> zeros;  // [rows, groups], each < 2^bits; empty: symmetric (2^(bits-1))
  // Activation order (GPTQ desc_act): group of each input column; empty means c / group_size.
  std::vector<int32_t> g_idx;

  int64_t groups() const { return group_size > 0 ? (cols + group_size - 1) / group_size : 0; }
  int32_t group_of(int64_t c) const {
    return g_idx.empty() ? static_cast<int32_t>(c / group_size) : g_idx[static_cast<size_t>(c)];
  }
  float zero(int64_t r, int64_t g) const {
    return zeros.empty() ? static_cast<float>(1 << (bits - 1))
                         : static_cast<float>(zeros[static_cast<size_t>(r * groups() + g)]);
  }
};

// FP8 E4M3 weights with one fp32 scale per block_rows x block_cols tile: per-tensor scales are one
// tile of the whole matrix, per-channel ones 1 x cols, block ones 128 x 128, group ones 1 x g.
struct Fp8Weights {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t block_rows = 1;
  int64_t block_cols = 0;
  std::vector<uint8_t> codes;  // [rows, cols] E4M3 bit patterns
  std::vector<float> scales;   // [ceil(rows / block_rows), ceil(cols / block_cols)]

  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  float scale(int64_t r, int64_t c) const {
    return scales[static_cast<size_t>((r / block_rows) * scale_cols() + c / block_cols)];
  }
};

// How activations are quantized to int8 before an integer dot product (W8A8 / W4A8).
struct Int8Activations {
  // true: one symmetric scale per row of x, absmax / 127.5, computed at run time (dynamic per token);
  // false: the fixed per-tensor `static_scale` (and `static_zero`, asymmetric static schemes).
  bool dynamic = true;
  float static_scale = 1.0f;
  int32_t static_zero = 0;
};

}  // namespace lowbit::kernels
