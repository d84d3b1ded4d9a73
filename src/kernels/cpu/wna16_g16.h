// Internal to the CPU weight-only integer matmul (wna16_matmul.h): 5..6-bit symmetric codes in
// groups of 16 columns, the arithmetic of llama.cpp's Q6_K (w = d·sc_g·(q - 32), 16 columns per
// int8 sub-scale sc_g). The general layout (wna16_kernels.h) pads every group to 32 columns and
// stores 5..8-bit codes in whole bytes: 2.25 bytes per weight here, more than bf16. This layout
// keeps one byte per weight, scales included, for an LM head that llama.cpp's Q4_0 / Q8_0 files
// store in Q6_K (0.26 GB per token on Llama-3.2-1B instead of 0.53 GB decoded to bf16).
//
// Layout: row after row. A unit of 64 columns, u holding columns 64u .. 64u + 63 (cols is padded
// to whole units, or in the compact form whole super-blocks, with zero scales and codes), has 48
// bytes of codes
//   body  0..31  lo[j] = (q[j] & 15) | (q[j + 32] & 15) << 4              (j < 32)
//   body 32..47  hi[j] = q[j] >> 4 | (q[j + 16] >> 4) << 2 | (q[j + 32] >> 4) << 4
//                        | (q[j + 48] >> 4) << 6                            (j < 16)
// and the scales of its four groups 4u .. 4u + 3 in one of two forms:
//  - plain: a row is cols / 64 units of 64 bytes (one cache line): bytes 0..15 the four fp32
//    scales, bytes 16..63 the body. One byte per weight.
//  - compact (Q6_K's own form): when every scale of a super-block of 256 columns (16 groups, 4
//    units) is an exact fp32 product d · sc_g with one fp32 d and int8 sc_g (llama.cpp's Q6_K
//    stores fp16 d and int8 sc_g, whose fp32 product lowbit's loader forms), a row is cols / 256
//    super-blocks of 212 bytes: bytes 0..15 sc_0 .. sc_15, bytes 16..19 d, then the 4 units'
//    bodies. 0.83 bytes per weight (llama.cpp reads 0.82): 17 % fewer bytes per decode step of
//    the LM head of a Q4_0 / Q8_0 file. The kernels form float(sc_g) · d, the very fp32 scale the
//    plain form stores, so both forms give the same results bit for bit.
// Zero-extending lo and hi to 16-bit lanes and one select per half puts each column's
// 6-bit code in the low bits of its own lane, in column order, ready for a 64-entry table lookup
// (vpermt2w) that yields bf16(q - z0) (wna16_g16_avx512.cc); on AVX2, a nibble mask of lo and one
// 16-entry vpshufb of hi per 32 columns yield q - z0 as bytes (wna16_g16_avx2.cc).
//
// Kernels: AVX512_BF16DOT packs this layout for wna16_g16_avx512_bf16dot (x rounded to bf16 on
// every path), AVX2_I16DOT for wna16_g16_avx2_i16dot (x quantized to int16 per run of 128 columns
// on every path; the general layout's i16-dot contract), AVX2 for wna16_g16_avx2 (fp32 x, exact
// weights).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/wna16_matmul.h"

namespace lowbit::kernels::cpu::detail {

constexpr int64_t kG16UnitCols = 64;
constexpr int64_t kG16UnitBytes = 64;  // plain form: 16 bytes of scales and a 48-byte body
constexpr int64_t kG16BodyBytes = 48;
constexpr int64_t kG16SuperUnits = 4;  // compact form: units per super-block
constexpr int64_t kG16SuperBytes = 16 + 4 + kG16SuperUnits * kG16BodyBytes;  // 212

// Bytes of one packed row of `units` units (compact: a multiple of kG16SuperUnits).
constexpr int64_t g16_row_bytes(int64_t units, bool compact) {
  return compact ? units / kG16SuperUnits * kG16SuperBytes : units * kG16UnitBytes;
}
// The i16-dot kernel's x scale covers this many units (128 columns, kWna16I16SegmentBlocks blocks
// of the general layout): runs of units [2s, 2s + 2), the last one possibly a single unit.
constexpr int64_t kG16SegmentUnits = 2;

// The ISA entry points' arguments: output rows [row_begin, row_end) for all m rows of x, each row
// of x units · 64 values, zero-padded, in the form the kernel takes (one of xb, x, xq).
struct Wna16G16Args {
  const uint8_t* data = nullptr;
  int64_t rows = 0, units = 0;  // compact: units is a multiple of kG16SuperUnits
  int zero = 32;
  bool compact = false;
  int64_t row_bytes = 0;         // g16_row_bytes(units, compact)
  const uint16_t* xb = nullptr;  // avx512: bf16(x)
  int64_t m = 0;
  const float* bias = nullptr;
  float* y = nullptr;
  const float* x = nullptr;  // avx2 (exact): fp32 x
  // i16dot: int16 x, in every 32 columns the 8-column chunks in the order 0, 2, 1, 3, and its scale
  // per (row of x, run of kG16SegmentUnits units): xq_scale[i · segments + run].
  const int16_t* xq = nullptr;
  const float* xq_scale = nullptr;
  int64_t segments = 0;
};
void wna16_g16_rows_avx512(const Wna16G16Args& a, int64_t row_begin, int64_t row_end);
void wna16_g16_rows_avx2(const Wna16G16Args& a, int64_t row_begin, int64_t row_end);
void wna16_g16_rows_i16dot_avx2(const Wna16G16Args& a, int64_t row_begin, int64_t row_end);

// Whether these weights take this layout: 5 or 6 bits, groups of 16, symmetric, no g_idx.
// pack_wna16_with uses it for the kernels that have a group-16 counterpart: AVX512_BF16DOT, AVX2
// and AVX2_I16DOT (wna16_g16_has_kernel).
bool wna16_g16_applies(const IntWeights& w);
bool wna16_g16_has_kernel(Wna16Kernel kernel);

class Wna16G16Cpu final : public Wna16Packed {
 public:
  // Throws InvalidArgument as pack_wna16 does; `kernel` one of wna16_g16_has_kernel's.
  Wna16G16Cpu(Wna16Kernel kernel, const IntWeights& w);
  int64_t rows() const override { return rows_; }
  int64_t cols() const override { return cols_; }
  const char* kernel_name() const override;  // wna16_g16_avx512_bf16dot, _avx2_i16dot, _avx2
  size_t bytes() const override { return data_.size(); }
  Wna16Kernel kernel() const { return kernel_; }
  // The packed weights for the kernel's entry point (x, m, bias and y left for the caller): for
  // wna16_g16_rows_avx512, y = bf16(x) · Wᵀ (+ bias) for any m, products exact in fp32, one scale
  // product per group of 16, fp32 sums (run by matmul_wna16, wna16_dispatch.cc).
  Wna16G16Args args() const {
    return {data_.data(), rows_, units_, zero_, compact_, g16_row_bytes(units_, compact_)};
  }
  bool compact() const { return compact_; }

 private:
  Wna16Kernel kernel_;
  int64_t rows_ = 0, cols_ = 0, units_ = 0;
  int zero_ = 32;  // 2^(bits - 1)
  bool compact_ = false;
  std::vector<uint8_t> data_;
};

}  // namespace lowbit::kernels::cpu::detail
