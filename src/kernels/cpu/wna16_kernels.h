// Internal to the CPU weight-only integer matmul (wna16_matmul.h): the packed layout every kernel
// reads, the arguments of a call, and the per-ISA entry points. ISA-safety rules as in
// matmul_kernels.h (ISA files keep their code in anonymous namespaces; check with nm).
//
// Packed layout. Columns are first put in group order: with g_idx (GPTQ desc_act) the columns are
// stably sorted by group, and every group is padded with zero-activation columns to a multiple of
// kWna16BlockCols, so each block of 32 packed columns lies in one group and the scale of a block
// is one number per row. x is permuted and padded the same way at run time (exact: a permutation
// of the sum). Rows are cut into tiles of kWna16TileRows; a tile is stored column block after
// column block, so that a tile row range is one sequential stream:
//   codes[((tile · col_blocks + block) · 8 + r) · block_bytes + b]
// with block_bytes = 16 for codes of 2..4 bits (byte b holds column b in its low nibble and
// column b + 16 in its high nibble: one zero-extension to 32-bit lanes gives 16 codes per nibble,
// ready for a 16-entry table lookup) and 32 for 5..8 bits (byte b = column b).
// Scales and zero points are tiled the same way, 8 rows per (tile, group):
//   scales[(tile · groups + g) · 8 + r] (fp32), zeros[(tile · groups + g) · 8 + r] (u8).
// When every scale is exactly an fp16 number (GGUF's Q4_0 / Q8_0 d; compressed-tensors' bf16
// scales in fp16's range), they are kept as fp16 instead (scales_f16, same index; scales null):
// the same values, and 10 % fewer bytes for a decode step of group-32 weights.
// Padding rows have scale 0; padding columns have code 0 and meet x = 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/wna16_matmul.h"

namespace lowbit::kernels::cpu::detail {

constexpr int kWna16TileRows = 8;
constexpr int kWna16BlockCols = 32;
// The i16-dot kernel scales x per segment: up to this many column blocks of one group (128
// columns), so int32 sums of 8-bit codes times int16 x cannot overflow (wna16_i16dot_avx2.cc).
constexpr int64_t kWna16I16SegmentBlocks = 4;
// Rows of x per micro-tile of the i16-dot GEMM (wna16_i16gemm_avx2.cc).
constexpr int kWna16I16GemmRows = 3;

// A view of the packed weights (pointers into a Wna16PackedCpu). The inline helpers here are for
// baseline-ISA files only: ISA files compute their offsets themselves (matmul_kernels.h, rules).
struct Wna16Layout {
  int bits = 4;
  bool nibbles = true;       // bits <= 4: block_bytes = 16
  int64_t block_bytes = 16;  // bytes per tile row per column block
  int64_t rows = 0;          // n
  int64_t cols = 0;          // k of the caller's x
  int64_t tiles = 0;         // ceil(rows / 8)
  int64_t col_blocks = 0;    // padded columns / 32
  int64_t padded_cols = 0;   // kp = col_blocks · 32
  int64_t groups = 0;
  float default_zero = 8;    // 2^(bits-1), the zero when `zeros` is null
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;           // fp32 scales, or null when scales_f16 holds them
  const uint16_t* scales_f16 = nullptr;    // the same scales as fp16 bit patterns
  const uint8_t* zeros = nullptr;          // null: symmetric
  const int64_t* group_blocks = nullptr;   // [groups + 1]: first column block of each group
  const int32_t* block_group = nullptr;    // [col_blocks]: group of each column block
  const int32_t* column_of = nullptr;      // [kp]: caller's column or -1 (padding); null: identity

  int64_t tile_bytes() const { return col_blocks * kWna16TileRows * block_bytes; }
  const uint8_t* block(int64_t tile, int64_t cb) const {
    return codes + (tile * col_blocks + cb) * kWna16TileRows * block_bytes;
  }
  float scale(int64_t tile, int64_t g, int r) const {
    const int64_t i = (tile * groups + g) * kWna16TileRows + r;
    return scales_f16 ? f16_to_f32(scales_f16[i]) : scales[i];
  }
  const uint8_t* tile_zeros(int64_t tile, int64_t g) const {
    return zeros ? zeros + (tile * groups + g) * kWna16TileRows : nullptr;
  }
};

// Throws InvalidArgument for an inconsistent IntWeights (pack_wna16's contract).
void validate_int_weights(const IntWeights& w);

class Wna16PackedCpu final : public Wna16Packed {
 public:
  Wna16PackedCpu(Wna16Kernel kernel, const IntWeights& weights);
  int64_t rows() const override { return layout_.rows; }
  int64_t cols() const override { return layout_.cols; }
  const char* kernel_name() const override {
    return i16_decode_ ? "wna16_avx512_i16dot" : wna16_kernel_name(kernel_);
  }
  size_t bytes() const override;
  Wna16Kernel kernel() const { return kernel_; }
  // 5..8-bit codes packed for the bf16-dot kernel (which has no path for them): the AVX-512 kernel
  // runs them, but one row of x (decode) takes the AVX2 i16-dot code, x quantized to int16 per run
  // of 128 columns (finer than the bf16 rounding the bf16-dot kernel would give x): 1.2x the exact
  // kernel's decode on Zen 5, where the exact kernel is faster from two rows on (bench/NOTES.md,
  // session 31). kernel_name(): "wna16_avx512_i16dot".
  bool i16_decode() const { return i16_decode_; }
  const Wna16Layout& layout() const { return layout_; }

