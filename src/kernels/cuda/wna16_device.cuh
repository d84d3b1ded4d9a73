// Device helpers of the GPU weight-only GEMM (wna16_stream.cu, wna16_gemm.cu): turning packed codes
// into exact bf16 (q - z) mma fragments, and the bf16 tensor-core product. sm_80 and later.
//
// Why exact: (q - z) is an integer of at most 8 significant bits (|q - z| <= 255), which bf16
// represents exactly, and a bf16 · bf16 product fits an fp32, so the tensor core multiplies without
// error and the only roundings are the fp32 sums and the final bf16 of y.
#pragma once

#include <cstdint>

namespace lowbit::kernels::cuda::detail {

// (a & b) | c in one LOP3.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Zero-point constants. 4-bit: bf16x2 of -(128 + z) in both halves: 0x4300 | q is the bf16 value
// 128 + q (q < 128), so fma(128 + q, 1, -(128 + z)) = q - z, exact. 8-bit: the fp32 bits of
// -(2^23 + z): 0x4B000000 | q is 2^23 + q, and (2^23 + q) - (2^23 + z) = q - z, exact.
__device__ __forceinline__ uint32_t neg_zero_u4(uint32_t z) { return (0xC300u | z) * 0x00010001u; }
__device__ __forceinline__ uint32_t neg_zero_u8(uint32_t z) { return 0xCB000000u | z; }

// The four A registers of one 16×16 step from a 4-bit word (layout in wna16_internal.h):
// a[i] = nibbles i and i + 4; rows r0 (i even, zero nz0) and r1 (i odd, zero nz1).
__device__ __forceinline__ void dequant_u4(uint32_t w, uint32_t nz0, uint32_t nz1, uint32_t a[4]) {
  constexpr uint32_t kMask = 0x000F000Fu, kMagic = 0x43004300u, kOne = 0x3F803F80u;
  a[0] = bf16x2_fma(and_or(w, kMask, kMagic), kOne, nz0);
  a[1] = bf16x2_fma(and_or(w >> 4, kMask, kMagic), kOne, nz1);
  a[2] = bf16x2_fma(and_or(w >> 8, kMask, kMagic), kOne, nz0);
  a[3] = bf16x2_fma(and_or(w >> 12, kMask, kMagic), kOne, nz1);
}

// Two bytes of w (byte-permute selectors lo, hi) as a bf16x2 (q - z): the fp32 value is an integer
// of <= 8 significant bits, so its upper 16 bits are its exact bf16.
__device__ __forceinline__ uint32_t u8_pair(uint32_t w, uint32_t sel_lo, uint32_t sel_hi, uint32_t nz) {
  const float lo = __uint_as_float(__byte_perm(w, 0x4B000000u, sel_lo)) + __uint_as_float(nz);
  const float hi = __uint_as_float(__byte_perm(w, 0x4B000000u, sel_hi)) + __uint_as_float(nz);
  return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

// 8-bit step: w0 holds columns 4t, 4t+1 of rows r0, r0, r1, r1 (bytes 0..3); w1 columns 4t+2, 4t+3.
__device__ __forceinline__ void dequant_u8(uint32_t w0, uint32_t w1, uint32_t nz0, uint32_t nz1,
                                           uint32_t a[4]) {
  a[0] = u8_pair(w0, 0x7440, 0x7441, nz0);
  a[1] = u8_pair(w0, 0x7442, 0x7443, nz1);
  a[2] = u8_pair(w1, 0x7440, 0x7441, nz0);
  a[3] = u8_pair(w1, 0x7442, 0x7443, nz1);
}

// c += A (16×16, rows of W) · B (16×8, columns of xᵀ), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The A registers of step s (0..3) of a chunk: 4-bit: one uint4 (v[0]); 8-bit: two (v[0], v[1]).
template <int BITS>
__device__ __forceinline__ void dequant_step(const uint4* v, int s, uint32_t nz0, uint32_t nz1,
                                             uint32_t a[4]) {
  if constexpr (BITS == 4) {
    dequant_u4(word_of(v[0], s), nz0, nz1, a);
  } else {
    const uint4& h = v[s / 2];
    dequant_u8(word_of(h, 2 * (s % 2)), word_of(h, 2 * (s % 2) + 1), nz0, nz1, a);
  }
}

// Zero-point constants of rows r0, r1 from their byte pair (low byte: r0).
template <int BITS>
__device__ __forceinline__ void neg_zeros(uint32_t pair, uint32_t& nz0, uint32_t& nz1) {
  if constexpr (BITS == 4) {
    nz0 = neg_zero_u4(pair & 0xFFu);
    nz1 = neg_zero_u4(pair >> 8);
  } else {
    nz0 = neg_zero_u8(pair & 0xFFu);
    nz1 = neg_zero_u8(pair >> 8);
  }
}

}  // namespace lowbit::kernels::cuda::detail
