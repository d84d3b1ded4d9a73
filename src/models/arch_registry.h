// The architecture registry: "LlamaForCausalLM" → ArchSpec. Each family file (llama.cc, qwen2.cc,
// ...) describes its architectures as data and registers them with one LOWBIT_REGISTER_ARCH line;
// the one generic decoder (decoder.h) and the shared config parser consume the spec, so adding an
// architecture touches one file. The registry is filled by static initialisers before main() and is
// read-only afterwards (lowbit_models is linked whole-archive so that those initialisers are kept).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/model_config.h"

namespace lowbit::models {

class ConfigReader;

// transformers' class defaults for fields a config.json may omit.
struct ArchDefaults {
  std::optional<int64_t> head_dim;      // absent: hidden_size / num_attention_heads
  std::optional<int64_t> num_kv_heads;  // absent: num_attention_heads
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 2048;
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;
  std::optional<int32_t> pad_token_id;
  // Phi3 has a class attribute (4096) that overrides the value inside rope_parameters.
  std::optional<int64_t> original_max_position_embeddings;
};

// Checkpoint tensor names. Per-layer names are relative to "<layer_prefix><N>." and, for
// projections, exclude the ".weight" / ".bias" suffix.
struct ArchTensorNames {
  std::string embed = "model.embed_tokens.weight";
  std::string final_norm = "model.norm.weight";
  std::string lm_head = "lm_head.weight";
  std::string layer_prefix = "model.layers.";
  std::string input_norm = "input_layernorm.weight";
  std::string post_attention_norm = "post_attention_layernorm.weight";
  std::string q_proj = "self_attn.q_proj";
  std::string k_proj = "self_attn.k_proj";
  std::string v_proj = "self_attn.v_proj";
  std::string o_proj = "self_attn.o_proj";
  std::string qkv_proj;  // non-empty: one fused [q | k | v] projection (Phi3)
  std::string q_norm = "self_attn.q_norm.weight";
  std::string k_norm = "self_attn.k_norm.weight";
  std::string gate_proj = "mlp.gate_proj";
  std::string up_proj = "mlp.up_proj";
  std::string down_proj = "mlp.down_proj";
  std::string gate_up_proj;  // non-empty: one fused [gate | up] projection (Phi3)
  // MoE: the router, then per-expert projections "<experts><J>.<expert_gate>" ...
  std::vector<std::string> router = {"mlp.gate.weight"};  // first present name wins
  std::string experts = "mlp.experts.";
  std::string expert_gate = "gate_proj";
  std::string expert_up = "up_proj";
  std::string expert_down = "down_proj";
  // ... or transformers 5's fused 3-D tensors [E, 2I, hidden] and [E, hidden, I].
  std::string experts_gate_up = "mlp.experts.gate_up_proj";
  std::string experts_down = "mlp.experts.down_proj";
};

struct ArchSpec {
  std::string architecture;  // the config.json "architectures" entry
  std::string model_type;    // config.json "model_type", used when "architectures" is absent
  ArchDefaults defaults;
  // Reads what only this architecture has (biases, sliding windows, MoE fields, RoPE renames)
  // after the shared fields are parsed and before validation. May be null.
  void (*configure)(const ConfigReader& json, ModelConfig& config) = nullptr;
  ArchTensorNames names;
  float norm_weight_offset = 0.0f;  // Gemma stores RMSNorm weights as w - 1: add 1 at load
  bool scale_embedding = false;     // Gemma: input embeddings × sqrt(hidden_size)
  bool partial_rotary = false;      // honours partial_rotary_factor (Phi3); others ignore it
  // Legacy RoPE type names renamed before use (Phi3: "su", "yarn" → "longrope"), and the types the
  // architecture accepts (empty: all that lowbit implements).
  std::vector<std::pair<std::string, std::string>> rope_type_aliases;
  std::vector<std::string> rope_types;
  // Phi3's generate() drops the KV cache when a longrope sequence first grows past
  // original_max_position_embeddings, so that every key is re-rotated with the long factors.
  bool reprefill_past_original_max = false;
};

class ArchRegistry {
 public:
  static ArchRegistry& instance();

  void add(ArchSpec spec);  // Internal error on a duplicate name
  const ArchSpec* find(const std::string& architecture) const;
  const ArchSpec* find_by_model_type(const std::string& model_type) const;
  std::vector<std::string> names() const;  // sorted

 private:
  std::vector<ArchSpec> specs_;
};

struct ArchRegistrar {
  explicit ArchRegistrar(ArchSpec (*make_spec)()) { ArchRegistry::instance().add(make_spec()); }
};

#define LOWBIT_ARCH_CONCAT_INNER(a, b) a##b
#define LOWBIT_ARCH_CONCAT(a, b) LOWBIT_ARCH_CONCAT_INNER(a, b)
// Registers the ArchSpec returned by `make_spec` (a function ArchSpec()) at static-init time.
#define LOWBIT_REGISTER_ARCH(make_spec)                                                   \
  static const ::lowbit::models::ArchRegistrar LOWBIT_ARCH_CONCAT(lowbit_arch_registrar_, \
                                                                  __LINE__)(make_spec)

}  // namespace lowbit::models
