// recipe_to_yaml: the layout of llm-compressor's Recipe.yaml() (stages → groups → modifiers, every
// field that is not null, short lists inline), written so that PyYAML's safe loader reads back
// exactly the values lowbit holds: strings that YAML 1.1 would take for booleans, numbers or null
// are quoted, and floats always carry a dot (PyYAML reads `1e-05` as a string).
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>

#include "lowbit/error.h"
#include "quant/recipe/recipe.h"
#include "quant/recipe/recipe_checks.h"
#include "quant/recipe/yaml_value.h"

namespace lowbit::quant {
namespace {

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

// Plain (unquoted) only for simple identifiers that PyYAML resolves to the same string.
bool plain_ok(const std::string& s) {
  if (s.empty() || !(is_alnum(s[0]) || s[0] == '_')) return false;
  for (char c : s)
    if (!(is_alnum(c) || c == '_' || c == '.' || c == '-')) return false;
  detail::YamlValue v;
  detail::resolve_plain_scalar(s, v);
  return v.kind_ == detail::YamlValue::Kind::String;
}

void put(YAML::Emitter& out, const std::string& s) {
  if (plain_ok(s)) out << s;
  else out << YAML::SingleQuoted << s;  // yaml-cpp falls back to double quotes when it must
}

std::string float_text(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest text that reads back exactly
  std::string s(buf, r.ptr);
  const size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  return e == std::string::npos ? mantissa : mantissa + s.substr(e);
}

void put_float(YAML::Emitter& out, double v) { out << float_text(v); }

void put_list(YAML::Emitter& out, const std::vector<std::string>& items) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& s : items) put(out, s);
  out << YAML::EndSeq;
}

void key(YAML::Emitter& out, const std::string& k) {
  out << YAML::Key;
  put(out, k);
  out << YAML::Value;
}

void put_json(YAML::Emitter& out, const nlohmann::ordered_json& j) {
  if (j.is_null()) {
    out << YAML::Null;
  } else if (j.is_boolean()) {
    out << j.get<bool>();
  } else if (j.is_number_unsigned()) {
    out << j.get<uint64_t>();
  } else if (j.is_number_integer()) {
    out << j.get<int64_t>();
  } else if (j.is_number_float()) {
    put_float(out, j.get<double>());
  } else if (j.is_string()) {
    put(out, j.get<std::string>());
  } else if (j.is_array()) {
    bool leaf = true;
    for (const auto& item : j) leaf = leaf && item.is_primitive();
    out << (leaf ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
    for (const auto& item : j) put_json(out, item);
    out << YAML::EndSeq;
  } else {
    out << (j.empty() ? YAML::Flow : YAML::Block) << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      key(out, k);
      put_json(out, v);
    }
    out << YAML::EndMap;
  }
}

void put_quantization(YAML::Emitter& out, const QuantizationFields& q) {
  if (q.config_groups) {
    key(out, "config_groups");
    out << YAML::Block << YAML::BeginMap;
    for (const auto& [name, scheme] : *q.config_groups) {
      key(out, name);
      put_json(out, quant_scheme_to_json(scheme));
    }
    out << YAML::EndMap;
  }
  key(out, "targets");
  put_list(out, q.targets);
  key(out, "ignore");
  put_list(out, q.ignore);
  if (!q.scheme.empty()) {
    key(out, "scheme");
    put(out, q.scheme);
  } else if (!q.scheme_map.empty()) {
    key(out, "scheme");
    out << YAML::Block << YAML::BeginMap;
    for (const PresetTargets& p : q.scheme_map) {
      key(out, p.preset);
      put_list(out, p.targets);
    }
    out << YAML::EndMap;
  }
  if (q.kv_cache_scheme) {
    key(out, "kv_cache_scheme");
    put_json(out, quant_args_to_json(*q.kv_cache_scheme));
  }
  const std::pair<const char*, const std::string*> observers[] = {
      {"weight_observer", &q.weight_observer}, {"input_observer", &q.input_observer}, {"output_observer", &q.output_observer}};
  for (const auto& [name, value] : observers) {
    if (value->empty()) continue;
    key(out, name);
    put(out, *value);
  }
  if (q.observer) {
    key(out, "observer");
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& [k, v] : *q.observer) {
      key(out, k);
      put(out, v);
    }
    out << YAML::EndMap;
  }
  key(out, "bypass_divisibility_checks");
  out << q.bypass_divisibility_checks;
}

