// A linear layer y = x·Wᵀ (+ b). Either dense, its weight in its stored dtype (a zero-copy view of
// the checkpoint, or an owned tensor after calibration), or run by a quantization method
// (lowbit/quant_method.h) that owns the layer's quantized weights and picked its kernel. The bias,
// if any, was converted to fp32 once at load.
//
// Two optional extras serve quantization: an input observer (the calibration pipeline's forward
// hook: it sees every input batch, like a torch forward pre-hook) and an emulated input
// quantization (the scheme's activations fake-quantized before the matmul, so that a layer the
// quantize pipeline just quantized is evaluated as the checkpoint it writes will run).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/matmul.h"
#include "lowbit/quant_method.h"
#include "lowbit/tensor.h"
#include "quant/scheme/input_quant.h"

namespace lowbit::models {

class LinearInputObserver {
 public:
  virtual ~LinearInputObserver() = default;
  // x: [rows, in_features], the input the layer is about to multiply.
  virtual void observe(const float* x, int64_t rows, int64_t cols) = 0;
  // y: [rows, out_features], what it computed from that input (a forward hook; most observers
  // only need the input).
  virtual void observe_output(const float* /*y*/, int64_t /*rows*/, int64_t /*cols*/) {}
};

struct Linear {
  Tensor weight;            // [out_features, in_features], F32 / F16 / BF16; empty with a method
  std::vector<float> bias;  // out_features values, or empty
  std::shared_ptr<const quant::LinearMethod> method;  // quantized layers: runs apply()
  int64_t method_in = 0, method_out = 0;               // their shape
  std::optional<quant::InputQuant> input_quant;  // dense layers: activation fake quantization
  LinearInputObserver* observer = nullptr;      // not owned; set only while calibrating

  int64_t in_features() const { return method ? method_in : weight.dim(1); }
  int64_t out_features() const { return method ? method_out : weight.dim(0); }

  // x: [rows, in_features] → y: [rows, out_features], seen by the observer if one is set.
  void apply(const float* x, int64_t rows, float* y) const;

 private:
  void compute(const float* x, int64_t rows, float* y) const;
};

}  // namespace lowbit::models
