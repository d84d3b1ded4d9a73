// The runtime half every quantized Linear shares, whatever its checkpoint format: the weights in a
// canonical form (kernels/quant_weights.h), the kernel chosen for them, and apply(). Format files
// (compressed_tensors.cc, gptq.cc, awq.cc, fp8.cc, online.cc) only declare and decode tensors, then
// call one of the finish_* functions here from process_weights_after_loading.
//
// Kernel chains (first that can run, unless LayerInfo::backend forces one):
//   int weights, fp32 activations   → "wna16"  → "dequant"
//   int weights, int8 activations   → "w8a8"   → "dequant"
//   fp8 weights (activations fake-quantized when the scheme quantizes them) → "fp8" → "dequant"
//   anything else (fp4, mx, ...)    → "dequant"
// "dequant" is the reference: the weight dequantized to the model dtype once at load, the dense
// matmul, activations fake-quantized in fp32 exactly as the quantizer's evaluation does.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/quant_weights.h"
#include "lowbit/quant_method.h"
#include "quant/scheme/input_quant.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// The kernel families, for KernelSpec lists in method descriptions.
std::vector<KernelSpec> int_weight_kernels();    // wna16, w8a8, dequant
std::vector<KernelSpec> fp8_weight_kernels();    // fp8, dequant
std::vector<KernelSpec> dequant_kernels();       // dequant

// A LinearMethod whose process_weights_after_loading ends in one of these.
class KernelLinear : public LinearMethod {
 public:
  KernelLinear();
  ~KernelLinear() override;

  void apply(const float* x, int64_t rows, const float* bias, float* y) const override;
  std::string kernel_name() const override;
  Tensor dequantized_weight() const override;
  size_t weight_bytes() const override;

  // The layer's weights in the canonical form, for a backend that repacks them for another device
  // (the GPU backend, src/gpu). Kept only for layers loaded while set_keep_canonical_weights(true)
  // is in effect, since the copy costs host memory (a byte per weight plus the scales); null
  // otherwise, and null for schemes that reach the dequant kernel directly (fp4, mx, ...).
  static void set_keep_canonical_weights(bool keep);
  const kernels::IntWeights* int_weights() const;
  const kernels::Fp8Weights* fp8_weights() const;
  // How the scheme quantizes the layer's input (none for weight-only schemes).
  const std::optional<InputQuant>& input_quant() const;

 protected:
  // fake_quantized_inputs: the caller puts its inputs on a quantization grid itself (LLM.int8()),
  // so the layer keeps the kernels that compute x in fp32, as for emulated input quantization.
  void finish_int(const LayerParams& layer, kernels::IntWeights weights,
                  std::optional<InputQuant> input, bool fake_quantized_inputs = false);
  void finish_fp8(const LayerParams& layer, kernels::Fp8Weights weights,
                  std::optional<InputQuant> input);
  // values: the dequantized weight [out, in] fp32 (rounded as the format's decompressor does).
  void finish_dequant(const LayerParams& layer, const std::vector<float>& values,
                      std::optional<InputQuant> input);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lowbit::quant
