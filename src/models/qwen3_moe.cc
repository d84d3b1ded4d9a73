// Qwen3-MoE: Qwen3 attention (q/k norms, optional attention_bias) and sparse MoE layers: layer l
// is sparse iff l is not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0, else a dense
// MLP of intermediate_size. Router softmax over all experts, top num_experts_per_tok, renormalised
// only with norm_topk_prob (default false). Sliding window on every layer, only with
// use_sliding_window.
#include "models/arch_registry.h"
#include "models/config_helpers.h"

namespace lowbit::models {
namespace {

void configure_qwen3_moe(const ConfigReader& json, ModelConfig& c) {
  const bool bias = json.bool_or("attention_bias", false);
  c.attention_qkv_bias = bias;
  c.attention_out_bias = bias;
  c.qk_norm = true;
  const bool sliding = json.bool_or("use_sliding_window", false);
  set_uniform_window(c, sliding ? read_sliding_window(json, 4096) : 0);
  read_moe_counts(json, 128, 8, c);
  c.moe_intermediate_size = json.int_or("moe_intermediate_size", 768);
  c.norm_topk_prob = json.bool_or("norm_topk_prob", false);
  c.decoder_sparse_step = json.int_or("decoder_sparse_step", 1);
  c.mlp_only_layers = json.optional_int_list("mlp_only_layers").value_or(std::vector<int64_t>{});
  if (!json.has("intermediate_size")) c.intermediate_size = 6144;  // class default (dense layers)
}

ArchSpec qwen3_moe() {
  ArchSpec s;
  s.architecture = "Qwen3MoeForCausalLM";
  s.model_type = "qwen3_moe";
  s.defaults.num_kv_heads = 4;
  s.defaults.rms_norm_eps = 1e-6;
  s.defaults.max_position_embeddings = 32768;
  s.configure = configure_qwen3_moe;
  return s;
}

LOWBIT_REGISTER_ARCH(qwen3_moe);

}  // namespace
}  // namespace lowbit::models
