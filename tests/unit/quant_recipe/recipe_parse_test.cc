// parse_recipe: the recipe shapes llm-compressor reads, field types and defaults, and the errors
// (each naming the file, line, modifier and field). Values written here by hand follow
// llm-compressor 0.14.0.1's pydantic models; the golden files in data/llmc test the same against
// what llm-compressor itself wrote.
#include <gtest/gtest.h>

#include <string>

#include "lowbit/error.h"
#include "quant/recipe/recipe.h"

namespace lowbit::quant {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_recipe(yaml, "recipe.yaml");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(RecipeParseTest, StagedFormAndDefaults) {
  const Recipe r = parse_recipe(
      "quant_stage:\n"
      "  quant_modifiers:\n"
      "    GPTQModifier:\n"
      "      scheme: W4A16\n"
      "      ignore: [lm_head]\n",
      "recipe.yaml");
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.stages[0].name, "quant");
  ASSERT_EQ(r.stages[0].modifiers.size(), 1u);
  const Modifier& m = r.stages[0].modifiers[0];
  EXPECT_EQ(m.group, "quant");
  EXPECT_STREQ(m.type_name(), "GPTQModifier");
  const auto& g = std::get<GptqModifier>(m.args);
  EXPECT_EQ(g.quant.targets, std::vector<std::string>{"Linear"});
  EXPECT_EQ(g.quant.ignore, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(g.quant.scheme, "W4A16");
  EXPECT_EQ(g.block_size, 128);
  EXPECT_EQ(g.dampening_frac, 0.01);
  EXPECT_FALSE(g.actorder.has_value());
  EXPECT_TRUE(g.batched_quantization.enabled);
  EXPECT_EQ(g.batched_quantization.max_batch, 0);
  EXPECT_FALSE(g.quant.config_groups.has_value());
  EXPECT_FALSE(g.quant.bypass_divisibility_checks);
}

TEST(RecipeParseTest, UnstagedBareAndJsonForms) {
  const Recipe a = parse_recipe("quant_modifiers:\n  QuantizationModifier: {scheme: FP8_DYNAMIC}\n", "a.yaml");
  ASSERT_EQ(a.stages.size(), 1u);
  EXPECT_EQ(a.stages[0].name, "default");
  EXPECT_EQ(a.stages[0].modifiers[0].group, "quant");
  const Recipe b = parse_recipe("SmoothQuantModifier: {smoothing_strength: 0.8}\nGPTQModifier: {scheme: W8A8}\n", "b");
  ASSERT_EQ(b.stages[0].modifiers.size(), 2u);
  EXPECT_EQ(b.stages[0].modifiers[0].group, "default");
  EXPECT_EQ(std::get<SmoothQuantModifier>(b.stages[0].modifiers[0].args).smoothing_strength, 0.8);
  const Recipe c = parse_recipe(
      R"({"default_stage": {"default_modifiers": {"QuantizationModifier": {"scheme": "FP8_DYNAMIC", "targets": "Linear"}}}})",
      "recipe.json");
  EXPECT_EQ(std::get<QuantizationModifier>(c.stages[0].modifiers[0].args).quant.scheme, "FP8_DYNAMIC");
  // Stage settings and recipe args of old recipes are ignored, as llm-compressor ignores them.
  EXPECT_NO_THROW(parse_recipe("version: 1.1.0\nargs: {x: 1}\nq_stage:\n  run_type: oneshot\n"
                               "  q_modifiers:\n    QuantizationModifier: {scheme: W8A16}\n", "old.yaml"));
}

TEST(RecipeParseTest, AppendedStagesKeepTheirNumber) {
  const Recipe r = parse_recipe(
      "default_stage_0:\n  default_modifiers:\n    GPTQModifier: {scheme: W4A16}\n"
      "default_stage_1:\n  default_modifiers:\n    QuantizationModifier: {scheme: FP8_DYNAMIC}\n",
      "recipe.yaml");
  ASSERT_EQ(r.stages.size(), 2u);
  EXPECT_EQ(r.stages[0].name, "default_0");
  EXPECT_EQ(r.stages[1].name, "default_1");
}

TEST(RecipeParseTest, LaxCoercionsPydanticAccepts) {
  const Recipe r = parse_recipe(
      "GPTQModifier:\n"
      "  targets: Linear\n"           // a string becomes a one-element list
      "  scheme: w4a16\n"             // preset names are case-insensitive
      "  block_size: '64'\n"          // pydantic's lax int
      "  dampening_frac: 1e-3\n"      // a string to PyYAML, a float to pydantic
      "  bypass_divisibility_checks: 1\n"
      "  actorder: DYNAMIC\n"
      "  batched_quantization: 8\n",
      "r.yaml");
  const auto& g = std::get<GptqModifier>(r.stages[0].modifiers[0].args);
  EXPECT_EQ(g.quant.targets, std::vector<std::string>{"Linear"});
  EXPECT_EQ(g.block_size, 64);
  EXPECT_EQ(g.dampening_frac, 0.001);
  EXPECT_TRUE(g.quant.bypass_divisibility_checks);
  EXPECT_EQ(g.actorder, ActOrder::Group);
  EXPECT_EQ(g.batched_quantization.max_batch, 8);
}

TEST(RecipeParseTest, TransformModifierFields) {
  const Recipe r = parse_recipe(
      "s_stage:\n  s_modifiers:\n"
      "    SmoothQuantModifier:\n"
      "      smoothing_strength: 0.65\n"
      "      mappings:\n      - [['re:.*q_proj$', 're:.*k_proj$'], 're:.*input_layernorm$']\n"
      "      ignore: [model.norm]\n      num_calibration_steps: 16\n      algorithm: log_equalization\n"
      "    AWQModifier:\n"
      "      mappings:\n      - {smooth_layer: 're:.*up_proj$', balance_layers: ['re:.*down_proj$'],"
      " activation_hook_target: mlp}\n"
      "      offload_device: null\n      duo_scaling: both\n      n_grid: 10\n"
      "    QuantizationModifier: {scheme: W4A16_ASYM, observer: {weights: mse}}\n",
      "r.yaml");
  const auto& mods = r.stages[0].modifiers;
  ASSERT_EQ(mods.size(), 3u);
  const auto& s = std::get<SmoothQuantModifier>(mods[0].args);
  EXPECT_EQ(s.smoothing_strength, 0.65);
  ASSERT_TRUE(s.mappings.has_value());
  EXPECT_EQ((*s.mappings)[0].balance_layers.size(), 2u);
  EXPECT_EQ((*s.mappings)[0].smooth_layer, "re:.*input_layernorm$");
  EXPECT_EQ(s.ignore, std::vector<std::string>{"model.norm"});
  EXPECT_EQ(s.num_calibration_steps, 16);
  EXPECT_EQ(s.algorithm, SmoothQuantModifier::Algorithm::LogEqualization);
  const auto& a = std::get<AwqModifier>(mods[1].args);
  ASSERT_TRUE(a.mappings.has_value());
  EXPECT_EQ((*a.mappings)[0].activation_hook_target, "mlp");
  EXPECT_EQ(a.offload_device, "");  // explicit null: no offloading
  EXPECT_EQ(a.duo_scaling, AwqModifier::DuoScaling::Both);
  EXPECT_EQ(a.n_grid, 10);
  const auto& q = std::get<QuantizationModifier>(mods[2].args);
  ASSERT_TRUE(q.quant.observer.has_value());
  EXPECT_EQ((*q.quant.observer)[0], (std::pair<std::string, std::string>{"weights", "mse"}));
}

TEST(RecipeParseTest, LegacyArgumentsAndGroupOverride) {
  // llm-compressor < 0.10 wrote AWQ with its quantization arguments; its shim splits them off.
  const Recipe r = parse_recipe(
      "AWQModifier: {scheme: W4A16_ASYM, targets: [Linear], ignore: [lm_head], duo_scaling: false}\n", "r");
  const auto& mods = r.stages[0].modifiers;
  ASSERT_EQ(mods.size(), 2u);
  EXPECT_EQ(std::get<AwqModifier>(mods[0].args).duo_scaling, AwqModifier::DuoScaling::Off);
  const auto& q = std::get<QuantizationModifier>(mods[1].args).quant;
  EXPECT_EQ(q.scheme, "W4A16_ASYM");
  EXPECT_EQ(q.ignore, std::vector<std::string>{"lm_head"});
  const Recipe g = parse_recipe(
      "x_stage:\n  a_modifiers:\n    GPTQModifier: {scheme: W4A16, group: b, offload_hessians: true, index: 2,"
      " start: -1, requires_calibration_data: true}\n",
      "r");
  EXPECT_EQ(g.stages[0].modifiers[0].group, "b");
}

TEST(RecipeParseTest, PythonTagsFromLlmCompressorOutput) {
  const Recipe r = parse_recipe(
      "default_stage:\n  default_modifiers:\n"
      "    AWQModifier:\n"
      "      offload_device: !!python/object/apply:llmcompressor.sentinel.Sentinel [not_provided,\n"
      "        /venv/llmcompressor/sentinel.py]\n"
      "    QuantizationModifier:\n"
      "      config_groups:\n        g:\n          targets: [Linear]\n          weights:\n"
      "            num_bits: 4\n"
      "            type: !!python/object/apply:compressed_tensors.quantization.quant_args.QuantizationType [\n"
      "              int]\n"
      "            strategy: !!python/object/apply:compressed_tensors.quantization.quant_args.QuantizationStrategy [\n"
      "              group]\n"
      "            group_size: 128\n",
      "recipe.yaml");
  const auto& mods = r.stages[0].modifiers;
  EXPECT_FALSE(std::get<AwqModifier>(mods[0].args).offload_device.has_value());
  const auto& groups = *std::get<QuantizationModifier>(mods[1].args).quant.config_groups;
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].second.weights->strategy, Strategy::Group);
  EXPECT_EQ(groups[0].second.weights->group_size, 128);
}

