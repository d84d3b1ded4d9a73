// Qwen2: Llama with biases on q/k/v (always; never on o_proj) and per-layer sliding windows that
// apply only with use_sliding_window (layers >= max_window_layers, or an explicit layer_types).
#include "models/arch_registry.h"
#include "models/config_helpers.h"

namespace lowbit::models {
namespace {

void configure_qwen2(const ConfigReader& json, ModelConfig& c) {
  c.attention_qkv_bias = true;
  c.attention_out_bias = false;
  set_qwen_windows(json, c);
}

ArchSpec qwen2() {
  ArchSpec s;
  s.architecture = "Qwen2ForCausalLM";
  s.model_type = "qwen2";
  s.defaults.num_kv_heads = 32;
  s.defaults.rms_norm_eps = 1e-6;
  s.defaults.max_position_embeddings = 32768;
  s.configure = configure_qwen2;
  return s;
}

LOWBIT_REGISTER_ARCH(qwen2);

}  // namespace
}  // namespace lowbit::models
