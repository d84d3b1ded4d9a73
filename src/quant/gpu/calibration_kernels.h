// The device kernel the GPU calibration forward needs beyond the GPU model's: the emulated dynamic
// input quantization a quantized Linear applies before its product (models::Linear::apply →
// quant::fake_quantize_activations), on bf16 activations. Internal to src/quant/gpu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::quant::gpu {

// One dynamic activation quantization, already resolved from its QuantArgs on the host
// (calibration_cuda.cc: token strategy → group = the row width).
struct ActFakeQuant {
  int64_t group = 0;       // columns sharing one scale (divides the row width)
  bool is_float = false;   // fp8 e4m3 codes, else integers
  bool symmetric = true;
  float qmin = -128.0f, qmax = 127.0f;
  float bit_range = 255.0f;  // qmax - qmin, as QuantArgs computes it (in double, then float)
  bool operator==(const ActFakeQuant&) const = default;
};

// y[r, g·group .. (g+1)·group) = bf16(fake_quantize(x[r, same])) with one scale (and zero point)
// per (row, group) from its min and max: compressed-tensors' calculate_qparams / _quantize /
// _dequantize in fp32, operation by operation as quant/scheme/qparams.cc does them (IEEE
// divisions, no fused multiply-adds), so each value equals the CPU's for the same fp32 input; only
// the final rounding to bf16 is the GPU path's own (its activations are bf16). x and y: bf16 bits
// [rows, cols], y must not overlap x. Asynchronous on `stream`.
void fake_quantize_activations_bf16(const uint16_t* x, int64_t rows, int64_t cols,
                                    const ActFakeQuant& q, uint16_t* y, cudaStream_t stream);

}  // namespace lowbit::quant::gpu
