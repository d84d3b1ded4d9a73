// The Linear modules of a loaded model under their Hugging Face names, and which quantization
// scheme (config group) applies to each: compressed-tensors' matching over targets and ignore.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

enum class LinearRole { Q, K, V, O, Gate, Up, Down, LmHead };

struct PlannedLinear {
  std::string name;          // "model.layers.3.self_attn.q_proj"
  int layer = -1;            // decoder layer, -1 for lm_head
  LinearRole role;
  models::Linear* linear;    // inside the model's mutable weights
  int group = -1;            // index into config_groups, -1: left unquantized
};

struct ModulePlan {
  std::vector<PlannedLinear> linears;  // in model order (layer by layer, then lm_head)
  // The checkpoint ties lm_head to the embedding and a config group targets lm_head: as
  // llm-compressor does (untie_word_embeddings), lm_head becomes a copy of the embedding that is
  // quantized on its own, and the output says tie_word_embeddings false.
  bool untied_lm_head = false;
  // The Linears of one decoder layer (indices into linears).
  std::vector<int> of_layer(int layer) const;
};

// Input activations whose checkpoint needs a number calibrated over the data: a static scale
// (input_scale), or the global scale of NVFP4's dynamic local groups (input_global_scale).
bool calibrated_inputs(const QuantScheme& s);

// Builds the plan and resolves groups. Throws InvalidArgument when a target or ignore entry
// matches no module, and Unsupported for layouts the pipeline cannot calibrate yet (fused q/k/v
// or gate/up projections, mixture-of-experts layers). Logs a warning if lm_head is quantized;
// a tied lm_head that a group targets is untied (ModulePlan::untied_lm_head).
ModulePlan plan_modules(models::Model& model,
                        const std::vector<std::pair<std::string, QuantScheme>>& groups,
                        const std::vector<std::string>& ignore);

}  // namespace lowbit::quant
