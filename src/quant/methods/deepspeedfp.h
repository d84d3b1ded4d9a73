// DeepSpeed's FP quantizer (deepspeed/ops/fp_quantizer; CUDA kernels in csrc/fp_quantizer/
// fp_quantize.cu, unchanged from DeepSpeed v0.14.2 to v0.16.4), which vLLM's quant_method
// "deepspeedfp" runs on every Linear weight at load. Reproduced bit for bit from the kernel source,
// since the kernel itself only runs on CUDA (docs/methods.md, the `deepspeedfp` row).
//
// Formats (q_bits → mantissa bits, q_range = the largest value):
//   8: e4m3, exponent bias 7, max 480 (1.875 · 2^8): unlike e4m3fn, exponent 15 holds ordinary
//      numbers (no NaN), so the code 0x7F is 480
//   6: e3m2, exponent bias 3, max 28 (1.75 · 2^4)
// Per group of `group_size` consecutive values of the flattened bf16 tensor, with A = max|x|:
//   codes  x · (q_range / A) in fp32, rounded to q_mantissa bits by adding half of the dropped
//          mantissa (ties away from zero), exponent clamped below to the smallest normal (2^-6 for
//          fp8, 2^-2 for fp6; no subnormals: smaller non-zero values become that normal)
//   scale  A / q_range (fp32)
//   value  bf16(decode(code) · scale), decode(code) = ±2^(e - bias) · (1 + m / 2^q_mantissa)
// The kernel's quirk on exact zeros is kept: their fp32 exponent 0 skips the clamp and the rebias
// wraps, giving the code with exponent 8 (fp8) / 4 (fp6), i.e. ±2 · scale after dequantization.
// A group of zeros (A = 0) dequantizes to zeros.
// Packed layout (DeepSpeed's int8 tensor [groups, group_size · q_bits / 8 + 4]): per group the
// codes as a little-endian bit stream (code i at bit q_bits · i; one byte each for fp8), then the
// fp32 scale in its 4 little-endian bytes.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::quant::deepspeedfp {

struct FpFormat {
  int bits = 8;           // q_bits: 8 or 6
  int mantissa_bits = 3;  // 3 (fp8) or 2 (fp6)
  int exponent_bits = 4;  // 4 (fp8) or 3 (fp6)
  float q_range = 480.0f;
};

// The format of q_bits 8 or 6; InvalidArgument otherwise.
FpFormat format_for_bits(int bits);

// One value already scaled by q_range / A (fp32), encoded as the kernel does (low `bits` bits).
uint8_t encode(float scaled, const FpFormat& f);
// A code's value before the scale: ±2^(e - bias) · (1 + m / 2^mantissa_bits), exact in bf16.
float decode(uint8_t code, const FpFormat& f);

// Bytes of one packed group: group_size · bits / 8 codes plus the 4-byte scale.
int64_t packed_group_bytes(int64_t group_size, const FpFormat& f);

// Quantizes n bf16 values (bit patterns), n a multiple of group_size; the values must be finite.
std::vector<uint8_t> quantize(const uint16_t* bf16, int64_t n, int64_t group_size,
                              const FpFormat& f);
// The packed groups back to bf16 bit patterns (n values), as the kernel's dequantize writes them.
std::vector<uint16_t> dequantize(const uint8_t* packed, int64_t n, int64_t group_size,
                                 const FpFormat& f);

}  // namespace lowbit::quant::deepspeedfp
