// The shared part of config.json parsing: architecture lookup, dimensions, token ids, validation.
// RoPE fields are read in rope_config.cc; per-architecture fields by each ArchSpec::configure.
#include "models/model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "lowbit/error.h"
#include "models/arch_registry.h"
#include "models/config_reader.h"
#include "models/strings.h"

namespace lowbit::models {

void read_rope_config(const ConfigReader& json, const ArchSpec& spec, ModelConfig& config);

namespace {

// Generous bounds: real models are far inside them; they keep a corrupt or hostile file from
// asking for absurd allocations.
constexpr int64_t kMaxHidden = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxVocab = int64_t{1} << 28;
constexpr int64_t kMaxPositions = int64_t{1} << 40;

void check_range(const ConfigReader& json, const std::string& key, int64_t value, int64_t lo,
                 int64_t hi) {
  if (value < lo || value > hi) {
    json.fail(key, cat("(", value, ") is out of range [", lo, ", ", hi, "]"));
  }
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

const ArchSpec& resolve_architecture(const ConfigReader& json) {
  const ArchRegistry& registry = ArchRegistry::instance();
  const std::string supported = "supported: " + join(registry.names());
  std::optional<std::vector<std::string>> architectures =
      json.optional_string_list("architectures");
  if (architectures && !architectures->empty()) {
    // transformers uses architectures[0]; a later entry we know is the same model's other head.
    for (const std::string& name : *architectures) {
      if (const ArchSpec* spec = registry.find(name)) return *spec;
    }
    throw Unsupported(json.file() + ": architectures[0] '" + (*architectures)[0] +
                      "' is not supported (" + supported + ")");
  }
  if (std::optional<std::string> model_type = json.optional_string("model_type")) {
    if (const ArchSpec* spec = registry.find_by_model_type(*model_type)) return *spec;
    throw Unsupported(json.file() + ": model_type '" + *model_type + "' is not supported (" +
                      supported + ")");
  }
  throw InvalidArgument(json.file() +
                        ": neither 'architectures' nor 'model_type' names the model architecture");
}

// An id field: the class default when the key is absent, none when null or negative (old
// conversions wrote pad_token_id -1 for "none").
std::optional<int32_t> read_token_id(const ConfigReader& json, const std::string& key,
                                     std::optional<int32_t> fallback) {
  if (!json.has_key(key)) return fallback;
  std::optional<int64_t> value = json.optional_int(key);
  if (!value || *value < 0) return std::nullopt;
  check_range(json, key, *value, 0, std::numeric_limits<int32_t>::max());
  return static_cast<int32_t>(*value);
}

std::vector<int32_t> read_token_ids(const ConfigReader& json, const std::string& key,
                                    std::optional<int32_t> fallback) {
  std::vector<int32_t> out;
  if (!json.has_key(key)) {
    if (fallback) out.push_back(*fallback);
    return out;
  }
  for (int64_t id : json.optional_int_list(key).value_or(std::vector<int64_t>{})) {
    if (id < 0) continue;
    check_range(json, key, id, 0, std::numeric_limits<int32_t>::max());
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

// An optional integer field whose JSON null means "derive it" and whose absence means the class
// default (if the class has one) or the same derivation.
int64_t read_defaulted(const ConfigReader& json, const std::string& key,
                       std::optional<int64_t> class_default, int64_t derived) {
  if (json.has(key)) return *json.optional_int(key);
  if (!json.has_key(key) && class_default) return *class_default;
  return derived;
}

void read_dimensions(const ConfigReader& json, const ArchSpec& spec, ModelConfig& c) {
  c.hidden_size = json.required_int("hidden_size");
  check_range(json, "hidden_size", c.hidden_size, 1, kMaxHidden);
  c.num_layers = json.required_int("num_hidden_layers");
  check_range(json, "num_hidden_layers", c.num_layers, 1, kMaxLayers);
  c.num_heads = json.required_int("num_attention_heads");
  check_range(json, "num_attention_heads", c.num_heads, 1, kMaxHeads);
  c.vocab_size = json.required_int("vocab_size");
  check_range(json, "vocab_size", c.vocab_size, 1, kMaxVocab);

  c.num_kv_heads =
      read_defaulted(json, "num_key_value_heads", spec.defaults.num_kv_heads, c.num_heads);
  check_range(json, "num_key_value_heads", c.num_kv_heads, 1, c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0) {
    json.fail("num_key_value_heads",
              cat("(", c.num_kv_heads, ") must divide num_attention_heads (", c.num_heads, ")"));
  }
  const int64_t derived_head_dim = c.hidden_size / c.num_heads;
  c.head_dim = read_defaulted(json, "head_dim", spec.defaults.head_dim, derived_head_dim);
  if (c.head_dim == 0 && derived_head_dim == 0) {
    json.fail("num_attention_heads", cat("(", c.num_heads, ") exceeds hidden_size (", c.hidden_size,
                                         "), so head_dim would be 0"));
  }
  check_range(json, "head_dim", c.head_dim, 1, 1 << 16);

  c.intermediate_size = json.int_or("intermediate_size", 0);
  check_range(json, "intermediate_size", c.intermediate_size, 0, kMaxHidden * 16);
  c.rms_norm_eps = json.number_or("rms_norm_eps", spec.defaults.rms_norm_eps);
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) {
    json.fail("rms_norm_eps", cat("(", c.rms_norm_eps, ") must be in (0, 1)"));
  }
  c.hidden_act = json.string_or("hidden_act", spec.defaults.hidden_act);
  c.activation = parse_activation(c.hidden_act, json.file() + ": hidden_act");
  c.tie_word_embeddings = json.bool_or("tie_word_embeddings", spec.defaults.tie_word_embeddings);
  c.max_position_embeddings =
      json.int_or("max_position_embeddings", spec.defaults.max_position_embeddings);
  check_range(json, "max_position_embeddings", c.max_position_embeddings, 1, kMaxPositions);
}

// Checks what the configure hooks produced and derives layer_is_moe.
void finish_layers(const ConfigReader& json, ModelConfig& c) {
  if (c.sliding_window.empty()) c.sliding_window.assign(static_cast<size_t>(c.num_layers), 0);
  c.layer_is_moe.assign(static_cast<size_t>(c.num_layers), false);
  if (c.num_experts > 0) {
    check_range(json, "num_experts", c.num_experts, 1, 1 << 16);
    check_range(json, "num_experts_per_tok", c.num_experts_per_tok, 1, c.num_experts);
    check_range(json, "moe_intermediate_size", c.moe_intermediate_size, 1, kMaxHidden * 16);
    check_range(json, "decoder_sparse_step", c.decoder_sparse_step, 1, kMaxLayers);
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      const bool dense_only = std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(),
                                        layer) != c.mlp_only_layers.end();
      c.layer_is_moe[static_cast<size_t>(layer)] =
          !dense_only && (layer + 1) % c.decoder_sparse_step == 0;
    }
  }
  const bool any_dense =
      std::find(c.layer_is_moe.begin(), c.layer_is_moe.end(), false) != c.layer_is_moe.end();
  if (any_dense && c.intermediate_size <= 0) {
    json.fail("intermediate_size", "is required (and > 0) for the dense MLP layers");
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError(path + ": read failed");
  return text.str();
}

}  // namespace

int64_t ModelConfig::rotary_dim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
}

kernels::Activation parse_activation(const std::string& name, const std::string& field) {
  if (name == "silu" || name == "swish") return kernels::Activation::SILU;
  // gelu_new and gelu_fast are the same tanh formula written differently (rounding-level changes).
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast") {
    return kernels::Activation::GELU_TANH;
  }
  if (name == "gelu") return kernels::Activation::GELU;
  if (name == "relu") return kernels::Activation::RELU;
  throw Unsupported(field + " '" + name +
                    "' is not supported (silu, swish, gelu, gelu_pytorch_tanh, gelu_new, "
                    "gelu_fast, relu)");
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& name_for_errors) {
  ConfigReader json = ConfigReader::parse(json_text, name_for_errors);
  const ArchSpec& spec = resolve_architecture(json);
  ModelConfig c;
  c.architecture = spec.architecture;
  c.model_type = json.string_or("model_type", spec.model_type);
  c.source = name_for_errors;
  read_dimensions(json, spec, c);
  read_rope_config(json, spec, c);
  c.bos_token_id = read_token_id(json, "bos_token_id", spec.defaults.bos_token_id);
  c.pad_token_id = read_token_id(json, "pad_token_id", spec.defaults.pad_token_id);
  c.eos_token_ids = read_token_ids(json, "eos_token_id", spec.defaults.eos_token_id);
  if (spec.configure != nullptr) spec.configure(json, c);
  finish_layers(json, c);
  const nlohmann::json* quant = json.raw("quantization_config");
  if (quant == nullptr) quant = json.raw("compression_config");
  if (quant != nullptr) {
    if (!quant->is_object()) json.fail("quantization_config", "must be an object");
    c.quantization_config_json = quant->dump();
  }
  return c;
}

