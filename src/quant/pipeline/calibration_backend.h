// Where the quantizing pass does its heavy work for calibrated GPTQ: the decoder layer's forward
// over every calibration sample (to collect the Hessians of its Linears' inputs, then to propagate
// the hidden states through the quantized layer) and GPTQ's column loop. Without a backend the
// pass does all of it on the CPU (quantize_pass.cc); `lowbit quantize --device cuda` plugs in the
// GPU's (src/quant/gpu). Everything else — the plan, qparams bookkeeping, the writer, resuming —
// stays the pipeline's, so both paths write the same kind of checkpoint.
//
// The model stays the truth: the backend reads a layer's weights from the models::Model each time
// it runs the layer, so after GPTQ has stored the fake-quantized weights (and the Linears their
// input quantization) propagate() runs the quantized layer, as llm-compressor's sequential
// pipeline does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowbit/dtype.h"
#include "models/model.h"
#include "quant/algos/gptq.h"
#include "quant/pipeline/calibration_data.h"
#include "quant/pipeline/layer_state.h"
#include "quant/pipeline/module_plan.h"
#include "quant/pipeline/plan.h"

namespace lowbit::quant {

class CalibrationBackend {
 public:
  virtual ~CalibrationBackend() = default;

  // Short name for logs and the report ("cuda").
  virtual std::string name() const = 0;

  // Empty when this backend can run `plan` on `model`; else why not (an Unsupported message that
  // names the step, scheme or architecture). Checked before any work is done.
  virtual std::string unsupported(const models::Model& model, const OneshotPlan& plan) const = 0;

  // Embeds the samples; the hidden states at the current layer boundary live in the backend from
  // now on (layer 0's inputs).
  virtual void begin(const models::Model& model, const CalibrationSet& samples) = 0;

  // Runs decoder layer `layer` as the model holds it over every sample without advancing the
  // states, and keeps the Hessian H = 2/n_samples · Σ x xᵀ of each requested input (LinearRole::Q
  // for q/k/v's shared input, O, Gate for gate/up's, Down), replacing those of the previous layer.
  virtual void calibrate(int layer, const std::vector<LinearRole>& inputs) = 0;

  // gptq_quantize's contract (w in and out, fake-quantized), with the Hessian of `input` kept by
  // the last calibrate().
  virtual GptqResult gptq(std::vector<float>& w, int64_t rows, int64_t cols, LinearRole input,
                          const QuantArgs& args, const GptqOptions& options, DType compute) = 0;

  // GPTQ of `linear`'s weight in place, with the Hessian of `input`: gptq() on
  // weight_to_f32(linear), then set_weight(linear, w, compute) — this default. A backend may move
  // the weight in its stored dtype and convert on the device, storing the same bits.
  virtual GptqResult gptq_linear(models::Linear& linear, LinearRole input, const QuantArgs& args,
                                 const GptqOptions& options, DType compute) {
    std::vector<float> w = weight_to_f32(linear);
    GptqResult r = gptq(w, linear.out_features(), linear.in_features(), input, args, options,
                        compute);
    set_weight(linear, w, compute);
    return r;
  }

  // Advances the states through `layer` as the model now holds it.
  virtual void propagate(int layer) = 0;

  // Seconds spent so far in forwards (calibrate + propagate) and in Hessian accumulation (part of
  // the forwards), for the report.
  virtual double forward_seconds() const = 0;
  virtual double hessian_seconds() const = 0;
};

}  // namespace lowbit::quant
