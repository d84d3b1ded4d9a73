// The quantizing step of a oneshot run (GPTQModifier or QuantizationModifier): layer by layer,
// calibrate (Hessians, static activation ranges, KV-cache ranges) → quantize every targeted
// Linear of the layer (GPTQ or round-to-nearest) → propagate the calibration states through the
// quantized layer, so that layer l+1 is calibrated on what the quantized layers 0..l produce.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lowbit/tensor.h"
#include "models/layer_runner.h"
#include "quant/pipeline/layer_state.h"
#include "quant/pipeline/module_plan.h"
#include "quant/pipeline/plan.h"
#include "quant/scheme/compressed_tensor.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {

// What the writer needs about one quantized Linear (its fake-quantized values are the Linear's
// weight in the model).
struct QuantizedModule {
  QParams qparams;
  // What the writer quantizes into codes: for round-to-nearest the weight before fake
  // quantization (as compressed-tensors does: quantizing the fake-quantized bf16 values again can
  // move int8 codes by one), empty for GPTQ (its output is the fake-quantized weight).
  Tensor original;
  // The module's on-disk tensors once computed (evaluation computes them before writing; the
  // writer must not quantize the round-tripped weight a second time).
  std::vector<NamedTensor> written;
  std::vector<int32_t> g_idx;  // actorder=group only
  // Calibrated input quantization (static inputs; NVFP4's dynamic groups under a global scale).
  float input_scale = 0.0f;         // static inputs: input_scale
  float input_zero_point = 0.0f;    // static asymmetric inputs: input_zero_point (an integer)
  float input_global_scale = 0.0f;  // tensor_group (NVFP4) inputs: input_global_scale
  double loss = 0.0;           // GPTQ's error (0 for RTN)
  double seconds = 0.0;
  int damping_retries = 0;
};

// k_scale / v_scale of one attention layer: 1 value (tensor) or one per KV head (attn_head).
struct KvScales {
  std::vector<float> k, v;
};

struct QuantizeOutcome {
  std::map<int, QuantizedModule> modules;  // by index into ModulePlan::linears
  std::map<int, KvScales> kv;              // by layer
  double forward_seconds = 0.0;            // layer forwards (calibrate + propagate), hooks included
  double hessian_seconds = 0.0;            // of which: Hessian accumulation in the hooks
  double algorithm_seconds = 0.0;          // GPTQ / RTN
};

// Per-layer progress callback: layer index, modules done in that layer.
using LayerDone = std::function<void(int layer, const QuantizeOutcome& outcome)>;

class CalibrationBackend;  // quant/pipeline/calibration_backend.h

struct QuantizeContext {
  models::Model* model;
  ModulePlan* plan;
  const QuantizeStep* step;
  DType compute;  // the model's float dtype: torch does the quantization math in it
  // Non-null: the calibration forwards and GPTQ of quantize_layer_on run there.
  CalibrationBackend* backend;
};

// True when the step needs calibration data (GPTQ, static activations, KV-cache scales).
bool needs_calibration(const QuantizeStep& step);

// Quantizes decoder layer `layer` with the cached states (calibrating, then propagating them).
void quantize_layer(const QuantizeContext& ctx, int layer, models::LayerRunner& runner,
                    ActivationCache& cache, QuantizeOutcome& outcome);

// Runs decoder layer `layer` over the cached states as llm-compressor's sequential pipeline
// propagates them: GPTQ's quantized weights, round-to-nearest modules' original weights, no input
// quantization (enabled only after the last layer).
void propagate_layer(const QuantizeContext& ctx, int layer, models::LayerRunner& runner,
                     ActivationCache& cache, const QuantizeOutcome& outcome);

// quantize_layer with ctx.backend doing the work: calibrate (the Hessians the layer's GPTQ
// modules need) → GPTQ of each module through the backend → propagate. The
// backend has accepted the plan (CalibrationBackend::unsupported): GPTQ steps without static
// activation ranges or KV-cache scales.
void quantize_layer_on(const QuantizeContext& ctx, int layer, QuantizeOutcome& outcome);

// Data-free round-to-nearest of the modules of `layer` (-1: lm_head), weights only.
void quantize_layer_rtn(const QuantizeContext& ctx, int layer, QuantizeOutcome& outcome);

// Puts a quantized module's input quantization on its Linear (emulated activations), so that
// evaluation sees the quantized forward; called for every module once all layers are quantized.
void enable_input_quantization(const QuantizeContext& ctx, int index, const QuantizedModule& m);

}  // namespace lowbit::quant
