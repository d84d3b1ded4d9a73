// parse_recipe: YAML values → Recipe, with llm-compressor 0.14's pydantic field types (including
// its lax coercions: "128" for an int, 1 for true) and lowbit's range checks.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "lowbit/error.h"
#include "quant/recipe/recipe.h"
#include "quant/recipe/recipe_checks.h"
#include "quant/recipe/yaml_value.h"

namespace lowbit::quant {
namespace {

using detail::YamlValue;
using Kind = YamlValue::Kind;

// One modifier's arguments being read: names the file, the modifier and where it sits.
struct Ctx {
  const std::string& where;
  std::string label;  // "GPTQModifier in quant_stage.quant_modifiers"

  std::string at(const YamlValue& v, const std::string& field) const {
    return where + ":" + std::to_string(v.line_) + ": " + label + ": " + field;
  }
  [[noreturn]] void fail(const YamlValue& v, const std::string& field, const std::string& what) const {
    throw InvalidArgument(at(v, field) + ": " + what);
  }
  void check(const YamlValue& v, const std::string& field, const std::string& problem) const {
    if (!problem.empty()) fail(v, field, problem);
  }
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool get_bool(const Ctx& c, const YamlValue& v, const std::string& f) {
  if (v.kind_ == Kind::Bool) return v.bool_;
  if (v.kind_ == Kind::Int && (v.int_ == 0 || v.int_ == 1)) return v.int_ == 1;
  if (v.kind_ == Kind::String) {  // pydantic's lax bool strings
    const std::string s = lower(v.text_);
    if (s == "true" || s == "t" || s == "yes" || s == "y" || s == "on" || s == "1") return true;
    if (s == "false" || s == "f" || s == "no" || s == "n" || s == "off" || s == "0") return false;
  }
  c.fail(v, f, "expected true or false, got " + v.describe());
}

int64_t get_int(const Ctx& c, const YamlValue& v, const std::string& f) {
  if (v.kind_ == Kind::Int) return v.int_;
  if (v.kind_ == Kind::Float && std::isfinite(v.float_) && v.float_ == std::floor(v.float_) &&
      std::fabs(v.float_) < static_cast<double>(detail::kExactIntLimit))
    return static_cast<int64_t>(v.float_);
  if (v.kind_ == Kind::String) {
    const std::string& s = v.text_;
    size_t start = (!s.empty() && s[0] == '+') ? 1 : 0;
    int64_t out = 0;
    auto [end, ec] = std::from_chars(s.data() + start, s.data() + s.size(), out);
    // The bound of the other forms (|v| < 2^53): recipe_to_yaml writes a plain integer, which a
    // YAML reader takes exactly only below it, so a larger one would not read back as written.
    if (ec == std::errc() && end == s.data() + s.size() && start < s.size() &&
        out > -detail::kExactIntLimit && out < detail::kExactIntLimit)
      return out;
  }
  c.fail(v, f, "expected an integer, got " + v.describe());
}

double get_double(const Ctx& c, const YamlValue& v, const std::string& f) {
  if (v.kind_ == Kind::Int) return static_cast<double>(v.int_);
  if (v.kind_ == Kind::Float) return v.float_;
  if (v.kind_ == Kind::String && !v.text_.empty() && !std::isspace(static_cast<unsigned char>(v.text_[0]))) {
    char* end = nullptr;
    double x = std::strtod(v.text_.c_str(), &end);
    if (end == v.text_.c_str() + v.text_.size()) return x;  // "1e-5": a string to PyYAML
  }
  c.fail(v, f, "expected a number, got " + v.describe());
}

std::string get_string(const Ctx& c, const YamlValue& v, const std::string& f) {
  if (v.kind_ != Kind::String) c.fail(v, f, "expected a string, got " + v.describe());
  return v.text_;
}

std::vector<std::string> get_string_list(const Ctx& c, const YamlValue& v, const std::string& f) {
  if (v.kind_ != Kind::Seq) c.fail(v, f, "expected a list of strings, got " + v.describe());
  std::vector<std::string> out;
  for (const YamlValue& item : v.items_) out.push_back(get_string(c, item, f));
  return out;
}

// `targets`: a string or a list of strings (llm-compressor wraps a string in a list).
std::vector<std::string> get_targets(const Ctx& c, const YamlValue& v, const std::string& f) {
  if (v.kind_ == Kind::String) return {v.text_};
  return get_string_list(c, v, f);
}

const YamlValue& expect_map(const Ctx& c, const YamlValue& v, const std::string& f) {
  if (v.kind_ != Kind::Map) c.fail(v, f, "expected a mapping, got " + v.describe());
  return v;
}

// Arguments every llm-compressor Modifier has. `group` moves the modifier to another group; the
// rest is scheduling bookkeeping that oneshot does not use, checked for type and dropped.
bool base_field(const Ctx& c, const std::string& key, const YamlValue& v, Modifier& m) {
  if (key == "group") {
    if (v.kind_ != Kind::Null) m.group = get_string(c, v, key);
  } else if (key == "index") {
    if (v.kind_ != Kind::Null) get_int(c, v, key);
  } else if (key == "start" || key == "end" || key == "update") {
    if (v.kind_ != Kind::Null) get_double(c, v, key);
  } else if (key == "requires_calibration_data") {
    get_bool(c, v, key);
  } else {
    return false;
  }
  return true;
}

void parse_scheme(const Ctx& c, const YamlValue& v, QuantizationFields& q) {
  if (v.kind_ == Kind::Null) return;
  if (v.kind_ == Kind::String) {
    q.scheme = v.text_;
    return;
  }
  if (v.kind_ != Kind::Map)
    c.fail(v, "scheme", "expected a preset name or {PRESET: targets}, got " + v.describe());
  for (size_t i = 0; i < v.keys_.size(); ++i)
    q.scheme_map.push_back({v.keys_[i], get_targets(c, v.items_[i], "scheme." + v.keys_[i])});
}

std::vector<std::pair<std::string, std::string>> parse_observer_map(const Ctx& c, const YamlValue& v) {
  expect_map(c, v, "observer");
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < v.keys_.size(); ++i) {
    const std::string& k = v.keys_[i];
    if (k != "weights" && k != "input" && k != "output")
      c.fail(v.items_[i], "observer", "invalid key `" + k + "` (valid: weights, input, output)");
    out.push_back({k, get_string(c, v.items_[i], "observer." + k)});
  }
  return out;
}

// QuantizationMixin's fields.
bool quant_field(const Ctx& c, const std::string& key, const YamlValue& v, QuantizationFields& q) {
  const bool null = v.kind_ == Kind::Null;
  if (key == "targets") {
    q.targets = get_targets(c, v, key);
  } else if (key == "ignore") {
    q.ignore = get_string_list(c, v, key);
  } else if (key == "scheme") {
    parse_scheme(c, v, q);
  } else if (key == "config_groups") {
    if (null) return true;
    expect_map(c, v, key);
    q.config_groups.emplace();
    for (size_t i = 0; i < v.keys_.size(); ++i) {
      const std::string field = "config_groups." + v.keys_[i];
      expect_map(c, v.items_[i], field);
      QuantScheme s = parse_quant_scheme(detail::yaml_to_json(v.items_[i], c.where), c.at(v.items_[i], field));
      q.config_groups->push_back({v.keys_[i], std::move(s)});
    }
  } else if (key == "kv_cache_scheme") {
    if (!null) {
      expect_map(c, v, key);
      q.kv_cache_scheme = parse_quant_args(detail::yaml_to_json(v, c.where), c.at(v, key));
    }
  } else if (key == "weight_observer" || key == "input_observer" || key == "output_observer") {
    std::string& slot = key[0] == 'w' ? q.weight_observer : key[0] == 'i' ? q.input_observer : q.output_observer;
    slot = null ? "" : get_string(c, v, key);
  } else if (key == "observer") {
    if (!null) q.observer = parse_observer_map(c, v);
  } else if (key == "bypass_divisibility_checks") {
    q.bypass_divisibility_checks = get_bool(c, v, key);
  } else {
    return false;
  }
  return true;
}

bool gptq_field(const Ctx& c, const std::string& key, const YamlValue& v, GptqModifier& g) {
  if (key == "block_size") {
    g.block_size = get_int(c, v, key);
    c.check(v, key, detail::check_block_size(g.block_size));
  } else if (key == "dampening_frac") {
    if (v.kind_ == Kind::Null) c.fail(v, key, "must be a number (null would fail inside GPTQ)");
    g.dampening_frac = get_double(c, v, key);
    c.check(v, key, detail::check_dampening_frac(g.dampening_frac));
  } else if (key == "actorder") {
    if (v.kind_ == Kind::Null) {
      g.actorder = ActOrder::None;
      return true;
    }
    const std::string s = lower(get_string(c, v, key));
    if (s == "static" || s == "weight") g.actorder = ActOrder::Weight;
    else if (s == "group" || s == "dynamic") g.actorder = ActOrder::Group;
    else c.fail(v, key, "expected static, weight, group, dynamic or null, got " + v.describe());
  } else if (key == "batched_quantization") {
    g.batched_quantization = {};
    if (v.kind_ == Kind::Null) {
      g.batched_quantization.enabled = false;
    } else if (v.kind_ == Kind::String && v.text_ == "auto") {
    } else if (v.kind_ == Kind::Int) {  // StrictInt: no strings, floats or booleans
      g.batched_quantization.max_batch = v.int_;
      c.check(v, key, detail::check_max_batch(v.int_));
    } else {
      c.fail(v, key, "expected \"auto\", a positive integer or null, got " + v.describe());
    }
  } else if (key == "offload_hessians") {  // removed after llm-compressor 0.9; lowbit decides itself
    get_bool(c, v, key);
  } else {
    return quant_field(c, key, v, g.quant);
  }
  return true;
}

bool smoothquant_field(const Ctx& c, const std::string& key, const YamlValue& v, SmoothQuantModifier& s) {
  const bool null = v.kind_ == Kind::Null;
  if (key == "smoothing_strength") {
    s.smoothing_strength = get_double(c, v, key);
    c.check(v, key, detail::check_smoothing_strength(s.smoothing_strength));
  } else if (key == "mappings") {
    if (null) return true;
    if (v.kind_ != Kind::Seq) c.fail(v, key, "expected a list of [[balance layers], smooth layer]");
    s.mappings.emplace();
    for (const YamlValue& m : v.items_) {
      if (m.kind_ != Kind::Seq || m.items_.size() != 2)
        c.fail(m, key, "each mapping is [[balance layers], smooth layer], got " + m.describe());
      s.mappings->push_back({get_string_list(c, m.items_[0], key), get_string(c, m.items_[1], key)});
    }
  } else if (key == "ignore") {
    if (!null) s.ignore = get_string_list(c, v, key);
  } else if (key == "num_calibration_steps") {
    if (null) return true;
    s.num_calibration_steps = get_int(c, v, key);
    c.check(v, key, detail::check_num_calibration_steps(*s.num_calibration_steps));
  } else if (key == "calibration_function") {
    if (!null) c.fail(v, key, "only null is possible in a recipe file");
  } else if (key == "algorithm") {
    const std::string a = get_string(c, v, key);
    if (a == "smoothquant") s.algorithm = SmoothQuantModifier::Algorithm::SmoothQuant;
    else if (a == "log_equalization") s.algorithm = SmoothQuantModifier::Algorithm::LogEqualization;
    else c.fail(v, key, "expected smoothquant or log_equalization, got " + v.describe());
  } else {
    return false;
  }
  return true;
}

AwqMapping parse_awq_mapping(const Ctx& c, const YamlValue& v) {
  expect_map(c, v, "mappings");
  AwqMapping m;
  bool has_smooth = false, has_balance = false;
  for (size_t i = 0; i < v.keys_.size(); ++i) {
    const std::string& k = v.keys_[i];
    const YamlValue& x = v.items_[i];
    if (k == "smooth_layer") {
      m.smooth_layer = get_string(c, x, "mappings.smooth_layer");
      has_smooth = true;
    } else if (k == "balance_layers") {
      m.balance_layers = get_string_list(c, x, "mappings.balance_layers");
      has_balance = true;
    } else if (k == "activation_hook_target") {
      if (x.kind_ != Kind::Null) m.activation_hook_target = get_string(c, x, "mappings." + k);
    } else {
      c.fail(x, "mappings." + k, "unknown key (valid: smooth_layer, balance_layers, activation_hook_target)");
    }
  }
  if (!has_smooth || !has_balance) c.fail(v, "mappings", "each mapping needs smooth_layer and balance_layers");
  return m;
}

bool awq_field(const Ctx& c, const std::string& key, const YamlValue& v, AwqModifier& a) {
  if (key == "mappings") {
    if (v.kind_ == Kind::Null) return true;
    if (v.kind_ != Kind::Seq) c.fail(v, key, "expected a list of {smooth_layer, balance_layers}");
    a.mappings.emplace();
    for (const YamlValue& m : v.items_) a.mappings->push_back(parse_awq_mapping(c, m));
  } else if (key == "offload_device") {
    if (v.kind_ == Kind::Sentinel) a.offload_device.reset();  // what llm-compressor writes by default
    else if (v.kind_ == Kind::Null) a.offload_device = "";
    else a.offload_device = get_string(c, v, key);
  } else if (key == "duo_scaling") {
    if (v.kind_ == Kind::String && v.text_ == "both") a.duo_scaling = AwqModifier::DuoScaling::Both;
    else a.duo_scaling = get_bool(c, v, key) ? AwqModifier::DuoScaling::On : AwqModifier::DuoScaling::Off;
  } else if (key == "n_grid") {
    a.n_grid = get_int(c, v, key);
  } else {
    return false;
  }
  return true;
}

const char* const kQuantFields = "targets, ignore, scheme, config_groups, kv_cache_scheme, weight_observer, "
                                 "input_observer, output_observer, observer, bypass_divisibility_checks";

std::string valid_fields(const std::string& type) {
  if (type == "QuantizationModifier") return kQuantFields;
  if (type == "GPTQModifier")
    return std::string("block_size, dampening_frac, actorder, batched_quantization, ") + kQuantFields;
  if (type == "SmoothQuantModifier")
    return "smoothing_strength, mappings, ignore, num_calibration_steps, algorithm";
  return "mappings, offload_device, duo_scaling, n_grid";
}

// One `Type: {args}` entry; a legacy AWQModifier with quantization arguments yields two modifiers.
std::vector<Modifier> parse_modifier(const std::string& type, const YamlValue& args, const std::string& group,
                                     const std::string& where, const std::string& location) {
  Ctx c{where, type + " in " + location};
  Modifier m;
  m.group = group;
  if (type == "QuantizationModifier") m.args = QuantizationModifier{};
  else if (type == "GPTQModifier") m.args = GptqModifier{};
  else if (type == "SmoothQuantModifier") m.args = SmoothQuantModifier{};
  else if (type == "AWQModifier") m.args = AwqModifier{};
  else
    throw InvalidArgument(where + ":" + std::to_string(args.line_) + ": " + location + ": unsupported modifier type `" +
                          type + "` (lowbit runs QuantizationModifier, GPTQModifier, SmoothQuantModifier, AWQModifier)");
  if (args.kind_ != Kind::Null && args.kind_ != Kind::Map)
    c.fail(args, "arguments", "expected a mapping of arguments, got " + args.describe());
  std::optional<QuantizationFields> legacy;  // AWQModifier's quantization arguments (llm-compressor < 0.10)
  for (size_t i = 0; i < args.keys_.size(); ++i) {
    const std::string& key = args.keys_[i];
    const YamlValue& v = args.items_[i];
    if (base_field(c, key, v, m)) continue;
    bool known = std::visit(
        [&](auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, QuantizationModifier>) return quant_field(c, key, v, x.quant);
          else if constexpr (std::is_same_v<T, GptqModifier>) return gptq_field(c, key, v, x);
          else if constexpr (std::is_same_v<T, SmoothQuantModifier>) return smoothquant_field(c, key, v, x);
          else return awq_field(c, key, v, x) || quant_field(c, key, v, legacy ? *legacy : legacy.emplace());
        },
        m.args);
    if (!known) c.fail(v, key, "unknown argument (" + type + " takes " + valid_fields(type) + ")");
  }
  if (auto* a = std::get_if<AwqModifier>(&m.args)) {
    const YamlValue* n_grid = args.find("n_grid");
    c.check(n_grid ? *n_grid : args, "n_grid", detail::check_n_grid(a->n_grid, a->duo_scaling));
  }
  const std::string prefix = where + ":" + std::to_string(args.line_) + ": " + c.label;
  detail::check_modifier(m, prefix);
  std::vector<Modifier> out{m};
  if (legacy) {
    out.push_back(Modifier{m.group, QuantizationModifier{*legacy}});
    detail::check_modifier(out.back(), prefix + " (its quantization arguments)");
  }
  return out;
}

void parse_group(const std::string& group, const YamlValue& v, const std::string& location,
                 const std::string& where, RecipeStage& stage) {
  if (v.kind_ == Kind::Null) return;
  if (v.kind_ != Kind::Map)
    throw InvalidArgument(where + ":" + std::to_string(v.line_) + ": " + location +
                          ": expected a mapping of ModifierType: {arguments}, got " + v.describe());
  for (size_t i = 0; i < v.keys_.size(); ++i)
    for (Modifier& m : parse_modifier(v.keys_[i], v.items_[i], group, where, location))
      stage.modifiers.push_back(std::move(m));
}

bool strip_suffix(const std::string& s, const std::string& suffix, std::string& head) {
  if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  head = s.substr(0, s.size() - suffix.size());
  return true;
}

// `<name>_stage`, or `<name>_stage_<n>` (llm-compressor's numbering when it appends a recipe to an
// existing one) which becomes stage `<name>_<n>`.
bool stage_name(const std::string& key, std::string& name) {
  if (strip_suffix(key, "_stage", name)) return true;
  size_t us = key.rfind('_');
  if (us == std::string::npos || us + 1 == key.size()) return false;
  if (!std::all_of(key.begin() + us + 1, key.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) return false;
  if (!strip_suffix(key.substr(0, us), "_stage", name)) return false;
  name += key.substr(us);
  return true;
}

RecipeStage& stage_named(Recipe& r, const std::string& name) {
  for (RecipeStage& s : r.stages)
    if (s.name == name) return s;
  r.stages.push_back({name, {}});
  return r.stages.back();
}

void parse_stage(const std::string& key, const YamlValue& v, const std::string& where, RecipeStage& stage) {
  if (v.kind_ == Kind::Null) return;
  if (v.kind_ != Kind::Map)
    throw InvalidArgument(where + ":" + std::to_string(v.line_) + ": " + key +
                          ": expected a mapping of <group>_modifiers, got " + v.describe());
  for (size_t i = 0; i < v.keys_.size(); ++i) {
    const std::string& k = v.keys_[i];
    std::string group;
    if (strip_suffix(k, "_modifiers", group)) {
      parse_group(group, v.items_[i], key + "." + k, where, stage);
    } else if (k != "run_type" && k != "args") {  // old stage settings oneshot never used
      throw InvalidArgument(where + ":" + std::to_string(v.items_[i].line_) + ": " + key + ": unknown key `" + k +
                            "` (a stage holds <group>_modifiers entries)");
    }
  }
}

}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& where) {
  const YamlValue doc = detail::load_yaml(text, where);
  if (doc.kind_ != Kind::Map)
    throw InvalidArgument(where + ": a recipe is a mapping of <stage>_stage entries, got " + doc.describe());
  Recipe r;
  std::vector<std::string> seen_stages;
  for (size_t i = 0; i < doc.keys_.size(); ++i) {
    const std::string& key = doc.keys_[i];
    const YamlValue& v = doc.items_[i];
    std::string name;
    if (key == "args" || key == "version" || key == "metadata") continue;
    if (stage_name(key, name)) {
      if (std::find(seen_stages.begin(), seen_stages.end(), name) != seen_stages.end())
        throw InvalidArgument(where + ":" + std::to_string(v.line_) + ": stage `" + name + "` appears twice");
      seen_stages.push_back(name);
      parse_stage(key, v, where, stage_named(r, name));
    } else if (strip_suffix(key, "_modifiers", name)) {
      parse_group(name, v, key, where, stage_named(r, "default"));
    } else if (strip_suffix(key, "Modifier", name)) {
      RecipeStage& stage = stage_named(r, "default");
      for (Modifier& m : parse_modifier(key, v, "default", where, "the top level")) stage.modifiers.push_back(std::move(m));
    } else {
      throw InvalidArgument(where + ":" + std::to_string(v.line_) + ": unknown top-level key `" + key +
                            "` (expected <stage>_stage, <group>_modifiers or a modifier type)");
    }
  }
  std::erase_if(r.stages, [](const RecipeStage& s) { return s.modifiers.empty(); });
  if (r.stages.empty()) throw InvalidArgument(where + ": the recipe holds no modifiers");
  detail::check_structure(r, where);
  return r;
}

Recipe read_recipe_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open the recipe file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError(path + ": cannot read the recipe file");
  return parse_recipe(text.str(), path);
}

}  // namespace lowbit::quant
