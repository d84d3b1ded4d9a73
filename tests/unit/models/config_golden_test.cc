// config.json interpretation and RoPE tables against transformers 5.17 itself: each case in
// data/config_cases.json (made by scripts/fixtures/make_config_cases.py) holds a config.json and
// what transformers' model built from it uses (head_dim, KV heads, eps, biases, q/k norms, window
// per layer, sparse layers, token ids, RoPE type / theta / original length, inv_freq and
// attention_scaling at load and after calls of given lengths).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "models/model_config.h"
#include "models/rope.h"

namespace lowbit::models {
namespace {

nlohmann::json load_cases() {
  std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/models/data/config_cases.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

const nlohmann::json& cases() {
  static const nlohmann::json data = load_cases();
  return data.at("cases");
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& c : cases()) {
    if (c.contains("expect")) names.push_back(c.at("name").get<std::string>());
  }
  return names;
}

const nlohmann::json& find_case(const std::string& name) {
  for (const auto& c : cases()) {
    if (c.at("name") == name) return c;
  }
  throw std::runtime_error("no case " + name);
}

RopeType expected_rope_type(const std::string& name) {
  if (name == "linear") return RopeType::LINEAR;
  if (name == "dynamic") return RopeType::DYNAMIC;
  if (name == "yarn") return RopeType::YARN;
  if (name == "longrope") return RopeType::LONGROPE;
  if (name == "llama3") return RopeType::LLAMA3;
  return RopeType::DEFAULT;
}

class ConfigGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigGoldenTest, MatchesTransformers) {
  const nlohmann::json& c = find_case(GetParam());
  const nlohmann::json& e = c.at("expect");
  const ModelConfig config = parse_model_config(c.at("config").dump(), GetParam());

  EXPECT_EQ(config.head_dim, e.at("head_dim").get<int64_t>());
  EXPECT_EQ(config.num_kv_heads, e.at("num_kv_heads").get<int64_t>());
  EXPECT_DOUBLE_EQ(config.rms_norm_eps, e.at("rms_norm_eps").get<double>());
  EXPECT_EQ(config.hidden_act, e.at("hidden_act").get<std::string>());
  EXPECT_EQ(config.tie_word_embeddings, e.at("tie_word_embeddings").get<bool>());
  EXPECT_EQ(config.attention_qkv_bias, e.at("qkv_bias").get<bool>());
  EXPECT_EQ(config.attention_out_bias, e.at("o_bias").get<bool>());
  EXPECT_EQ(config.mlp_bias, e.at("mlp_bias").get<bool>());
  EXPECT_EQ(config.qk_norm, e.at("qk_norm").get<bool>());
  EXPECT_EQ(config.sliding_window, e.at("sliding_window").get<std::vector<int64_t>>());
  EXPECT_EQ(config.layer_is_moe, e.at("moe_layers").get<std::vector<bool>>());

  auto id = [](const nlohmann::json& v) -> std::optional<int32_t> {
    if (v.is_null()) return std::nullopt;
    return v.get<int32_t>();
  };
  EXPECT_EQ(config.bos_token_id, id(e.at("bos_token_id")));
  EXPECT_EQ(config.pad_token_id, id(e.at("pad_token_id")));
  EXPECT_EQ(config.eos_token_ids, e.at("eos_token_ids").get<std::vector<int32_t>>());

  const nlohmann::json& rp = e.at("rope_parameters");
  EXPECT_EQ(config.rope.type, expected_rope_type(rp.at("rope_type").get<std::string>()));
  EXPECT_DOUBLE_EQ(config.rope.theta, rp.at("rope_theta").get<double>());
  if (rp.contains("original_max_position_embeddings") && config.rope.type != RopeType::DEFAULT &&
      config.rope.type != RopeType::LINEAR && config.rope.type != RopeType::DYNAMIC) {
    EXPECT_EQ(config.rope.original_max_position_embeddings,
              rp.at("original_max_position_embeddings").get<int64_t>());
  }

  for (const nlohmann::json& table : e.at("rope")) {
    const int64_t seq_len = table.at("seq_len").get<int64_t>();
    const RopeFrequencies ours = compute_rope_frequencies(config, seq_len);
    const std::vector<float> expected = table.at("inv_freq").get<std::vector<float>>();
    ASSERT_EQ(ours.inv_freq.size(), expected.size()) << "seq_len " << seq_len;
    for (size_t i = 0; i < expected.size(); ++i) {
      // Same fp32 formula; allow a couple of ulps for libm vs torch pow.
      EXPECT_NEAR(ours.inv_freq[i], expected[i], 1e-6 * std::fabs(expected[i]))
          << "seq_len " << seq_len << " index " << i;
    }
    EXPECT_NEAR(ours.attention_scaling, table.at("attention_scaling").get<double>(), 1e-6)
        << "seq_len " << seq_len;
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, ConfigGoldenTest, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

TEST(ConfigGoldenData, AllCasesLoadInTransformers) {
  // A case transformers rejected would silently test nothing.
  for (const auto& c : cases()) {
    EXPECT_TRUE(c.contains("expect")) << c.at("name") << ": " << c.value("transformers_error", "");
  }
  EXPECT_GE(case_names().size(), 20u);
}

}  // namespace
}  // namespace lowbit::models
