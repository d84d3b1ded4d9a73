// Integer matmul with int8 activations: W8A8 (int8 weights, per-channel or per-tensor scales) and
// W4A8 (int4 weights in groups or channels), both with activations quantized to int8 either per
// row of x at run time (dynamic per token, symmetric) or with a static per-tensor scale (and zero
// point). Products accumulate exactly in int32 (VNNI vpdpbusd where the CPU has it), then scale:
//   y[i][r] = sx[i] · Σ_g s[r][g] · Σ_{c∈g} (qx[i][c] - zx) · (code[r][c] - zero[r][g])
//             (+ bias[r])
// The weights are repacked once (pack_w8a8); every kernel is tested against ref::matmul_w8a8.
//
// Activation quantization, as compressed-tensors defines it (fp32 here; src/quant/scheme/qparams.cc
// is the bit-exact port): dynamic scale = absmax(x[i]) / 127.5 (symmetric int8 divides the absmax
// by (qmax - qmin) / 2), an all-zero row gets scale FLT_EPSILON (its codes are 0 either way);
// q = round_half_even(clamp(x / scale + zero, -128, 127)), zero = 0 for dynamic rows. (The order
// matters at ties: x / scale = 2.5 with zero 1 gives 4, not round(2.5) + 1 = 3.)
// Non-finite x: a row holding NaN gets scale NaN (torch's amax propagates it), so its outputs are
// NaN; a NaN quotient becomes code 0 (torch's cast of NaN to int8 is undefined).
//
// Accuracy contract: the activation codes and scales are bit-exact with ref::quantize_activations
// and the int32 sums exact; y differs from ref::matmul_w8a8 only by the fp32 rounding of the final
// scaling (a few roundings per group; see tests/unit/kernels/w8a8_test.cc for the bound).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/quant_weights.h"

namespace lowbit::kernels {

class W8a8Packed {
 public:
  virtual ~W8a8Packed() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  virtual const char* kernel_name() const = 0;
  virtual size_t bytes() const = 0;
};

// Weights of 2..8 bits (4 and 8 are the W4A8 / W8A8 schemes) without g_idx (a g_idx equal to
// c / group_size counts as none; any other is Unsupported), at most 65536 columns per group (the
// int32 accumulator's range; Unsupported beyond). InvalidArgument for inconsistent sizes or a code
// or zero point out of range.
std::shared_ptr<const W8a8Packed> pack_w8a8(const IntWeights& weights);

// x: [m, cols] fp32 row-major; y: [m, rows]; bias: rows values or null. InvalidArgument for a
// static scale that is not finite and positive or a static zero outside [-128, 127]. OpenMP
// threads over output rows, as kernels::matmul does.
void matmul_w8a8(const float* x, int64_t m, const W8a8Packed& w, const Int8Activations& act,
                 const float* bias, float* y);

namespace ref {
void matmul_w8a8(const float* x, int64_t m, const IntWeights& w, const Int8Activations& act,
                 const float* bias, float* y);

// x [m, k] → codes [m, k] and one scale per row (dynamic) or the static scale repeated.
void quantize_activations(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                          int8_t* codes, float* scales);
}  // namespace ref

namespace cpu {

// The CPU kernel families for matmul_w8a8; pack_w8a8 picks the best one this CPU supports.
enum class W8a8Kernel : uint8_t {
  SCALAR,       // portable C++, the plain row-major layout; runs any group size
  AVX2,         // AVX2 vpmaddubsw / vpmaddwd on 16-row tiles
  AVX512_VNNI,  // AVX-512 F/BW/VL/DQ + VNNI vpdpbusd on 16-row tiles
};

const char* w8a8_kernel_name(W8a8Kernel kernel);
bool w8a8_kernel_supported(W8a8Kernel kernel);  // by this CPU and OS
std::vector<W8a8Kernel> w8a8_supported_kernels();

// pack_w8a8 for a chosen kernel (tests, benchmarks). Unsupported when this CPU cannot run it, or
// for a tiled kernel when groups are not whole 64-byte blocks (group_size % 4 for 5..8 bits, % 8
// for 2..4 bits, unless one group spans the row).
std::shared_ptr<const W8a8Packed> pack_w8a8_with(W8a8Kernel kernel, const IntWeights& weights);
// The checks packing starts with (InvalidArgument naming the field), without packing.
void check_w8a8_weights(const IntWeights& weights);

// The activation quantization matmul_w8a8 runs with `kernel` (same arguments as the ref one).
void quantize_activations_with(W8a8Kernel kernel, const float* x, int64_t m, int64_t k,
                               const Int8Activations& act, int8_t* codes, float* scales);

}  // namespace cpu

}  // namespace lowbit::kernels
