#include "models/config_helpers.h"

#include "lowbit/error.h"
#include "models/strings.h"

namespace lowbit::models {

int64_t read_sliding_window(const ConfigReader& json, int64_t absent_default) {
  if (!json.has_key("sliding_window")) return absent_default;
  std::optional<int64_t> window = json.optional_int("sliding_window");
  if (!window) return 0;
  if (*window < 1) {
    json.fail("sliding_window", cat("(", *window, ") must be >= 1 or null"));
  }
  return *window;
}

void set_uniform_window(ModelConfig& config, int64_t window) {
  config.sliding_window.assign(static_cast<size_t>(config.num_layers), window);
}

void set_qwen_windows(const ConfigReader& json, ModelConfig& config) {
  const bool enabled = json.bool_or("use_sliding_window", false);
  // transformers forces sliding_window to None unless use_sliding_window.
  const int64_t window = enabled ? read_sliding_window(json, 4096) : 0;
  config.sliding_window.assign(static_cast<size_t>(config.num_layers), 0);
  std::optional<std::vector<std::string>> layer_types = json.optional_string_list("layer_types");
  if (layer_types) {
    if (static_cast<int64_t>(layer_types->size()) != config.num_layers) {
      json.fail("layer_types",
                cat("has ", layer_types->size(), " entries, expected num_hidden_layers (",
                    config.num_layers, ")"));
    }
    for (size_t i = 0; i < layer_types->size(); ++i) {
      const std::string& type = (*layer_types)[i];
      if (type == "sliding_attention") {
        config.sliding_window[i] = window;
      } else if (type != "full_attention") {
        json.fail("layer_types",
                  cat("[", i, "] '", type, "' is not full_attention or sliding_attention"));
      }
    }
    return;
  }
  const int64_t max_window_layers = json.int_or("max_window_layers", 28);
  for (int64_t i = max_window_layers < 0 ? 0 : max_window_layers; i < config.num_layers; ++i) {
    config.sliding_window[static_cast<size_t>(i)] = window;
  }
}

void read_moe_counts(const ConfigReader& json, int64_t default_experts, int64_t default_top_k,
                     ModelConfig& config) {
  // transformers maps num_experts onto num_local_experts (attribute_map): either key sets it.
  if (json.has("num_local_experts")) {
    config.num_experts = *json.optional_int("num_local_experts");
  } else {
    config.num_experts = json.int_or("num_experts", default_experts);
  }
  config.num_experts_per_tok = json.int_or("num_experts_per_tok", default_top_k);
  if (config.num_experts < 0) {
    json.fail("num_experts", cat("(", config.num_experts, ") must be >= 0"));
  }
}

}  // namespace lowbit::models
