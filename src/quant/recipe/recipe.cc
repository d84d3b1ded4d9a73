// Modifier accessors and recipe_from_flags: the recipe a `lowbit quantize` command line stands for.
#include "quant/recipe/recipe.h"

#include <cctype>

#include "lowbit/error.h"
#include "quant/recipe/recipe_checks.h"

namespace lowbit::quant {

bool QuantizationFields::has_config() const {
  return config_groups || targets != std::vector<std::string>{"Linear"} || !ignore.empty() || !scheme.empty() ||
         !scheme_map.empty() || kv_cache_scheme;
}

const char* Modifier::type_name() const {
  switch (args.index()) {
    case 0: return "QuantizationModifier";
    case 1: return "GPTQModifier";
    case 2: return "SmoothQuantModifier";
    default: return "AWQModifier";
  }
}

const QuantizationFields* Modifier::quantization() const {
  if (const auto* q = std::get_if<QuantizationModifier>(&args)) return &q->quant;
  if (const auto* g = std::get_if<GptqModifier>(&args)) return &g->quant;
  return nullptr;
}

namespace {

constexpr const char* kFlags = "quantize flags";

[[noreturn]] void bad_flag(const std::string& flag, const std::string& what) {
  throw InvalidArgument(std::string(kFlags) + ": " + flag + ": " + what);
}

void check_flag(const std::string& flag, const std::string& problem) {
  if (!problem.empty()) bad_flag(flag, problem);
}

// The kv_cache_scheme of llm-compressor's fp8 KV-cache example, read through the same parser a
// recipe file goes through so that both give identical QuantArgs.
QuantArgs fp8_kv_cache_args() {
  const nlohmann::json j = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"},
                            {"dynamic", false}, {"symmetric", true}};
  return parse_quant_args(j, std::string(kFlags) + ": --kv-cache fp8");
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

QuantizationFields quantization_from_flags(const QuantizeFlags& f) {
  if (f.scheme.empty()) bad_flag("--scheme", "give a preset name (W4A16, W8A8, FP8_DYNAMIC, ...)");
  if (f.targets.empty()) bad_flag("--targets", "give at least one module name, class name or re: pattern");
  try {
    preset_scheme(f.scheme, f.targets);
  } catch (const InvalidArgument& e) {
    bad_flag("--scheme", e.what());
  }
  QuantizationFields q;
  q.targets = f.targets;
  // `--ignore ""` is how a shell says "an empty list": nothing left out, lm_head included.
  for (const std::string& entry : f.ignore) {
    if (!entry.empty()) q.ignore.push_back(entry);
  }
  if (upper(f.scheme) == "W4A8_CHANNEL") {
    // A lowbit-only preset name: written out as its config group so that llm-compressor (and
    // anyone reading recipe.yaml) gets the scheme itself.
    q.config_groups = std::vector<std::pair<std::string, QuantScheme>>{
        {"group_0", preset_scheme(f.scheme, f.targets)}};
  } else {
    q.scheme = f.scheme;
  }
  if (f.kv_cache == "fp8") q.kv_cache_scheme = fp8_kv_cache_args();
  else if (!f.kv_cache.empty()) bad_flag("--kv-cache", "expected fp8 (or nothing), got \"" + f.kv_cache + "\"");
  return q;
}

GptqModifier gptq_from_flags(const QuantizeFlags& f, QuantizationFields q) {
  GptqModifier g;
  g.quant = std::move(q);
  g.block_size = f.gptq_block_size;
  check_flag("--block-size", detail::check_block_size(g.block_size));
  g.dampening_frac = f.gptq_dampening_frac;
  check_flag("--dampening-frac", detail::check_dampening_frac(g.dampening_frac));
  const std::string& a = f.gptq_actorder;
  if (a == "static" || a == "weight") g.actorder = ActOrder::Weight;
  else if (a == "group" || a == "dynamic") g.actorder = ActOrder::Group;
  else if (a == "none" || a == "null") g.actorder = ActOrder::None;
  else if (!a.empty()) bad_flag("--actorder", "expected static, weight, group or none, got \"" + a + "\"");
  return g;
}

AwqModifier awq_from_flags(const QuantizeFlags& f) {
  AwqModifier a;
  if (f.awq_duo_scaling == "true") a.duo_scaling = AwqModifier::DuoScaling::On;
  else if (f.awq_duo_scaling == "false") a.duo_scaling = AwqModifier::DuoScaling::Off;
  else if (f.awq_duo_scaling == "both") a.duo_scaling = AwqModifier::DuoScaling::Both;
  else bad_flag("--duo-scaling", "expected true, false or both, got \"" + f.awq_duo_scaling + "\"");
  a.n_grid = f.awq_n_grid;
  check_flag("--n-grid", detail::check_n_grid(a.n_grid, a.duo_scaling));
  return a;
}

}  // namespace

Recipe recipe_from_flags(const QuantizeFlags& f) {
  if (f.algo != "rtn" && f.algo != "gptq" && f.algo != "awq")
    bad_flag("--algo", "expected rtn, gptq or awq, got \"" + f.algo + "\"");
  QuantizationFields q = quantization_from_flags(f);
  RecipeStage stage{"default", {}};
  if (f.smoothquant) {
    check_flag("--smoothquant", detail::check_smoothing_strength(*f.smoothquant));
    SmoothQuantModifier s;
    s.smoothing_strength = *f.smoothquant;
    stage.modifiers.push_back({"default", s});
  }
  if (f.algo == "rtn") {
    stage.modifiers.push_back({"default", QuantizationModifier{std::move(q)}});
  } else if (f.algo == "gptq") {
    stage.modifiers.push_back({"default", gptq_from_flags(f, std::move(q))});
  } else {
    stage.modifiers.push_back({"default", awq_from_flags(f)});
    stage.modifiers.push_back({"default", QuantizationModifier{std::move(q)}});
  }
  Recipe r;
  r.stages.push_back(std::move(stage));
  validate_recipe(r, kFlags);  // e.g. --actorder group against a scheme that sets another order
  return r;
}

}  // namespace lowbit::quant
