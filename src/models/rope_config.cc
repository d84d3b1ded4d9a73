// RoPE fields of config.json, standardised as transformers 5 does (RotaryEmbeddingConfigMixin):
// the parameters come from rope_scaling (legacy) or rope_parameters (v5); rope_theta from inside
// that dict, else the top-level key, else the class default; rope_type from "rope_type" or the
// legacy "type"; original_max_position_embeddings for llama3/yarn/longrope from the top level
// (Phi3 always has one), else the dict, else max_position_embeddings.
#include <algorithm>
#include <cmath>

#include "lowbit/error.h"
#include "models/arch_registry.h"
#include "models/config_reader.h"
#include "models/model_config.h"
#include "models/strings.h"

namespace lowbit::models {

namespace {

struct RopeTypeName {
  const char* name;
  RopeType type;
};
constexpr RopeTypeName kRopeTypes[] = {
    {"default", RopeType::DEFAULT},   {"linear", RopeType::LINEAR},
    {"dynamic", RopeType::DYNAMIC},   {"yarn", RopeType::YARN},
    {"longrope", RopeType::LONGROPE}, {"llama3", RopeType::LLAMA3},
};

// The parameter dict: rope_scaling wins when it is a non-empty object (transformers:
// `rope_scaling or rope_parameters`).
std::optional<ConfigReader> rope_dict(const ConfigReader& json) {
  std::optional<ConfigReader> scaling = json.optional_object("rope_scaling");
  if (scaling && scaling->size() > 0) return scaling;
  return json.optional_object("rope_parameters");
}

void require_positive(const ConfigReader& where, const std::string& key, double value) {
  if (!(value > 0.0)) where.fail(key, cat("(", value, ") must be > 0"));
}

double required_factor(const ConfigReader& dict, const std::string& key, const std::string& type) {
  std::optional<double> value = dict.optional_number(key);
  if (!value) dict.fail(key, "is required for rope_type " + type);
  require_positive(dict, key, *value);
  return *value;
}

std::string read_type_name(const std::optional<ConfigReader>& dict, const ArchSpec& spec) {
  std::string name = "default";
  if (dict) {
    if (std::optional<std::string> t = dict->optional_string("rope_type")) {
      name = *t;
    } else if (std::optional<std::string> legacy = dict->optional_string("type")) {
      name = *legacy;
    }
  }
  for (const auto& [from, to] : spec.rope_type_aliases) {
    if (name == from) name = to;
  }
  return name;
}

RopeType resolve_type(const ConfigReader& where, const std::string& name, const ArchSpec& spec) {
  if (!spec.rope_types.empty() &&
      std::find(spec.rope_types.begin(), spec.rope_types.end(), name) == spec.rope_types.end()) {
    std::string allowed;
    for (const std::string& t : spec.rope_types) allowed += (allowed.empty() ? "" : ", ") + t;
    where.fail("rope_type",
               "'" + name + "' is not accepted by " + spec.architecture + " (" + allowed + ")");
  }
  for (const RopeTypeName& entry : kRopeTypes) {
    if (name == entry.name) return entry.type;
  }
  throw Unsupported(where.file() + ": " + where.path("rope_type") + " '" + name +
                    "' is not supported (default, linear, dynamic, yarn, longrope, llama3)");
}

// transformers 5 can nest one parameter dict per layer type; none of our architectures does.
void reject_per_layer_dicts(const ConfigReader& dict) {
  for (const char* layer_type : {"full_attention", "sliding_attention"}) {
    if (dict.has(layer_type)) {
      throw Unsupported(dict.file() + ": " + dict.path(layer_type) +
                        ": RoPE parameters per layer type are not supported");
    }
  }
}

int64_t read_original_max(const ConfigReader& json, const std::optional<ConfigReader>& dict,
                          const ArchSpec& spec, const ModelConfig& c) {
  int64_t value = c.max_position_embeddings;
  const char* key = "original_max_position_embeddings";
  if (json.has(key)) {
    value = *json.optional_int(key);
    if (value < 1) json.fail(key, "must be >= 1");
  } else if (spec.defaults.original_max_position_embeddings) {
    value = *spec.defaults.original_max_position_embeddings;
  } else if (dict && dict->has(key)) {
    value = *dict->optional_int(key);
    if (value < 1) dict->fail(key, "must be >= 1");
  }
  return value;
}

void read_longrope_lists(const ConfigReader& dict, const ModelConfig& c, RopeConfig& r) {
  const size_t expected = static_cast<size_t>(c.rotary_dim() / 2);
  for (const char* key : {"short_factor", "long_factor"}) {
    std::optional<std::vector<double>> list = dict.optional_number_list(key);
    if (!list) dict.fail(key, "is required for rope_type longrope");
    if (list->size() != expected) {
      dict.fail(key, cat("has ", list->size(), " values, expected rotary_dim / 2 = ", expected));
    }
    for (double v : *list) {
      if (!(v > 0.0)) dict.fail(key, "values must be > 0");
    }
    (std::string(key) == "short_factor" ? r.short_factor : r.long_factor) = *list;
  }
}

void read_scaling_fields(const ConfigReader& json, const ConfigReader& dict, const ArchSpec& spec,
                         ModelConfig& c) {
  RopeConfig& r = c.rope;
  const std::string& type = r.type_name;
  if (r.type == RopeType::LINEAR || r.type == RopeType::DYNAMIC || r.type == RopeType::LLAMA3) {
    r.factor = required_factor(dict, "factor", type);
  } else if (std::optional<double> factor = dict.optional_number("factor")) {
    require_positive(dict, "factor", *factor);
    r.factor = factor;
  }
  if (r.type == RopeType::LLAMA3) {
    r.low_freq_factor = required_factor(dict, "low_freq_factor", type);
    r.high_freq_factor = required_factor(dict, "high_freq_factor", type);
    if (!(r.high_freq_factor > r.low_freq_factor)) {
      dict.fail("high_freq_factor", "must be greater than low_freq_factor");
    }
  }
  if (r.type == RopeType::LLAMA3 || r.type == RopeType::YARN || r.type == RopeType::LONGROPE) {
    r.original_max_position_embeddings = read_original_max(json, dict, spec, c);
  }
  if (r.type == RopeType::YARN) {
    // transformers: `get("beta_fast") or 32`, so 0 also means the default.
    const double fast = dict.number_or("beta_fast", 0.0);
    const double slow = dict.number_or("beta_slow", 0.0);
    r.beta_fast = fast != 0.0 ? fast : 32.0;
    r.beta_slow = slow != 0.0 ? slow : 1.0;
    r.mscale = dict.optional_number("mscale");
    r.mscale_all_dim = dict.optional_number("mscale_all_dim");
    r.truncate = dict.bool_or("truncate", true);
  }
  if (r.type == RopeType::YARN || r.type == RopeType::LONGROPE) {
    r.attention_factor = dict.optional_number("attention_factor");
    if (r.attention_factor && *r.attention_factor < 0.0)
      dict.fail("attention_factor", "must be >= 0");
  }
  if (r.type == RopeType::LONGROPE) read_longrope_lists(dict, c, r);
}

}  // namespace

void read_rope_config(const ConfigReader& json, const ArchSpec& spec, ModelConfig& c) {
  RopeConfig& r = c.rope;
  std::optional<ConfigReader> dict = rope_dict(json);
  if (dict) reject_per_layer_dicts(*dict);
  if (dict && dict->has("rope_theta")) {
    r.theta = *dict->optional_number("rope_theta");
    require_positive(*dict, "rope_theta", r.theta);
  } else {
    r.theta = json.number_or("rope_theta", spec.defaults.rope_theta);
    require_positive(json, "rope_theta", r.theta);
  }
  r.partial_rotary_factor = 1.0;
  if (spec.partial_rotary) {
    if (dict && dict->has("partial_rotary_factor")) {
      r.partial_rotary_factor = *dict->optional_number("partial_rotary_factor");
    } else {
      r.partial_rotary_factor = json.number_or("partial_rotary_factor", 1.0);
    }
    if (!(r.partial_rotary_factor > 0.0 && r.partial_rotary_factor <= 1.0)) {
      json.fail("partial_rotary_factor", "must be in (0, 1]");
    }
  }
  const int64_t rotary = c.rotary_dim();
  if (rotary < 2 || rotary % 2 != 0) {
    json.fail("head_dim",
              cat("(", c.head_dim, ") with partial_rotary_factor ", r.partial_rotary_factor,
                  " gives ", rotary, " rotary dims; RoPE needs an even count >= 2"));
  }
  r.type_name = read_type_name(dict, spec);
  const ConfigReader& where = dict ? *dict : json;
  r.type = resolve_type(where, r.type_name, spec);
  if (r.type != RopeType::DEFAULT) read_scaling_fields(json, *dict, spec, c);
}

}  // namespace lowbit::models
