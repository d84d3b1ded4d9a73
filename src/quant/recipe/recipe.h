// llm-compressor recipes as C++ values. A recipe is what `oneshot` runs: ordered stages, each an
// ordered list of modifiers (QuantizationModifier, GPTQModifier, SmoothQuantModifier, AWQModifier)
// with llm-compressor 0.14's field names, types and defaults. parse_recipe reads the YAML (or JSON)
// llm-compressor reads and writes; recipe_to_yaml writes the recipe.yaml lowbit leaves next to a
// quantized checkpoint, which llm-compressor loads back; recipe_from_flags builds the recipe the
// `lowbit quantize` flags stand for, the way llm-compressor's examples build theirs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// `scheme: {PRESET: targets}`: one config group per entry, in order.
struct PresetTargets {
  std::string preset;
  std::vector<std::string> targets;
  bool operator==(const PresetTargets&) const = default;
};

// llm-compressor's QuantizationMixin: the fields every quantizing modifier shares.
struct QuantizationFields {
  std::vector<std::string> targets = {"Linear"};
  std::vector<std::string> ignore;
  // `scheme: W4A16` (a preset applied to `targets`) or `scheme: {W4A16: [...], ...}`; at most one
  // of the two is set, and neither together with config_groups.
  std::string scheme;
  std::vector<PresetTargets> scheme_map;
  std::optional<std::vector<std::pair<std::string, QuantScheme>>> config_groups;
  std::optional<QuantArgs> kv_cache_scheme;
  std::string weight_observer, input_observer, output_observer;  // "" = null
  // `observer: {weights: mse, input: ..., output: ...}`; null when absent.
  std::optional<std::vector<std::pair<std::string, std::string>>> observer;
  bool bypass_divisibility_checks = false;

  // False when nothing was set (llm-compressor's has_config()).
  bool has_config() const;
  bool operator==(const QuantizationFields&) const = default;
};

// Round-to-nearest with observers (llm-compressor's QuantizationModifier).
struct QuantizationModifier {
  QuantizationFields quant;
  bool operator==(const QuantizationModifier&) const = default;
};

struct GptqModifier {
  QuantizationFields quant;
  int64_t block_size = 128;
  double dampening_frac = 0.01;
  // nullopt: llm-compressor's default (the "static" sentinel: fills schemes that set no actorder).
  // A value is explicit: ActOrder::None = `actorder: null`, Weight = "static"/"weight",
  // Group = "group"/"dynamic"; it must agree with any actorder the scheme sets.
  std::optional<ActOrder> actorder;
  // `batched_quantization`: "auto" (enabled, max_batch 0), a positive limit, or null (disabled).
  struct Batching {
    bool enabled = true;
    int64_t max_batch = 0;
    bool operator==(const Batching&) const = default;
  } batched_quantization;
  bool operator==(const GptqModifier&) const = default;
};

// A SmoothQuant mapping: the smooth layer (a norm) and the Linears it feeds.
struct SmoothQuantMapping {
  std::vector<std::string> balance_layers;
  std::string smooth_layer;
  bool operator==(const SmoothQuantMapping&) const = default;
};

struct SmoothQuantModifier {
  enum class Algorithm { SmoothQuant, LogEqualization };
  double smoothing_strength = 0.5;  // alpha in [0, 1]
  std::optional<std::vector<SmoothQuantMapping>> mappings;  // null: inferred from the architecture
  std::optional<std::vector<std::string>> ignore;
  std::optional<int64_t> num_calibration_steps;
  Algorithm algorithm = Algorithm::SmoothQuant;
  bool operator==(const SmoothQuantModifier&) const = default;
};

struct AwqMapping {
  std::string smooth_layer;
  std::vector<std::string> balance_layers;
  std::optional<std::string> activation_hook_target;
  bool operator==(const AwqMapping&) const = default;
};

// AWQ's scale search only; a later quantizing modifier supplies the scheme it searches under.
struct AwqModifier {
  enum class DuoScaling { Off, On, Both };  // false | true | "both"
  std::optional<std::vector<AwqMapping>> mappings;  // null: inferred from the architecture
  // nullopt: not provided (llm-compressor's default); "" = null (no offloading); else a device.
  std::optional<std::string> offload_device;
  DuoScaling duo_scaling = DuoScaling::On;
  int64_t n_grid = 20;
  bool operator==(const AwqModifier&) const = default;
};

struct Modifier {
  std::string group;  // the `<group>_modifiers` key it is listed under
  std::variant<QuantizationModifier, GptqModifier, SmoothQuantModifier, AwqModifier> args;

