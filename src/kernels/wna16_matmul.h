// Weight-only integer matmul (W4A16 / W8A16 and any width 2..8): y = x · dequant(W)ᵀ with fp32
// activations, int weights in groups or channels, symmetric or with zero points, optionally in
// activation order (g_idx). The weights are repacked once (pack_wna16) into the layout the fastest
// kernel of this CPU wants; every kernel is tested against ref::matmul_wna16, the naive definition.
//
// Accuracy contract: the result equals ref::matmul_wna16 up to fp32 summation order, except where
// a kernel documents rounding x to bf16 (the activation precision "A16" names; |Δ| ≤ 2^-8 relative
// per product) or to int16 per run of columns (|Δ| ≤ 2^-16 of the run's largest |x| per element),
// which it must then say in its kernel name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant_weights.h"

namespace lowbit::kernels {

// The repacked weights; opaque to callers. Immutable, shareable between threads.
class Wna16Packed {
 public:
  virtual ~Wna16Packed() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  virtual const char* kernel_name() const = 0;  // e.g. "wna16_avx512"
  virtual size_t bytes() const = 0;             // memory held by the packed form
};

// Throws InvalidArgument for inconsistent sizes (codes/scales/zeros/g_idx lengths, a code or zero
// out of range, bits outside 2..8, a g_idx entry outside [0, groups)).
std::shared_ptr<const Wna16Packed> pack_wna16(const IntWeights& weights);

// x: [m, cols] fp32 row-major; y: [m, rows] fp32; bias: rows values or null. OpenMP threads as
// kernels::matmul does.
void matmul_wna16(const float* x, int64_t m, const Wna16Packed& w, const float* bias, float* y);

namespace ref {
void matmul_wna16(const float* x, int64_t m, const IntWeights& w, const float* bias, float* y);
}  // namespace ref

namespace cpu {

// The CPU kernel families (tests and benchmarks force each; pack_wna16 picks wna16_best_kernel():
// AVX512_BF16DOT where the CPU has it, else AVX512, AVX2_I16DOT, SCALAR). All read one packed layout
// (src/kernels/cpu/wna16_kernels.h); the kernel is fixed at pack time. For results that equal
// ref::matmul_wna16 up to fp32 summation order on every path, pack with AVX512 (or AVX2/SCALAR).
enum class Wna16Kernel : uint8_t {
  SCALAR,          // portable C++
  AVX2,            // AVX2 + FMA + F16C; weights decoded to fp32 exactly as ref
  AVX512,          // AVX-512 F/BW/VL/DQ; weights decoded to fp32 exactly as ref
  // 2..4-bit weights only (wider codes run the AVX512 kernel). Decode (streaming path, m <= 8):
  // x rounded to bf16 (nearest even) and multiplied by the exact integer codes with vdpbf16ps,
  // |Δy| <= 2^-9·Σ|w·x| beyond fp32 summation; streaming with more rows is the AVX512 kernel's.
  // Prefill (blocked path): x and the dequantized weights (q - z)·s both rounded to bf16, exact
  // products summed in fp32 (|Δy| <= ~2^-8·Σ|w·x|: a bf16 model's precision), ~1.7x the fp32
  // blocked rate. Needs AVX512_BF16.
  AVX512_BF16DOT,
  // AVX2 + FMA + F16C. Decode (streaming path): x quantized to int16 per row of x and per run of
  // up to 128 columns of one group (scale max|x| / 32767, round to nearest) and multiplied by the
  // exact integer codes with vpmaddwd, exact int32 sums: |Δy| <= 2^-16 · Σ|w| · max|x| beyond fp32
  // arithmetic (finer than rounding x to bf16 wherever x's largest element is within 128x of the
  // rest of its run). Prefill (blocked path): the same arithmetic as a register-blocked int16
  // GEMM (twice the fp32 FMA kernel's products per instruction).
  // 5..6-bit symmetric weights in groups of 16 (llama.cpp's Q6_K) take the group-16 layout
  // (src/kernels/cpu/wna16_g16.h, one byte per weight): the same x quantization and bound on every
  // path there (runs of 128 columns), kernel name wna16_g16_avx2_i16dot; with AVX2 they run
  // wna16_g16_avx2 (fp32 x, exact weights: ref up to fp32 summation order).
  AVX2_I16DOT,
};

const char* wna16_kernel_name(Wna16Kernel kernel);  // "wna16_scalar", ..., "wna16_avx512_bf16dot"
bool wna16_kernel_supported(Wna16Kernel kernel);     // by this CPU and OS
Wna16Kernel wna16_best_kernel();                     // what pack_wna16 uses
std::vector<Wna16Kernel> wna16_supported_kernels();

// pack_wna16 for a chosen kernel. Throws Unsupported when this CPU cannot run it.
std::shared_ptr<const Wna16Packed> pack_wna16_with(Wna16Kernel kernel, const IntWeights& weights);
// The checks packing starts with (InvalidArgument naming the field), without packing.
void check_wna16_weights(const IntWeights& weights);

// matmul_wna16 with the path forced (MatmulPath from kernels/matmul.h: AUTO picks by m).
void matmul_wna16_with(MatmulPath path, const float* x, int64_t m, const Wna16Packed& w,
                       const float* bias, float* y);

// The streaming path with x kept in fp32 whatever the packing kernel (the bf16-dot and i16-dot
// kernels' layouts run on the exact AVX-512 / AVX2 kernels): equals ref::matmul_wna16 up to fp32
// summation order, so an identity x reads the decoded weights back exactly. For that probe, not
// for speed. (The group-16 layout's AVX-512 kernel rounds x to bf16 on every path; 1 and 0 are
// exact there. Its AVX2 packings run the exact fp32 kernel here.)
void matmul_wna16_exact(const float* x, int64_t m, const Wna16Packed& w, const float* bias,
                        float* y);

}  // namespace cpu

}  // namespace lowbit::kernels