struct BadCase {
  const char* yaml;
  const char* message;  // a substring the error must contain
};

TEST(RecipeParseTest, ErrorsNameFileLineModifierAndField) {
  const std::string head = "quant_stage:\n  quant_modifiers:\n";
  const BadCase cases[] = {
      {"    GPTQModifier:\n      scheme: W4A16\n      block_size: \"abc\"\n",
       "recipe.yaml:5: GPTQModifier in quant_stage.quant_modifiers: block_size: expected an integer, got \"abc\""},
      {"    GPTQModifier: {scheme: W4A16, dampening_frac: -1}\n",
       "recipe.yaml:3: GPTQModifier in quant_stage.quant_modifiers: dampening_frac: must be a finite number >= 0"},
      {"    SmoothQuantModifier: {smoothing_strength: 2.0}\n    GPTQModifier: {scheme: W8A8}\n",
       "SmoothQuantModifier in quant_stage.quant_modifiers: smoothing_strength: must lie in [0, 1], got 2"},
      {"    SparseGPTModifier: {sparsity: 0.5}\n", "recipe.yaml:3: quant_stage.quant_modifiers: unsupported modifier "
                                                   "type `SparseGPTModifier`"},
      {"    GPTQModifier: {scheme: W4A16, blocksize: 64}\n", "blocksize: unknown argument (GPTQModifier takes block_size"},
      {"    GPTQModifier: {scheme: W4A16, block_size: 0}\n", "block_size: must be a positive integer, got 0"},
      {"    GPTQModifier: {scheme: W4A16, block_size: 12.5}\n", "block_size: expected an integer, got 12.5"},
      // Past 2^53 a written integer would not read back exactly (the recipe fuzzer's round trip).
      {"    GPTQModifier: {scheme: W4A16, block_size: \"99999999999999999\"}\n", "block_size: expected an integer"},
      {"    GPTQModifier:\n      config_groups:\n        g:\n          targets: [Linear]\n"
       "          weights: {num_bits: 8, type: float, strategy: block, block_structure: 128x9999999999999999}\n",
       "invalid block_structure"},
      {"    GPTQModifier: {scheme: W4A16, dampening_frac: null}\n", "dampening_frac: must be a number"},
      {"    GPTQModifier: {scheme: W4A16, actorder: sideways}\n", "actorder: expected static, weight, group"},
      {"    GPTQModifier: {scheme: W4A16, batched_quantization: true}\n", "batched_quantization: expected \"auto\""},
      {"    GPTQModifier: {scheme: W4A16, batched_quantization: 0}\n", "batched_quantization: must be"},
      {"    GPTQModifier: {scheme: W5A5}\n", "GPTQModifier in quant_stage.quant_modifiers: scheme:"},
      {"    GPTQModifier: {scheme: [W4A16]}\n", "scheme: expected a preset name or {PRESET: targets}"},
      {"    GPTQModifier: {scheme: W4A16, config_groups: {g: {targets: [Linear]}}}\n",
       "specify either `scheme` or `config_groups`"},
      {"    GPTQModifier: {scheme: W4A16, weight_observer: mse, observer: {input: mse}}\n", "observer: give either"},
      {"    GPTQModifier: {scheme: W4A16, observer: {weight: mse}}\n", "observer: invalid key `weight`"},
      {"    GPTQModifier: {scheme: W4A16, ignore: lm_head}\n", "ignore: expected a list of strings"},
      {"    GPTQModifier: {scheme: W4A16, ignore: [true]}\n", "ignore: expected a string, got true"},
      {"    GPTQModifier:\n      kv_cache_scheme: {num_bits: eight}\n", "recipe.yaml:4: GPTQModifier in "
                                                                        "quant_stage.quant_modifiers: kv_cache_scheme"},
      {"    GPTQModifier:\n      actorder: static\n      config_groups:\n        g:\n          targets: [Linear]\n"
       "          weights: {num_bits: 4, group_size: 128, actorder: group}\n",
       "actorder: GPTQModifier.actorder"},
      {"    QuantizationModifier: {}\n", "QuantizationModifier needs quantization fields"},
      {"    QuantizationModifier: [scheme]\n", "expected a mapping of arguments"},
      {"    AWQModifier: {duo_scaling: both}\n", "AWQModifier needs a QuantizationModifier or GPTQModifier after it"},
      {"    AWQModifier: {duo_scaling: Both}\n    QuantizationModifier: {scheme: W4A16}\n",
       "duo_scaling: expected true or false, got \"Both\""},
      {"    AWQModifier: {duo_scaling: both, n_grid: 3}\n    QuantizationModifier: {scheme: W4A16}\n",
       "n_grid: must be at least 4 with duo_scaling both, got 3"},
      {"    AWQModifier: {mappings: [{smooth_layer: a}]}\n    QuantizationModifier: {scheme: W4A16}\n",
       "each mapping needs smooth_layer and balance_layers"},
      {"    SmoothQuantModifier: {mappings: [[a, b, c]]}\n", "each mapping is [[balance layers], smooth layer]"},
      {"    SmoothQuantModifier: {calibration_function: f}\n", "calibration_function: only null"},
      {"    SmoothQuantModifier: {algorithm: magic}\n", "algorithm: expected smoothquant or log_equalization"},
      {"    GPTQModifier: {scheme: W4A16}\n    SmoothQuantModifier: {}\n"
       "  other_modifiers:\n    SmoothQuantModifier: {group: quant}\n",
       "stage `quant`, group `quant`: holds two SmoothQuantModifier"},
      {"    GPTQModifier: {scheme: W4A16, group: a}\n    QuantizationModifier: {scheme: W8A8, group: b}\n"
       "    SmoothQuantModifier: {group: a}\n",
       "group `a`: is split by group `b`"},
      {"    GPTQModifier: {scheme: W4A16}\n  extra: 1\n", "recipe.yaml:4: quant_stage: unknown key `extra`"},
  };
  for (const BadCase& c : cases) {
    const std::string message = error_of(head + c.yaml);
    EXPECT_NE(message.find(c.message), std::string::npos) << "YAML:\n" << c.yaml << "error: " << message;
  }
}

