// Qwen3: Llama plus RMSNorm over each head of q and k (q_norm / k_norm, before RoPE), head_dim
// explicit (class default 128, independent of hidden / heads), optional attention_bias, and Qwen2's
// sliding-window rules.
#include "models/arch_registry.h"
#include "models/config_helpers.h"

namespace lowbit::models {
namespace {

void configure_qwen3(const ConfigReader& json, ModelConfig& c) {
  const bool bias = json.bool_or("attention_bias", false);
  c.attention_qkv_bias = bias;
  c.attention_out_bias = bias;
  c.qk_norm = true;
  set_qwen_windows(json, c);
}

ArchSpec qwen3() {
  ArchSpec s;
  s.architecture = "Qwen3ForCausalLM";
  s.model_type = "qwen3";
  s.defaults.head_dim = 128;
  s.defaults.num_kv_heads = 32;
  s.defaults.rms_norm_eps = 1e-6;
  s.defaults.max_position_embeddings = 32768;
  s.configure = configure_qwen3;
  return s;
}

LOWBIT_REGISTER_ARCH(qwen3);

}  // namespace
}  // namespace lowbit::models
