// Phi3: fused projections (self_attn.qkv_proj = [q | k | v], mlp.gate_up_proj = [gate | up]),
// partial rotary embedding (partial_rotary_factor), RoPE types default and longrope only (legacy
// "su" and "yarn" mean longrope), original_max_position_embeddings taken from the top level (class
// default 4096), optional sliding window on every layer, no biases. Its generate() re-runs the
// whole sequence when a longrope model first passes original_max_position_embeddings.
#include "models/arch_registry.h"
#include "models/config_helpers.h"

namespace lowbit::models {
namespace {

void configure_phi3(const ConfigReader& json, ModelConfig& c) {
  set_uniform_window(c, read_sliding_window(json, 0));
}

ArchSpec phi3() {
  ArchSpec s;
  s.architecture = "Phi3ForCausalLM";
  s.model_type = "phi3";
  s.defaults.rms_norm_eps = 1e-5;
  s.defaults.max_position_embeddings = 4096;
  s.defaults.original_max_position_embeddings = 4096;
  s.defaults.bos_token_id = 1;
  s.defaults.eos_token_id = 32000;
  s.defaults.pad_token_id = 32000;
  s.configure = configure_phi3;
  s.names.qkv_proj = "self_attn.qkv_proj";
  s.names.gate_up_proj = "mlp.gate_up_proj";
  s.partial_rotary = true;
  s.rope_type_aliases = {{"su", "longrope"}, {"yarn", "longrope"}};
  s.rope_types = {"default", "longrope"};
  s.reprefill_past_original_max = true;
  return s;
}

LOWBIT_REGISTER_ARCH(phi3);

}  // namespace
}  // namespace lowbit::models