void apply_generation_config(const std::string& json_text, const std::string& name_for_errors,
                             ModelConfig& config) {
  ConfigReader json = ConfigReader::parse(json_text, name_for_errors);
  GenerationConfig& g = config.generation;
  g.bos_token_id = read_token_id(json, "bos_token_id", config.bos_token_id);
  g.pad_token_id = read_token_id(json, "pad_token_id", config.pad_token_id);
  if (json.has_key("eos_token_id")) {
    g.eos_token_ids = read_token_ids(json, "eos_token_id", std::nullopt);
    config.eos_token_ids = g.eos_token_ids;
  } else {
    g.eos_token_ids = config.eos_token_ids;
  }
  g.do_sample = json.optional_bool("do_sample");
  g.temperature = json.optional_number("temperature");
  g.top_p = json.optional_number("top_p");
  g.top_k = json.optional_int("top_k");
  g.repetition_penalty = json.optional_number("repetition_penalty");
  g.max_new_tokens = json.optional_int("max_new_tokens");
  g.max_length = json.optional_int("max_length");
  if (g.temperature && *g.temperature < 0) json.fail("temperature", "must be >= 0");
  if (g.top_p && (*g.top_p < 0 || *g.top_p > 1)) json.fail("top_p", "must be in [0, 1]");
  if (g.top_k && *g.top_k < 0) json.fail("top_k", "must be >= 0");
  if (g.repetition_penalty && *g.repetition_penalty <= 0) {
    json.fail("repetition_penalty", "must be > 0");
  }
  if (g.max_new_tokens && *g.max_new_tokens < 0) json.fail("max_new_tokens", "must be >= 0");
  if (g.max_length && *g.max_length < 0) json.fail("max_length", "must be >= 0");
}

ModelConfig load_model_config(const std::string& dir) {
  const std::filesystem::path base(dir);
  const std::string config_path = (base / "config.json").string();
  ModelConfig config = parse_model_config(read_file(config_path), config_path);
  const std::filesystem::path generation_path = base / "generation_config.json";
  if (std::filesystem::exists(generation_path)) {
    apply_generation_config(read_file(generation_path.string()), generation_path.string(), config);
  } else {
    config.generation.bos_token_id = config.bos_token_id;
    config.generation.pad_token_id = config.pad_token_id;
    config.generation.eos_token_ids = config.eos_token_ids;
  }
  return config;
}

}  // namespace lowbit::models
