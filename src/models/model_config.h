// ModelConfig: what lowbit needs from a Hugging Face config.json (+ generation_config.json) to run
// one of the supported decoder-only architectures, with transformers' per-class defaults applied.
// Parsing is shared; what differs per architecture (defaults, biases, sliding windows, MoE layout,
// RoPE restrictions) comes from the architecture's ArchSpec (arch_registry.h), registered from its
// family file. Errors are InvalidArgument (bad or inconsistent values) or Unsupported (a valid
// config that lowbit does not implement), naming the file and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace lowbit::models {

enum class RopeType : uint8_t { DEFAULT, LINEAR, DYNAMIC, YARN, LONGROPE, LLAMA3 };

// RoPE parameters after transformers' standardisation (rope_parameters, or legacy rope_theta +
// rope_scaling): see docs MODELS.md §1 and §3 for the meaning of each field.
struct RopeConfig {
  RopeType type = RopeType::DEFAULT;
  std::string type_name = "default";  // as written (after legacy renames)
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  std::optional<double>
      factor;  // linear, dynamic, llama3: required; yarn, longrope: M / O if absent
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn, longrope (O)
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  std::optional<double> mscale;                  // yarn
  std::optional<double> mscale_all_dim;          // yarn
  std::optional<double> attention_factor;        // yarn, longrope: derived from factor if absent
  bool truncate = true;                          // yarn
  std::vector<double> short_factor;              // longrope, rotary_dim / 2 values
  std::vector<double> long_factor;               // longrope
};

// Generation defaults from generation_config.json (absent keys stay empty).
struct GenerationConfig {
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  std::vector<int32_t> eos_token_ids;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::optional<int64_t> max_length;
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM"
  std::string model_type;    // "llama"
  std::string source;        // the config file, for messages

  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;  // dense MLP width (0 when every layer is MoE and none is given)
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_qkv_bias = false;
  bool attention_out_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;  // Qwen3: RMSNorm over each head of q and k before RoPE
  std::string hidden_act = "silu";
  kernels::Activation activation = kernels::Activation::SILU;
  std::vector<int64_t> sliding_window;  // per layer; 0 = full causal attention

  // Mixture of experts (num_experts == 0: dense model).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  std::vector<bool> layer_is_moe;  // per layer, derived from the fields above

  RopeConfig rope;
  int64_t max_position_embeddings = 0;

  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  // Effective end-of-sequence ids: generation_config.json's eos_token_id when it has one, else
  // config.json's (possibly empty: Qwen fixtures never stop early).
  std::vector<int32_t> eos_token_ids;
  GenerationConfig generation;

  // config.json's `quantization_config` (or the older `compression_config`) as JSON text, empty
  // when the checkpoint is not quantized; the quantization code parses it.
  std::string quantization_config_json;

  // Dimensions RoPE rotates in each head: int(head_dim * partial_rotary_factor).
  int64_t rotary_dim() const;
};

// Reads `dir`/config.json and, if present, `dir`/generation_config.json.
ModelConfig load_model_config(const std::string& dir);

// Parses config.json text; `name_for_errors` starts every message ("config.json", a path, ...).
ModelConfig parse_model_config(const std::string& json_text, const std::string& name_for_errors);

// Applies generation_config.json text to `config` (eos ids override, sampling defaults).
void apply_generation_config(const std::string& json_text, const std::string& name_for_errors,
                             ModelConfig& config);

// "silu" → SILU, ...; Unsupported naming `field` for anything else.
kernels::Activation parse_activation(const std::string& name, const std::string& field);

}  // namespace lowbit::models