void put_gptq(YAML::Emitter& out, const GptqModifier& g) {
  put_quantization(out, g.quant);
  key(out, "block_size");
  out << g.block_size;
  key(out, "dampening_frac");
  put_float(out, g.dampening_frac);
  if (g.actorder) {  // absent: llm-compressor's "static" sentinel default
    key(out, "actorder");
    if (*g.actorder == ActOrder::None) out << YAML::Null;
    else out << (*g.actorder == ActOrder::Group ? "group" : "static");
  }
  key(out, "batched_quantization");
  if (!g.batched_quantization.enabled) out << YAML::Null;
  else if (g.batched_quantization.max_batch == 0) out << "auto";
  else out << g.batched_quantization.max_batch;
}

void put_smoothquant(YAML::Emitter& out, const SmoothQuantModifier& s) {
  key(out, "smoothing_strength");
  put_float(out, s.smoothing_strength);
  if (s.mappings) {
    key(out, "mappings");
    out << YAML::Block << YAML::BeginSeq;
    for (const SmoothQuantMapping& m : *s.mappings) {
      out << YAML::Block << YAML::BeginSeq;
      put_list(out, m.balance_layers);
      put(out, m.smooth_layer);
      out << YAML::EndSeq;
    }
    out << YAML::EndSeq;
  }
  if (s.ignore) {
    key(out, "ignore");
    put_list(out, *s.ignore);
  }
  if (s.num_calibration_steps) {
    key(out, "num_calibration_steps");
    out << *s.num_calibration_steps;
  }
  key(out, "algorithm");
  out << (s.algorithm == SmoothQuantModifier::Algorithm::SmoothQuant ? "smoothquant" : "log_equalization");
}

void put_awq(YAML::Emitter& out, const AwqModifier& a) {
  if (a.mappings) {
    key(out, "mappings");
    out << YAML::Block << YAML::BeginSeq;
    for (const AwqMapping& m : *a.mappings) {
      out << YAML::Block << YAML::BeginMap;
      key(out, "smooth_layer");
      put(out, m.smooth_layer);
      key(out, "balance_layers");
      put_list(out, m.balance_layers);
      key(out, "activation_hook_target");
      if (m.activation_hook_target) put(out, *m.activation_hook_target);
      else out << YAML::Null;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (a.offload_device) {  // absent: llm-compressor's "not provided" default
    key(out, "offload_device");
    if (a.offload_device->empty()) out << YAML::Null;
    else put(out, *a.offload_device);
  }
  key(out, "duo_scaling");
  if (a.duo_scaling == AwqModifier::DuoScaling::Both) out << "both";
  else out << (a.duo_scaling == AwqModifier::DuoScaling::On);
  key(out, "n_grid");
  out << a.n_grid;
}

}  // namespace

std::string recipe_to_yaml(const Recipe& recipe) {
  validate_recipe(recipe, "recipe_to_yaml");
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  out.SetBoolFormat(YAML::TrueFalseBool);
  out.SetBoolFormat(YAML::LowerCase);
  out.SetIndent(2);
  out << YAML::Block << YAML::BeginMap;
  for (const RecipeStage& stage : recipe.stages) {
    key(out, stage.name + "_stage");
    out << YAML::Block << YAML::BeginMap;
    for (size_t i = 0; i < stage.modifiers.size(); ++i) {
      const std::string& group = stage.modifiers[i].group;
      key(out, group + "_modifiers");
      out << YAML::Block << YAML::BeginMap;
      for (; i < stage.modifiers.size() && stage.modifiers[i].group == group; ++i) {
        const Modifier& m = stage.modifiers[i];
        key(out, m.type_name());
        out << YAML::Block << YAML::BeginMap;
        std::visit(
            [&](const auto& x) {
              using T = std::decay_t<decltype(x)>;
              if constexpr (std::is_same_v<T, QuantizationModifier>) put_quantization(out, x.quant);
              else if constexpr (std::is_same_v<T, GptqModifier>) put_gptq(out, x);
              else if constexpr (std::is_same_v<T, SmoothQuantModifier>) put_smoothquant(out, x);
              else put_awq(out, x);
            },
            m.args);
        out << YAML::EndMap;
      }
      --i;  // the loop header steps onto the next group
      out << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (!out.good()) throw Internal("recipe_to_yaml: yaml-cpp failed: " + out.GetLastError());
  return std::string(out.c_str(), out.size()) + "\n";
}

}  // namespace lowbit::quant
