// Mixtral: Mistral attention (no biases, optional sliding window on every layer, default null) and
// a sparse MoE in every layer: softmax router over num_local_experts, top num_experts_per_tok,
// always renormalised; experts are SwiGLU MLPs named w1 (gate), w3 (up), w2 (down) under
// block_sparse_moe (or transformers 5's fused mlp.experts.* tensors).
#include "models/arch_registry.h"
#include "models/config_helpers.h"

namespace lowbit::models {
namespace {

void configure_mixtral(const ConfigReader& json, ModelConfig& c) {
  set_uniform_window(c, read_sliding_window(json, 0));
  read_moe_counts(json, 8, 2, c);
  if (c.num_experts < 1) json.fail("num_local_experts", "must be >= 1 for Mixtral");
  if (c.intermediate_size < 1) json.fail("intermediate_size", "is required (the expert width)");
  c.moe_intermediate_size = c.intermediate_size;
  c.norm_topk_prob = true;
  c.decoder_sparse_step = 1;
}

ArchSpec mixtral() {
  ArchSpec s;
  s.architecture = "MixtralForCausalLM";
  s.model_type = "mixtral";
  s.defaults.num_kv_heads = 8;
  s.defaults.rms_norm_eps = 1e-5;
  s.defaults.rope_theta = 1e6;
  s.defaults.max_position_embeddings = 131072;
  s.defaults.bos_token_id = 1;
  s.defaults.eos_token_id = 2;
  s.configure = configure_mixtral;
  s.names.router = {"block_sparse_moe.gate.weight", "mlp.gate.weight"};
  s.names.experts = "block_sparse_moe.experts.";
  s.names.expert_gate = "w1";
  s.names.expert_up = "w3";
  s.names.expert_down = "w2";
  return s;
}

LOWBIT_REGISTER_ARCH(mixtral);

}  // namespace
}  // namespace lowbit::models
