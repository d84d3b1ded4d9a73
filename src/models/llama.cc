// Llama and Mistral. Llama: the reference decoder (SwiGLU, Llama-style RMSNorm, half-split RoPE),
// optional biases on all attention projections (attention_bias) and on the MLP (mlp_bias).
// Mistral: Llama without biases, with a sliding window on every layer (4096 when config.json
// omits the key, none when it is null).
#include "models/arch_registry.h"
#include "models/config_helpers.h"

namespace lowbit::models {
namespace {

void configure_llama(const ConfigReader& json, ModelConfig& c) {
  const bool bias = json.bool_or("attention_bias", false);
  c.attention_qkv_bias = bias;
  c.attention_out_bias = bias;
  c.mlp_bias = json.bool_or("mlp_bias", false);
}

ArchSpec llama() {
  ArchSpec s;
  s.architecture = "LlamaForCausalLM";
  s.model_type = "llama";
  s.defaults.rms_norm_eps = 1e-6;
  s.defaults.max_position_embeddings = 2048;
  s.defaults.bos_token_id = 1;
  s.defaults.eos_token_id = 2;
  s.configure = configure_llama;
  return s;
}

void configure_mistral(const ConfigReader& json, ModelConfig& c) {
  set_uniform_window(c, read_sliding_window(json, 4096));
}

ArchSpec mistral() {
  ArchSpec s;
  s.architecture = "MistralForCausalLM";
  s.model_type = "mistral";
  s.defaults.num_kv_heads = 8;
  s.defaults.rms_norm_eps = 1e-6;
  s.defaults.max_position_embeddings = 131072;
  s.defaults.bos_token_id = 1;
  s.defaults.eos_token_id = 2;
  s.configure = configure_mistral;
  return s;
}

LOWBIT_REGISTER_ARCH(llama);
LOWBIT_REGISTER_ARCH(mistral);

}  // namespace
}  // namespace lowbit::models
