// Helpers the family files' ArchSpec::configure hooks share (internal to src/models).
#pragma once

#include <cstdint>

#include "models/config_reader.h"
#include "models/model_config.h"

namespace lowbit::models {

// sliding_window as transformers reads it: `absent_default` when the key is missing (Mistral's
// class default 4096), 0 (full attention) when null, else the positive value.
int64_t read_sliding_window(const ConfigReader& json, int64_t absent_default);

// Every layer gets `window` (0: none).
void set_uniform_window(ModelConfig& config, int64_t window);

// Qwen2/Qwen3: no window unless use_sliding_window; then layer i slides iff layer_types[i] is
// "sliding_attention" (explicit list) or, without a list, i >= max_window_layers (default 28).
void set_qwen_windows(const ConfigReader& json, ModelConfig& config);

// Reads num_experts / num_local_experts (whichever is present; `default_experts` otherwise) and
// num_experts_per_tok.
void read_moe_counts(const ConfigReader& json, int64_t default_experts, int64_t default_top_k,
                     ModelConfig& config);

}  // namespace lowbit::models
