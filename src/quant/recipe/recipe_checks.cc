// Validation rules and llm-compressor's resolution of a quantizing modifier into config groups.
#include "quant/recipe/recipe_checks.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "lowbit/error.h"

namespace lowbit::quant {
namespace detail {
namespace {

std::string number(double v) {  // shortest text that reads back as v: 2 not 2.000000
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

}  // namespace

std::string check_block_size(int64_t v) {
  return v >= 1 ? "" : "must be a positive integer, got " + std::to_string(v);
}

std::string check_dampening_frac(double v) {
  return std::isfinite(v) && v >= 0.0 ? "" : "must be a finite number >= 0, got " + number(v);
}

std::string check_smoothing_strength(double v) {
  return v >= 0.0 && v <= 1.0 ? "" : "must lie in [0, 1], got " + number(v);
}

std::string check_num_calibration_steps(int64_t v) {
  return v >= 1 ? "" : "must be a positive integer or null, got " + std::to_string(v);
}

std::string check_max_batch(int64_t v) {
  return v >= 1 ? "" : "must be \"auto\", a positive integer or null, got " + std::to_string(v);
}

// llm-compressor's grid divides by n_grid - 1 (duo off), n_grid - 2 (duo on) and n_grid/2 - 1
// ("both"), so smaller grids fail with a division by zero there.
std::string check_n_grid(int64_t n, AwqModifier::DuoScaling duo) {
  const int64_t least = duo == AwqModifier::DuoScaling::Off ? 2 : duo == AwqModifier::DuoScaling::On ? 3 : 4;
  if (n >= least) return "";
  const char* mode = duo == AwqModifier::DuoScaling::Off ? "false" : duo == AwqModifier::DuoScaling::On ? "true" : "both";
  return "must be at least " + std::to_string(least) + " with duo_scaling " + mode + ", got " + std::to_string(n);
}

void check_fields(const Modifier& m, const std::string& where) {
  auto check = [&](const char* field, const std::string& problem) {
    if (!problem.empty()) throw InvalidArgument(where + ": " + field + ": " + problem);
  };
  if (const auto* g = std::get_if<GptqModifier>(&m.args)) {
    check("block_size", check_block_size(g->block_size));
    check("dampening_frac", check_dampening_frac(g->dampening_frac));
    if (g->batched_quantization.enabled && g->batched_quantization.max_batch != 0)
      check("batched_quantization", check_max_batch(g->batched_quantization.max_batch));
  } else if (const auto* s = std::get_if<SmoothQuantModifier>(&m.args)) {
    check("smoothing_strength", check_smoothing_strength(s->smoothing_strength));
    if (s->num_calibration_steps) check("num_calibration_steps", check_num_calibration_steps(*s->num_calibration_steps));
  } else if (const auto* a = std::get_if<AwqModifier>(&m.args)) {
    check("n_grid", check_n_grid(a->n_grid, a->duo_scaling));
  }
}

void check_modifier(const Modifier& m, const std::string& where) {
  if (const auto* q = std::get_if<QuantizationModifier>(&m.args)) {
    if (!q->quant.has_config())
      throw InvalidArgument(where + ": QuantizationModifier needs quantization fields (scheme, config_groups, "
                                    "targets, ignore or kv_cache_scheme)");
    resolve_quantization_config(*q, where);
  } else if (const auto* g = std::get_if<GptqModifier>(&m.args)) {
    resolve_quantization_config(*g, where);
  }
}

void check_structure(const Recipe& r, const std::string& where) {
  bool awq_pending = false;
  for (size_t si = 0; si < r.stages.size(); ++si) {
    const RecipeStage& stage = r.stages[si];
    for (size_t sj = 0; sj < si; ++sj)
      if (r.stages[sj].name == stage.name)
        throw InvalidArgument(where + ": stage `" + stage.name + "` appears twice");
    const std::vector<Modifier>& mods = stage.modifiers;
    for (size_t i = 0; i < mods.size(); ++i) {
      const std::string at = where + ": stage `" + stage.name + "`, group `" + mods[i].group + "`: ";
      const bool starts_run = i > 0 && mods[i - 1].group != mods[i].group;
      for (size_t j = 0; j < i; ++j) {
        if (mods[j].group != mods[i].group) continue;
        if (mods[j].args.index() == mods[i].args.index())
          throw InvalidArgument(at + "holds two " + mods[i].type_name() +
                                " (a recipe file lists one per group: put the second in another group)");
        if (starts_run)
          throw InvalidArgument(at + "is split by group `" + mods[i - 1].group +
                                "` (a recipe file lists a group's modifiers together)");
      }
      if (std::holds_alternative<AwqModifier>(mods[i].args)) awq_pending = true;
      if (mods[i].quantization() != nullptr) awq_pending = false;
    }
  }
  if (awq_pending)
    throw InvalidArgument(where + ": AWQModifier needs a QuantizationModifier or GPTQModifier after it "
                                  "(AWQ only searches scales; that modifier quantizes)");
}

}  // namespace detail

namespace {

// Observer names llm-compressor's QuantizationMixin applies to one scheme (_apply_observer_overrides).
void apply_observer_overrides(const QuantizationFields& q, QuantScheme& s) {
  std::string weight = q.weight_observer, input = q.input_observer, output = q.output_observer;
  if (q.observer) {
    for (const auto& [key, name] : *q.observer) (key == "weights" ? weight : key == "input" ? input : output) = name;
  }
  auto apply = [](std::optional<QuantArgs>& args, const std::string& name, const char* fallback) {
    if (!args) return;
    if (!name.empty()) {
      args->observer = name;
    } else if (args->observer.empty()) {  // an observer the scheme sets explicitly is kept
      args->observer = args->dynamic == DynamicMode::Dynamic ? "" : fallback;
    }
  };
  apply(s.weights, weight, "memoryless_minmax");
  apply(s.input_activations, input, "minmax");
  apply(s.output_activations, output, "minmax");
}

CompressedTensorsConfig resolve_fields(const QuantizationFields& q, const std::string& where) {
  if (!q.scheme.empty() && !q.scheme_map.empty())
    throw InvalidArgument(where + ": scheme: give one preset name or one {PRESET: targets} map");
  const bool has_scheme = !q.scheme.empty() || !q.scheme_map.empty();
  if (has_scheme && q.config_groups) throw InvalidArgument(where + ": specify either `scheme` or `config_groups`");
  const bool individual = !q.weight_observer.empty() || !q.input_observer.empty() || !q.output_observer.empty();
  if (individual && q.observer)
    throw InvalidArgument(where + ": observer: give either weight_observer / input_observer / output_observer "
                                  "or the observer mapping, not both");
  CompressedTensorsConfig c;
  c.quantization_status = "initialized";
  c.ignore = q.ignore;
  c.kv_cache_scheme = q.kv_cache_scheme;
  std::vector<PresetTargets> presets = q.scheme_map;
  if (!q.scheme.empty()) presets.push_back({q.scheme, q.targets});
  for (size_t i = 0; i < presets.size(); ++i) {
    QuantScheme s;
    try {
      s = preset_scheme(presets[i].preset, presets[i].targets);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(where + ": scheme: " + e.what());
    }
    c.config_groups.push_back({"group_" + std::to_string(i), std::move(s)});
  }
  if (!has_scheme && q.config_groups) c.config_groups = *q.config_groups;
  if (c.config_groups.empty()) c.config_groups.push_back({"group_0", QuantScheme{q.targets, {}, {}, {}, {}}});
  for (auto& group : c.config_groups) apply_observer_overrides(q, group.second);
  return c;
}

}  // namespace

CompressedTensorsConfig resolve_quantization_config(const QuantizationModifier& m, const std::string& where) {
  return resolve_fields(m.quant, where);
}

CompressedTensorsConfig resolve_quantization_config(const GptqModifier& m, const std::string& where) {
  CompressedTensorsConfig c = resolve_fields(m.quant, where);
  for (auto& [name, scheme] : c.config_groups) {
    if (!scheme.weights) continue;
    const Strategy st = scheme.weights->strategy;
    if (st == Strategy::Token || st == Strategy::AttnHead) continue;
    ActOrder& existing = scheme.weights->actorder;
    if (!m.actorder) {  // the "static" sentinel only fills an unset actorder
      if (existing == ActOrder::None) existing = ActOrder::Weight;
    } else if (existing == ActOrder::None || existing == *m.actorder) {
      existing = *m.actorder;
    } else {
      throw InvalidArgument(where + ": actorder: GPTQModifier.actorder " + to_string(*m.actorder) +
                            " differs from the actorder " + to_string(existing) + " of config group " + name +
                            "; remove one of them");
    }
  }
  return c;
}

void validate_recipe(const Recipe& recipe, const std::string& where) {
  if (recipe.stages.empty()) throw InvalidArgument(where + ": the recipe holds no modifiers");
  for (const RecipeStage& stage : recipe.stages) {
    if (stage.modifiers.empty()) throw InvalidArgument(where + ": stage `" + stage.name + "` holds no modifiers");
    for (const Modifier& m : stage.modifiers) {
      const std::string at = where + ": " + m.type_name() + " in " + stage.name + "_stage." + m.group + "_modifiers";
      detail::check_fields(m, at);
      detail::check_modifier(m, at);
    }
  }
  detail::check_structure(recipe, where);
}

}  // namespace lowbit::quant
