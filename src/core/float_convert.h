// Exact scalar conversions between fp32 and the narrow float formats stored in checkpoints.
// These are the reference definitions; SIMD kernels must agree with them bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace lowbit {

inline float bits_to_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, as torch's .to(torch.bfloat16). NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits = f32_to_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    // zero or subnormal: mantissa * 2^-24
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_to_f32(sign | 0x7F800000 | (mantissa << 13));
  return bits_to_f32(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest even; overflow goes to infinity, as IEEE (and torch) do.
inline uint16_t f32_to_f16(float f) {
  uint32_t bits = f32_to_bits(f);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits > 0x7F800000) return sign | 0x7E00;    // NaN
  if (abs_bits >= 0x477FF000) return sign | 0x7C00;   // rounds to >= 65520: infinity
  if (abs_bits < 0x38800000) {                        // below the smallest normal 2^-14
    float magnitude = bits_to_f32(abs_bits);
    // subnormal step is 2^-24; nearbyint rounds half to even in the default mode
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 16777216.0f));
  }
  uint32_t rounding = 0xFFF + ((abs_bits >> 13) & 1);
  return sign | static_cast<uint16_t>((abs_bits + rounding - 0x38000000) >> 13);
}

// OCP FP8 E4M3 ("fn": no infinities, 0x7F/0xFF are NaN, max 448).
inline float fp8_e4m3_to_f32(uint8_t v) {
  uint32_t sign = v & 0x80;
  uint32_t exponent = (v >> 3) & 0xF;
  uint32_t mantissa = v & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, static_cast<int>(exponent) - 7);
  }
  return sign ? -magnitude : magnitude;
}

// fp32 → OCP FP8 E4M3 ("fn"), as torch's .to(torch.float8_e4m3fn): round to nearest even on the
// e4m3 grid; no saturation: a magnitude that rounds above 448 (i.e. > 464, the midpoint to the
// would-be 480), and ±inf, become NaN (0x7F | sign); NaN stays NaN. Subnormal step 2^-9.
inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t bits = f32_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits >= 0x7F800000) return sign | 0x7F;  // inf or NaN
  if (abs_bits < 0x3C800000) {                     // below 2^-6, the smallest normal
    // exact multiply by 2^9; nearbyint rounds half to even; 8 carries into code 0x08 = 2^-6
    return sign | static_cast<uint8_t>(std::nearbyint(bits_to_f32(abs_bits) * 512.0f));
  }
  const uint32_t rounding = 0x7FFFF + ((abs_bits >> 20) & 1);
  const uint32_t code = ((abs_bits + rounding) >> 20) - ((127 - 7) << 3);
  return code > 0x7E ? (sign | 0x7F) : static_cast<uint8_t>(sign | code);
}

// OCP FP8 E5M2 (IEEE-like: has infinities and NaNs).
inline float fp8_e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }

}  // namespace lowbit
