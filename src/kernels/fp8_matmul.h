// FP8 (E4M3) weight-only matmul: y = x · dequant(W)ᵀ with fp32 activations, the e4m3 codes decoded
// to fp32 in registers and scaled per tensor, channel, group or 128x128 block (Fp8Weights). This is
// how FP8 checkpoints (W8A8-FP8 and FP8 weight-only alike) run on CPUs, which have no FP8 dot
// product: the weights stay 1 byte each, the activations stay fp32. Tested against ref::matmul_fp8.
//
// Accuracy contract: every kernel decodes e4m3 exactly (subnormals and NaN codes included) and
// accumulates in fp32. Ref and the blocked paths scale each weight, fp32(e4m3(code) · scale); the
// AVX-512 streaming path scales each scale block's partial sum instead. Either way the result is an
// fp32 evaluation of the same sum, within γ(k+2)·(Σ|x·w| + |bias|) of the exact value (u = 2^-24).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant_weights.h"

namespace lowbit::kernels {

class Fp8Packed {
 public:
  virtual ~Fp8Packed() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  virtual const char* kernel_name() const = 0;
  virtual size_t bytes() const = 0;
};

// InvalidArgument for inconsistent sizes (codes, scales, block shape).
std::shared_ptr<const Fp8Packed> pack_fp8(const Fp8Weights& weights);

// x: [m, cols] fp32 row-major; y: [m, rows]; bias: rows values or null. OpenMP threads over output
// rows, as kernels::matmul does.
void matmul_fp8(const float* x, int64_t m, const Fp8Packed& w, const float* bias, float* y);

namespace ref {
void matmul_fp8(const float* x, int64_t m, const Fp8Weights& w, const float* bias, float* y);
}  // namespace ref

namespace cpu {

// The CPU kernel families for matmul_fp8; pack_fp8 picks the best one this CPU supports.
enum class Fp8Kernel : uint8_t {
  SCALAR,  // portable C++ on the plain row-major codes
  AVX2,    // AVX2 + FMA + F16C on 16-row tiles
  AVX512,  // AVX-512 F/BW/VL/DQ on 16-row tiles
};

const char* fp8_kernel_name(Fp8Kernel kernel);
bool fp8_kernel_supported(Fp8Kernel kernel);  // by this CPU and OS
std::vector<Fp8Kernel> fp8_supported_kernels();

// pack_fp8 for a chosen kernel; Unsupported when this CPU cannot run it.
std::shared_ptr<const Fp8Packed> pack_fp8_with(Fp8Kernel kernel, const Fp8Weights& weights);
// The checks packing starts with (InvalidArgument naming the field), without packing.
void check_fp8_weights(const Fp8Weights& weights);

// matmul_fp8 with the path forced: STREAMING decodes weights in registers for every group of x
// rows, BLOCKED decodes each block of W once into an fp32 panel reused by all rows of x (AUTO
// picks by m). The scalar kernel has one path and ignores the choice.
void matmul_fp8_with(MatmulPath path, const float* x, int64_t m, const Fp8Packed& w,
                     const float* bias, float* y);

}  // namespace cpu

}  // namespace lowbit::kernels