 private:
  bool order_columns(const IntWeights& weights);  // fills group_blocks_, block_group_, column_of_
  void pack_codes(const IntWeights& weights);
  void pack_scales(const IntWeights& weights);

  Wna16Kernel kernel_;
  bool i16_decode_ = false;
  Wna16Layout layout_;
  std::vector<uint8_t> codes_;
  std::vector<float> scales_;
  std::vector<uint16_t> scales_f16_;
  std::vector<uint8_t> zeros_;
  std::vector<int64_t> group_blocks_;
  std::vector<int32_t> block_group_;
  std::vector<int32_t> column_of_;
};

// One streaming (decode) call: all m rows of x against a range of row tiles.
struct Wna16Args {
  const Wna16Layout* w = nullptr;
  int64_t m = 0;
  const float* x = nullptr;      // [m, padded_cols], in packed column order, zero padded
  const uint16_t* xb = nullptr;  // bf16dot: [m, padded_cols] bf16(x) in packed column order
  const float* xsum = nullptr;   // bf16dot with zero points: [m, groups] sums of the bf16 x
  // i16dot: x as int16 in packed column order, [m, padded_cols], with per (row of x, segment)
  // its scale sx and sx · Σ xq, [m, segments]; segments as the kernel walks them: each group's
  // column blocks cut into runs of kWna16I16SegmentBlocks, groups in order, empty groups none.
  const int16_t* xq = nullptr;
  // i16dot GEMM: the same xq as int32 column pairs (low half the even column), segment by
  // segment, sliver by sliver (kWna16I16GemmRows rows of x; rows past m zero): for the segment of
  // pairs [p0, p0 + L), xq_pairs[(p0 · slivers + sliver · L + p - p0) · R + i % R]. A micro-tile's
  // broadcasts read one contiguous run, and a segment's x for all rows is one sequential stream.
  const int32_t* xq_pairs = nullptr;
  int64_t slivers = 0;
  const float* xq_scale = nullptr;
  const float* xq_sum = nullptr;
  int64_t segments = 0;
  const float* bias = nullptr;
  float* y = nullptr;            // [m, rows]
};

// Streaming kernels for tiles [tiles.begin, tiles.end).
void wna16_gemv_scalar(const Wna16Args& args, Range tiles);
void wna16_gemv_avx2(const Wna16Args& args, Range tiles);
void wna16_gemv_avx512(const Wna16Args& args, Range tiles);
void wna16_gemv_bf16dot_avx512(const Wna16Args& args, Range tiles);
void wna16_gemv_i16dot_avx2(const Wna16Args& args, Range tiles);
// The blocked (prefill) counterpart of wna16_gemv_i16dot_avx2, same arguments and arithmetic;
// writes y rows of tiles [tiles.begin, tiles.end) for all m rows of x.
void wna16_gemm_i16dot_avx2(const Wna16Args& args, Range tiles);

// PackWeights for run_blocked: args.w points to a Wna16Layout and args.k is its padded_cols.
// Decodes rows [row0, row0 + rows) × packed columns [k0, k0 + kc) into fp32 panels of nr rows,
// exactly as ref dequantizes. row0 must be a multiple of 8, k0 and kc multiples of 32.
void wna16_pack_panels_scalar(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                              int64_t kc, int nr, float* dst);
void wna16_pack_panels_avx512(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                              int64_t kc, int nr, float* dst);
// The same weights for the bf16-dot blocked kernel (blocked_kernel_bf16_dot_avx512): each
// dequantized value rounded to bf16 (nearest even) and stored as bf16 pairs (k, k + 1), the layout
// of the dense bf16-dot path (matmul_gemm_avx512.cc's pack_weight_pairs).
void wna16_pack_pairs_avx512(const MatmulArgs& args, int64_t row0, int64_t rows, int64_t k0,
                             int64_t kc, int nr, float* dst);

// ---- ISA-neutral helpers (wna16_common.cc) -----------------------------------------------------

// Code of tile row r, packed column c (c = block · 32 + j).
inline int wna16_code(const Wna16Layout& w, int64_t tile, int r, int64_t c) {
  const uint8_t* p = w.block(tile, c / kWna16BlockCols) + r * w.block_bytes;
  const int64_t j = c % kWna16BlockCols;
  if (!w.nibbles) return p[j];
  return j < 16 ? (p[j] & 0xF) : (p[j - 16] >> 4);
}

// Packed columns [c0, c1) (multiples of 32) of weight row `row`, dequantized exactly as ref,
// (code - zero) · scale, to out[(c - c0) · stride].
void wna16_decode_row(const Wna16Layout& w, int64_t row, int64_t c0, int64_t c1, float* out,
                      int64_t stride);

}  // namespace lowbit::kernels::cpu::detail
