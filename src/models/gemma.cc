// Gemma (1): input embeddings × sqrt(hidden_size) (never the tied lm_head), RMSNorm weights stored
// zero-centred (the model multiplies by 1 + w), tanh-GELU gated MLP by default, head_dim 256 and
// tied embeddings by default, optional attention_bias. transformers 5 reads hidden_act (not the
// older hidden_activation key) for the MLP.
#include "models/arch_registry.h"
#include "models/config_helpers.h"

namespace lowbit::models {
namespace {

void configure_gemma(const ConfigReader& json, ModelConfig& c) {
  const bool bias = json.bool_or("attention_bias", false);
  c.attention_qkv_bias = bias;
  c.attention_out_bias = bias;
}

ArchSpec gemma() {
  ArchSpec s;
  s.architecture = "GemmaForCausalLM";
  s.model_type = "gemma";
  s.defaults.head_dim = 256;
  s.defaults.num_kv_heads = 16;
  s.defaults.rms_norm_eps = 1e-6;
  s.defaults.hidden_act = "gelu_pytorch_tanh";
  s.defaults.tie_word_embeddings = true;
  s.defaults.max_position_embeddings = 8192;
  s.defaults.bos_token_id = 2;
  s.defaults.eos_token_id = 1;
  s.defaults.pad_token_id = 0;
  s.configure = configure_gemma;
  s.norm_weight_offset = 1.0f;
  s.scale_embedding = true;
  return s;
}

LOWBIT_REGISTER_ARCH(gemma);

}  // namespace
}  // namespace lowbit::models