TEST(RecipeParseTest, DocumentLevelErrors) {
  EXPECT_NE(error_of("").find("recipe.yaml: a recipe is a mapping"), std::string::npos);
  EXPECT_NE(error_of("- GPTQModifier\n").find("a recipe is a mapping"), std::string::npos);
  EXPECT_NE(error_of("foo: 1\n").find("recipe.yaml:1: unknown top-level key `foo`"), std::string::npos);
  EXPECT_NE(error_of("quant_stage: {}\n").find("holds no modifiers"), std::string::npos);
  EXPECT_NE(error_of("quant_stage: [1]\n").find("expected a mapping of <group>_modifiers"), std::string::npos);
  EXPECT_NE(error_of("a_stage_0: {m_modifiers: {GPTQModifier: {}}}\na_0_stage: {}\n").find("appears twice"),
            std::string::npos);
  EXPECT_NE(error_of("GPTQModifier: {}\nGPTQModifier: {}\n").find("duplicate key `GPTQModifier`"), std::string::npos);
  EXPECT_THROW(read_recipe_file("/nonexistent/recipe.yaml"), IoError);
}

TEST(RecipeParseTest, ValidateRecipeBuiltInCode) {
  Recipe r;
  GptqModifier g;
  g.quant.scheme = "W4A16";
  r.stages.push_back({"default", {{"default", g}}});
  EXPECT_NO_THROW(validate_recipe(r, "code"));
  std::get<GptqModifier>(r.stages[0].modifiers[0].args).block_size = 0;
  EXPECT_THROW(validate_recipe(r, "code"), InvalidArgument);
  std::get<GptqModifier>(r.stages[0].modifiers[0].args).block_size = 128;
  r.stages[0].modifiers.push_back({"default", g});
  EXPECT_THROW(validate_recipe(r, "code"), InvalidArgument);  // two GPTQModifier in one group
  EXPECT_THROW(validate_recipe(Recipe{}, "code"), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::quant