  // llm-compressor's class name: "QuantizationModifier", "GPTQModifier", ...
  const char* type_name() const;
  // The quantization fields of a QuantizationModifier or GPTQModifier, else nullptr.
  const QuantizationFields* quantization() const;
  bool operator==(const Modifier&) const = default;
};

struct RecipeStage {
  std::string name;  // "default" for `default_stage`
  std::vector<Modifier> modifiers;
  bool operator==(const RecipeStage&) const = default;
};

struct Recipe {
  std::vector<RecipeStage> stages;
  bool operator==(const Recipe&) const = default;
};

// Reads a recipe. Accepted shapes (llm-compressor's, old and new):
//   <stage>_stage: {<group>_modifiers: {ModifierType: {args}}}   (what recipe.yaml holds; also
//                  <stage>_stage_<n>, which llm-compressor writes when it appends to a recipe)
//   <group>_modifiers: {ModifierType: {args}}                     (no stage: stage "default")
//   ModifierType: {args}                                          (bare: stage and group "default")
// Top-level `args`, `version`, `metadata` and stage-level `run_type`, `args` are ignored, as are the
// bookkeeping arguments index/start/end/update/requires_calibration_data and GPTQModifier's
// offload_hessians (gone from llm-compressor 0.14, which rejects it). A legacy AWQModifier that
// carries quantization arguments is split into AWQModifier + QuantizationModifier, as
// llm-compressor's compatibility shim does. Throws InvalidArgument naming `where`, the line, the
// modifier and the field for anything else: unknown types or arguments, wrong types, out-of-range
// values, schemes compressed-tensors rejects, or an AWQModifier with no quantizing modifier after it.
Recipe parse_recipe(const std::string& text, const std::string& where);
// parse_recipe on a file's contents (IoError if it cannot be read).
Recipe read_recipe_file(const std::string& path);

// recipe.yaml text: `<stage>_stage: <group>_modifiers: Type: {fields}` with every field that is not
// null, like llm-compressor's Recipe.yaml(). parse_recipe gives the same Recipe back, and
// llm-compressor 0.14 loads it. Throws InvalidArgument for a recipe YAML cannot express (two
// modifiers of one type in a group, a group split by another).
std::string recipe_to_yaml(const Recipe& recipe);

// Checks what parse_recipe checks, for a recipe built in code; `where` prefixes messages.
void validate_recipe(const Recipe& recipe, const std::string& where);

// What `lowbit quantize` asks for on its command line.
struct QuantizeFlags {
  std::string scheme = "W4A16";               // a preset name (quant_args.h preset_names())
  std::string algo = "gptq";                  // "rtn" | "gptq" | "awq"
  std::optional<double> smoothquant;          // --smoothquant S: SmoothQuant with strength S first
  std::vector<std::string> targets = {"Linear"};
  std::vector<std::string> ignore = {"lm_head"};
  std::string kv_cache;                       // "" | "fp8" (per-tensor static fp8 K/V scales)
  int64_t gptq_block_size = 128;
  double gptq_dampening_frac = 0.01;
  std::string gptq_actorder;                  // "" (default: static) | static | weight | group | none
  std::string awq_duo_scaling = "true";       // "true" | "false" | "both"
  int64_t awq_n_grid = 20;
};

// The recipe for those flags, in stage `default`, group `default` (what oneshot names a list of
// modifiers): rtn → QuantizationModifier, gptq → GPTQModifier, awq → AWQModifier followed by
// QuantizationModifier; --smoothquant puts a SmoothQuantModifier first; kv_cache fp8 sets
// kv_cache_scheme {num_bits 8, float, symmetric, tensor, static} on the quantizing modifier.
// Throws InvalidArgument naming the flag at fault.
Recipe recipe_from_flags(const QuantizeFlags& flags);

// The config groups, ignore list and kv-cache args a quantizing modifier applies, as
// llm-compressor's resolve_quantization_config computes them: `scheme` presets become groups
// group_0, group_1, ...; observer overrides (and defaults: weights memoryless_minmax, activations
// minmax, none when dynamic) are filled in; GPTQ's actorder is applied to the weights. Like
// llm-compressor, that actorder is set even where the strategy cannot use it (`group` on a channel
// scheme, which QuantArgs::validate would refuse); GPTQ then quantizes those without reordering.
// Throws InvalidArgument (prefixed by `where`) on conflicts llm-compressor also rejects.
CompressedTensorsConfig resolve_quantization_config(const QuantizationModifier& m, const std::string& where);
CompressedTensorsConfig resolve_quantization_config(const GptqModifier& m, const std::string& where);

}  // namespace lowbit::quant
