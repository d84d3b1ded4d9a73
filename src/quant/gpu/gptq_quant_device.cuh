// Device copies of the scalar arithmetic GPTQ's column loop runs per element: quantize_value /
// dequantize_value (quant/scheme/qparams.cc) for the scale a weight column uses, with the rounding
// of core/float_convert.h and round_to_fp4 (quant/scheme/packing.cc), bit for bit.
//
// Bit-identical means: the same IEEE operations in the same order with the same rounding. Every
// multiply, add and divide is written as an explicit round-to-nearest intrinsic (__fmul_rn, ...)
// so that nvcc cannot contract a multiply and an add into an FMA (the host code is compiled
// without FMA contraction: x86-64's baseline has no FMA); x / s is the IEEE division
// (__fdiv_rn), rintf rounds half to even like std::nearbyint in the default rounding mode, and
// the narrow-float conversions are the host's bit manipulations, not the hardware's cvt
// instructions (whose saturation and NaN rules differ for fp8).
#pragma once

#include <cstdint>

namespace lowbit::quant::gpu::detail {

// The dtype a dequantized value is rounded to (quant::round_to_dtype; anything else is fp32).
enum class RoundTo : int { F32 = 0, BF16 = 1, F16 = 2, F8E4M3 = 3 };
// round_code: integers round half to even, fp8 e4m3 and fp4 e2m1 to their grids.
enum class CodeKind : int { Int = 0, Fp8 = 1, Fp4 = 2 };

// What the column loop needs to quantize one element of the permuted weight (gptq.cc's
// ColumnQuantizer): device pointers and a few scalars, passed to kernels by value.
struct QuantSpec {
  const float* scale = nullptr;        // effective scales (÷ the global scale), grid row-major
  const float* zero = nullptr;         // zero points like `scale`; nullptr when symmetric
  const int32_t* col_group = nullptr;  // grid column of each permuted weight column
  int64_t grid_cols = 1;
  int64_t row_div = 1;  // grid row = row / row_div (block: block_rows); 0: always 0 (tensor)
  float qmin = 0.0f, qmax = 0.0f;
  CodeKind code = CodeKind::Int;
  RoundTo dequant = RoundTo::F32;  // the scale tensor's dtype (fp32 with a global scale)
};

#ifdef __CUDACC__

__device__ __forceinline__ float round_bf16(float f) {  // f32_to_bf16 then bf16_to_f32
  const uint32_t bits = __float_as_uint(f);
  if (isnan(f)) return __uint_as_float(((bits >> 16) | 0x40u) << 16);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return __uint_as_float(((bits + rounding) >> 16) << 16);
}

__device__ __forceinline__ uint32_t f32_to_f16_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return sign | 0x7E00u;
  if (abs_bits >= 0x477FF000u) return sign | 0x7C00u;
  if (abs_bits < 0x38800000u)  // subnormal: the product by 2^24 is exact
    return sign | static_cast<uint32_t>(rintf(__fmul_rn(__uint_as_float(abs_bits), 16777216.0f)));
  const uint32_t rounding = 0xFFFu + ((abs_bits >> 13) & 1u);
  return (sign | ((abs_bits + rounding - 0x38000000u) >> 13)) & 0xFFFFu;
}

__device__ __forceinline__ float f16_bits_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = __fmul_rn(static_cast<float>(mantissa), 5.9604644775390625e-08f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return __uint_as_float(sign | 0x7F800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__device__ __forceinline__ uint32_t f32_to_fp8_e4m3_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) return sign | 0x7Fu;
  if (abs_bits < 0x3C800000u)  // below 2^-6: the product by 2^9 is exact
    return sign | static_cast<uint32_t>(rintf(__fmul_rn(__uint_as_float(abs_bits), 512.0f)));
  const uint32_t rounding = 0x7FFFFu + ((abs_bits >> 20) & 1u);
  const uint32_t code = ((abs_bits + rounding) >> 20) - ((127u - 7u) << 3);
  return code > 0x7Eu ? (sign | 0x7Fu) : (sign | code);
}

__device__ __forceinline__ float fp8_e4m3_bits_to_f32(uint32_t v) {
  const uint32_t exponent = (v >> 3) & 0xFu, mantissa = v & 0x7u;
  float magnitude;
  if (exponent == 0xFu && mantissa == 0x7u) {
    magnitude = __uint_as_float(0x7FC00000u);
  } else if (exponent == 0) {
    magnitude = __fmul_rn(static_cast<float>(mantissa), 0.001953125f);  // · 2^-9, exact
  } else {
    magnitude = __uint_as_float(((exponent + 120u) << 23) | (mantissa << 20));
  }
  return (v & 0x80u) ? -magnitude : magnitude;
}

__device__ __forceinline__ float round_to(float x, RoundTo d) {
  switch (d) {
    case RoundTo::BF16: return round_bf16(x);
    case RoundTo::F16: return f16_bits_to_f32(f32_to_f16_bits(x));
    case RoundTo::F8E4M3: return fp8_e4m3_bits_to_f32(f32_to_fp8_e4m3_bits(x));
    default: return x;
  }
}

__device__ __forceinline__ float round_fp4(float x) {  // packing.cc's round_to_fp4
  if (isnan(x)) return x;
  const float sign = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
  const float a = fabsf(x);
  float m;
  if (a <= 0.25f) m = 0.0f;
  else if (a < 0.75f) m = 0.5f;
  else if (a <= 1.25f) m = 1.0f;
  else if (a < 1.75f) m = 1.5f;
  else if (a <= 2.5f) m = 2.0f;
  else if (a < 3.5f) m = 3.0f;
  else if (a <= 5.0f) m = 4.0f;
  else m = 6.0f;
  return __fmul_rn(m, sign);
}

// dequantize_value(quantize_value(x, s, zp, args, F32), s, zp, args, q.dequant): the host's
// ColumnQuantizer with its effective scale s.
__device__ __forceinline__ float fake_quantize(float x, float s, float zp, const QuantSpec& q) {
  float y = __fdiv_rn(x, s);
  if (zp != 0.0f) y = __fadd_rn(y, zp);
  if (!isnan(y)) y = y < q.qmin ? q.qmin : (q.qmax < y ? q.qmax : y);  // std::clamp
  float code;
  if (q.code == CodeKind::Int) code = rintf(y);
  else if (q.code == CodeKind::Fp8) code = fp8_e4m3_bits_to_f32(f32_to_fp8_e4m3_bits(y));
  else code = round_fp4(y);
  float v = code;
  if (zp != 0.0f) v = round_to(__fsub_rn(v, zp), q.dequant);
  return round_to(round_to(__fmul_rn(v, s), q.dequant), q.dequant);
}

#endif  // __CUDACC__

}  // namespace lowbit::quant::gpu::detail
