// The transform steps of a oneshot run, one decoder layer at a time: SmoothQuant and AWQ compute
// per-channel scales from the calibration states, fold them into the balance Linears' columns and
// the smooth layer (RMSNorm weight or the previous Linear's rows), and then propagate the states
// through the (floating-point, still unquantized) layer. Mappings are the Llama family's:
//   input_layernorm → q, k, v;  post_attention_layernorm → gate, up;
//   AWQ also: v_proj → o_proj (when v's outputs are o's inputs, i.e. no GQA); up_proj → down_proj.
#pragma once

#include "models/layer_runner.h"
#include "quant/pipeline/layer_state.h"
#include "quant/pipeline/plan.h"

namespace lowbit::quant {

struct SmoothingContext {
  models::Model* model;
  DType compute;  // the model's dtype: smoothed weights are rounded to it, as torch stores them
};

// Throws Unsupported for architectures whose norms cannot absorb a scale (Gemma's 1 + w).
void check_smoothable(const models::Model& model);

void smoothquant_layer(const SmoothingContext& ctx, const SmoothQuantStep& step, int layer,
                       models::LayerRunner& runner, ActivationCache& cache);

// weight_args: the scheme the following quantize step applies to these Linears.
void awq_layer(const SmoothingContext& ctx, const AwqStep& step, const QuantArgs& weight_args,
               int layer, models::LayerRunner& runner, ActivationCache& cache);

}  // namespace lowbit::quant
