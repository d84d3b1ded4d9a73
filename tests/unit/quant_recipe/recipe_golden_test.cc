// Recipes llm-compressor 0.14.0.1 wrote (data/llmc/<case>.yaml, most saved by a real oneshot run)
// parsed by lowbit and compared field by field with the modifiers llm-compressor itself builds from
// the same file (data/llmc/<case>.json); see scripts/reference/make_recipe_goldens.py.
//
// lowbit's own recipe.yaml for each case (and for recipe_from_flags) is committed under
// data/lowbit/ and must match recipe_to_yaml byte for byte; those files were loaded with
// llm-compressor's parser by `make_recipe_goldens.py --verify-lowbit`, which checks that it reads
// them as the original recipes. After an intended change of the writer, regenerate them with
// LOWBIT_RECIPE_WRITE_DIR=tests/unit/quant_recipe/data/lowbit and run the verifier again.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "lowbit/error.h"
#include "quant/recipe/recipe.h"

namespace lowbit::quant {
namespace {

// Ordered: key order carries meaning (config groups, scheme presets, observer entries).
using json = nlohmann::ordered_json;

// The compressed-tensors parsers take nlohmann::json.
nlohmann::json plain(const json& j) { return nlohmann::json::parse(j.dump()); }

const std::string kData = std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/quant_recipe/data/";
const char* const kCases[] = {
    "w4a16_gptq",           "w8a8_smoothquant_gptq", "awq_w4a16_asym",     "awq_before_oneshot",
    "fp8_dynamic",          "fp8_kv_cache_preset",   "kv_cache_fp8_example", "kv_cache_example_text",
    "gptq_options",         "transforms_options",    "appended_fp8_dynamic"};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing " << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Compares with the committed file; with LOWBIT_RECIPE_WRITE_DIR set, (re)writes it there first.
void expect_lowbit_file(const std::string& name, const std::string& text) {
  if (const char* dir = std::getenv("LOWBIT_RECIPE_WRITE_DIR")) {
    std::ofstream(std::string(dir) + "/" + name + ".yaml", std::ios::binary) << text;
  }
  EXPECT_EQ(text, read_file(kData + "lowbit/" + name + ".yaml")) << name;
}

std::vector<std::string> strings(const json& j) { return j.get<std::vector<std::string>>(); }

void expect_quantization(const QuantizationFields& q, const json& a) {
  EXPECT_EQ(q.targets, strings(a["targets"]));
  EXPECT_EQ(q.ignore, strings(a["ignore"]));
  if (a["scheme"].is_string()) {
    EXPECT_EQ(q.scheme, a["scheme"].get<std::string>());
    EXPECT_TRUE(q.scheme_map.empty());
  } else {
    EXPECT_TRUE(q.scheme.empty());
    std::vector<PresetTargets> expected;
    if (a["scheme"].is_object())
      for (const auto& [preset, targets] : a["scheme"].items()) expected.push_back({preset, strings(targets)});
    EXPECT_EQ(q.scheme_map, expected);
  }
  ASSERT_EQ(q.config_groups.has_value(), !a["config_groups"].is_null());
  if (q.config_groups) {
    ASSERT_EQ(q.config_groups->size(), a["config_groups"].size());
    size_t i = 0;
    for (const auto& [name, scheme] : a["config_groups"].items()) {
      EXPECT_EQ((*q.config_groups)[i].first, name);
      EXPECT_EQ((*q.config_groups)[i].second, parse_quant_scheme(plain(scheme), "golden " + name)) << name;
      ++i;
    }
  }
  ASSERT_EQ(q.kv_cache_scheme.has_value(), !a["kv_cache_scheme"].is_null());
  if (q.kv_cache_scheme) {
    EXPECT_EQ(*q.kv_cache_scheme, parse_quant_args(plain(a["kv_cache_scheme"]), "golden kv"));
  }
  auto observer = [&](const char* key) { return a[key].is_null() ? std::string() : a[key].get<std::string>(); };
  EXPECT_EQ(q.weight_observer, observer("weight_observer"));
  EXPECT_EQ(q.input_observer, observer("input_observer"));
  EXPECT_EQ(q.output_observer, observer("output_observer"));
  ASSERT_EQ(q.observer.has_value(), !a["observer"].is_null());
  if (q.observer) {
    std::vector<std::pair<std::string, std::string>> expected;
    for (const auto& [k, v] : a["observer"].items()) expected.push_back({k, v.get<std::string>()});
    EXPECT_EQ(*q.observer, expected);
  }
  EXPECT_EQ(q.bypass_divisibility_checks, a["bypass_divisibility_checks"].get<bool>());
}

void expect_gptq(const GptqModifier& g, const json& a) {
  expect_quantization(g.quant, a);
  EXPECT_EQ(g.block_size, a["block_size"].get<int64_t>());
  EXPECT_EQ(g.dampening_frac, a["dampening_frac"].get<double>());
  // llm-compressor writes its default (a sentinel) as the explicit "static", which it reads back as
  // the explicit ActivationOrdering.STATIC: lowbit does the same.
  const json& order = a["actorder"];
  const ActOrder expected = order.is_null()                                  ? ActOrder::None
                            : order == "static" || order == "weight"        ? ActOrder::Weight
                                                                              : ActOrder::Group;
  EXPECT_EQ(g.actorder, expected);
  const json& batching = a["batched_quantization"];
  EXPECT_EQ(g.batched_quantization.enabled, !batching.is_null());
  EXPECT_EQ(g.batched_quantization.max_batch, batching.is_number() ? batching.get<int64_t>() : 0);
}

void expect_smoothquant(const SmoothQuantModifier& s, const json& a) {
  EXPECT_EQ(s.smoothing_strength, a["smoothing_strength"].get<double>());
  ASSERT_EQ(s.mappings.has_value(), !a["mappings"].is_null());
  if (s.mappings) {
    ASSERT_EQ(s.mappings->size(), a["mappings"].size());
    for (size_t i = 0; i < s.mappings->size(); ++i) {
      EXPECT_EQ((*s.mappings)[i].balance_layers, strings(a["mappings"][i][0]));
      EXPECT_EQ((*s.mappings)[i].smooth_layer, a["mappings"][i][1].get<std::string>());
    }
  }
  EXPECT_EQ(s.ignore.has_value(), !a["ignore"].is_null());
  if (s.ignore) {
    EXPECT_EQ(*s.ignore, strings(a["ignore"]));
  }
  EXPECT_EQ(s.num_calibration_steps.has_value(), !a["num_calibration_steps"].is_null());
  const auto algorithm = a["algorithm"] == "smoothquant" ? SmoothQuantModifier::Algorithm::SmoothQuant
                                                         : SmoothQuantModifier::Algorithm::LogEqualization;
  EXPECT_EQ(s.algorithm, algorithm);
}

void expect_awq(const AwqModifier& w, const json& a) {
  ASSERT_EQ(w.mappings.has_value(), !a["mappings"].is_null());
  if (w.mappings) {
    ASSERT_EQ(w.mappings->size(), a["mappings"].size());
    for (size_t i = 0; i < w.mappings->size(); ++i) {
      const json& m = a["mappings"][i];
      EXPECT_EQ((*w.mappings)[i].smooth_layer, m["smooth_layer"].get<std::string>());
      EXPECT_EQ((*w.mappings)[i].balance_layers, strings(m["balance_layers"]));
      EXPECT_EQ((*w.mappings)[i].activation_hook_target.value_or("<null>"),
                m["activation_hook_target"].is_null() ? "<null>" : m["activation_hook_target"].get<std::string>());
    }
  }
  const json& device = a["offload_device"];  // the sentinel serializes as its name
  if (device == "not_provided") {
    EXPECT_FALSE(w.offload_device.has_value());
  } else {
    EXPECT_EQ(w.offload_device, device.is_null() ? "" : device.get<std::string>());
  }
  const auto duo = a["duo_scaling"] == "both" ? AwqModifier::DuoScaling::Both
                   : a["duo_scaling"] == true ? AwqModifier::DuoScaling::On
                                              : AwqModifier::DuoScaling::Off;
  EXPECT_EQ(w.duo_scaling, duo);
  EXPECT_EQ(w.n_grid, a["n_grid"].get<int64_t>());
}

// A resolved scheme from llm-compressor. GPTQ assigns its actorder after validation, so a
// `group` order can sit on a channel scheme, which compressed-tensors' (and lowbit's) validation
// refuses; it is parsed without and set afterwards.
QuantScheme resolved_scheme(json scheme, const std::string& name) {
  const json order = scheme["weights"].is_object() ? scheme["weights"]["actorder"] : json();
  if (!order.is_null()) scheme["weights"]["actorder"] = nullptr;
  QuantScheme s = parse_quant_scheme(plain(scheme), "golden resolved " + name);
  if (order == "group") s.weights->actorder = ActOrder::Group;
  else if (!order.is_null()) s.weights->actorder = ActOrder::Weight;  // "static" / "weight"
  return s;
}

// The config groups llm-compressor resolved (presets expanded, observers and actorder filled in).
void expect_resolved(const CompressedTensorsConfig& c, const json& r) {
  ASSERT_EQ(c.config_groups.size(), r["config_groups"].size());
  size_t i = 0;
  for (const auto& [name, scheme] : r["config_groups"].items()) {
    EXPECT_EQ(c.config_groups[i].first, name);
    EXPECT_EQ(c.config_groups[i].second, resolved_scheme(scheme, name))
        << name << ": lowbit " << quant_scheme_to_json(c.config_groups[i].second).dump() << "\nllm-compressor "
        << scheme.dump();
    ++i;
  }
  EXPECT_EQ(c.ignore, strings(r["ignore"]));
  EXPECT_EQ(c.kv_cache_scheme.has_value(), !r["kv_cache_scheme"].is_null());
}

void expect_modifier(const Modifier& m, const json& e) {
  EXPECT_EQ(m.type_name(), e["type"].get<std::string>());
  EXPECT_EQ(m.group, e["group"].get<std::string>());
  const json& a = e["args"];
  if (const auto* q = std::get_if<QuantizationModifier>(&m.args)) {
    expect_quantization(q->quant, a);
    expect_resolved(resolve_quantization_config(*q, "golden"), e["resolved"]);
  } else if (const auto* g = std::get_if<GptqModifier>(&m.args)) {
    expect_gptq(*g, a);
    expect_resolved(resolve_quantization_config(*g, "golden"), e["resolved"]);
  } else if (const auto* s = std::get_if<SmoothQuantModifier>(&m.args)) {
    expect_smoothquant(*s, a);
  } else {
    expect_awq(std::get<AwqModifier>(m.args), a);
  }
}

std::string stage_name(std::string key) {  // default_stage → default, default_stage_0 → default_0
  const size_t at = key.rfind("_stage");
  return key.erase(at, 6);
}

class RecipeGoldenTest : public testing::TestWithParam<const char*> {};

TEST_P(RecipeGoldenTest, ParsesLikeLlmCompressorAndRoundTrips) {
  const std::string name = GetParam();
  const Recipe r = parse_recipe(read_file(kData + "llmc/" + name + ".yaml"), name + ".yaml");
  const json expected = json::parse(read_file(kData + "llmc/" + name + ".json"));
  ASSERT_EQ(r.stages.size(), expected["stages"].size());
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const json& stage = expected["stages"][s];
    EXPECT_EQ(r.stages[s].name, stage_name(stage["key"]));
    ASSERT_EQ(r.stages[s].modifiers.size(), stage["modifiers"].size());
    for (size_t i = 0; i < r.stages[s].modifiers.size(); ++i) {
      SCOPED_TRACE(name + ": stage " + std::to_string(s) + ", modifier " + std::to_string(i));
      expect_modifier(r.stages[s].modifiers[i], stage["modifiers"][i]);
    }
  }
  const std::string yaml = recipe_to_yaml(r);
  EXPECT_EQ(parse_recipe(yaml, "lowbit.yaml"), r) << yaml;
  expect_lowbit_file(name, yaml);
}

INSTANTIATE_TEST_SUITE_P(Cases, RecipeGoldenTest, testing::ValuesIn(kCases));

Recipe golden(const std::string& name) { return parse_recipe(read_file(kData + "llmc/" + name + ".yaml"), name); }

template <class T>
T& nth(Recipe& r, size_t i) {
  return std::get<T>(r.stages[0].modifiers[i].args);
}

TEST(RecipeFlagsTest, BuildRecipesLikeLlmCompressorExamples) {
  QuantizeFlags gptq;  // defaults: W4A16, gptq, targets Linear, ignore lm_head
  Recipe r = recipe_from_flags(gptq);
  expect_lowbit_file("flags_gptq_w4a16", recipe_to_yaml(r));
  Recipe expected = golden("w4a16_gptq");
  nth<GptqModifier>(expected, 0).actorder.reset();  // the file spells the default sentinel "static"
  EXPECT_EQ(r, expected);

  QuantizeFlags sq;
  sq.scheme = "W8A8";
  sq.smoothquant = 0.8;
  r = recipe_from_flags(sq);
  expect_lowbit_file("flags_gptq_w8a8_smoothquant", recipe_to_yaml(r));
  expected = golden("w8a8_smoothquant_gptq");
  nth<GptqModifier>(expected, 1).actorder.reset();
  nth<SmoothQuantModifier>(expected, 0).mappings.reset();  // oneshot wrote the mappings it inferred
  nth<SmoothQuantModifier>(expected, 0).ignore.reset();    // and its `ignore: []`
  EXPECT_EQ(r, expected);

  QuantizeFlags awq;
  awq.scheme = "W4A16_ASYM";
  awq.algo = "awq";
  awq.awq_duo_scaling = "both";
  r = recipe_from_flags(awq);
  expect_lowbit_file("flags_awq_w4a16_asym", recipe_to_yaml(r));
  EXPECT_EQ(r, golden("awq_before_oneshot"));

  QuantizeFlags fp8;
  fp8.scheme = "FP8_DYNAMIC";
  fp8.algo = "rtn";
  r = recipe_from_flags(fp8);
  expect_lowbit_file("flags_rtn_fp8_dynamic", recipe_to_yaml(r));
  EXPECT_EQ(r, golden("fp8_dynamic"));

  QuantizeFlags kv;
  kv.scheme = "FP8";
  kv.algo = "rtn";
  kv.kv_cache = "fp8";
  r = recipe_from_flags(kv);
  expect_lowbit_file("flags_rtn_fp8_kv_cache", recipe_to_yaml(r));
  EXPECT_EQ(r, golden("fp8_kv_cache_preset"));
}

TEST(RecipeFlagsTest, GptqOptionsAndFlagErrors) {
  QuantizeFlags f;
  f.gptq_block_size = 64;
  f.gptq_dampening_frac = 0.05;
  f.gptq_actorder = "group";
  Recipe r = recipe_from_flags(f);
  EXPECT_EQ(nth<GptqModifier>(r, 0).block_size, 64);
  EXPECT_EQ(nth<GptqModifier>(r, 0).actorder, ActOrder::Group);
  f.gptq_actorder = "none";
  EXPECT_EQ(nth<GptqModifier>(r = recipe_from_flags(f), 0).actorder, ActOrder::None);

  auto error_of = [](QuantizeFlags flags) -> std::string {
    try {
      recipe_from_flags(flags);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  QuantizeFlags bad;
  bad.algo = "smart";
  EXPECT_NE(error_of(bad).find("--algo: expected rtn, gptq or awq"), std::string::npos);
  bad = {};
  bad.scheme = "W5A5";
  EXPECT_NE(error_of(bad).find("--scheme"), std::string::npos);
  bad = {};
  bad.smoothquant = 1.5;
  EXPECT_NE(error_of(bad).find("--smoothquant: must lie in [0, 1]"), std::string::npos);
  bad = {};
  bad.kv_cache = "int8";
  EXPECT_NE(error_of(bad).find("--kv-cache"), std::string::npos);
  bad = {};
  bad.gptq_block_size = -4;
  EXPECT_NE(error_of(bad).find("--block-size"), std::string::npos);
  bad = {};
  bad.gptq_actorder = "random";
  EXPECT_NE(error_of(bad).find("--actorder"), std::string::npos);
  bad = {};
  bad.algo = "awq";
  bad.awq_n_grid = 1;
  EXPECT_NE(error_of(bad).find("--n-grid"), std::string::npos);
  bad = {};
  bad.targets.clear();
  EXPECT_NE(error_of(bad).find("--targets"), std::string::npos);
}

TEST(RecipeYamlTest, QuotesWhatYaml11WouldRetype) {
  Recipe r;
  QuantizationModifier q;
  q.quant.scheme = "W8A16";
  q.quant.targets = {"yes", "1.0", "null", "", "re:.*\\.proj$", "it's", "line\nbreak", "0x10", "~", "Linear"};
  q.quant.ignore = {"lm_head", "#comment", "- dash", "key: value", "\xc3\xa9t\xc3\xa9", "tab\there", "\r"};
  GptqModifier g;
  g.quant.scheme = "W4A16";
  g.dampening_frac = 1e-5;  // written 1.0e-05: PyYAML reads `1e-05` as a string
  g.actorder = ActOrder::None;
  g.batched_quantization.enabled = false;
  r.stages.push_back({"odd: name", {{"a b", q}, {"c", g}}});
  const std::string yaml = recipe_to_yaml(r);
  EXPECT_EQ(parse_recipe(yaml, "quoted.yaml"), r) << yaml;
  EXPECT_NE(yaml.find("dampening_frac: 1.0e-05"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("actorder: null"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("batched_quantization: null"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("'yes'"), std::string::npos) << yaml;
}

}  // namespace
}  // namespace lowbit::quant
