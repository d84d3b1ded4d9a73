// config.json / generation_config.json parsing: the embedded model and fixtures, and the errors a
// bad file gets (each names the file and the field).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "lowbit/error.h"
#include "models/arch_registry.h"
#include "models/model_config.h"

namespace lowbit::models {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

nlohmann::json llama_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 100,
    "rms_norm_eps": 1e-5, "max_position_embeddings": 128,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}
  })");
}

template <typename Exception>
std::string error_of(const nlohmann::json& config) {
  try {
    parse_model_config(config.dump(), "config.json");
  } catch (const Exception& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

TEST(ModelConfigTest, LoadsTheEmbeddedModel) {
  const ModelConfig c = load_model_config(std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 384);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.num_heads, 6);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.vocab_size, 8192);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, RopeType::DEFAULT);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{1});
  EXPECT_FALSE(c.pad_token_id.has_value());  // null in config.json
  EXPECT_EQ(c.generation.pad_token_id, 1);   // generation_config.json sets it
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(8, 0));
  EXPECT_EQ(c.rotary_dim(), 64);
}

TEST(ModelConfigTest, EveryArchFixtureConfigParses) {
  const fs::path root = fs::path(LOWBIT_SOURCE_DIR) / "tests/golden/arch";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!fs::exists(entry.path() / "config.json")) continue;
    const ModelConfig c = load_model_config(entry.path().string());
    EXPECT_NE(ArchRegistry::instance().find(c.architecture), nullptr) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 3);
}

TEST(ModelConfigTest, RegistryHasAllEightArchitectures) {
  const std::vector<std::string> expected = {
      "GemmaForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM",
      "Phi3ForCausalLM",  "Qwen2ForCausalLM", "Qwen3ForCausalLM",   "Qwen3MoeForCausalLM"};
  EXPECT_EQ(ArchRegistry::instance().names(), expected);
}

TEST(ModelConfigTest, FallsBackToModelTypeWithoutArchitectures) {
  nlohmann::json j = llama_config();
  j.erase("architectures");
  j["model_type"] = "mistral";
  EXPECT_EQ(parse_model_config(j.dump(), "config.json").architecture, "MistralForCausalLM");
}

TEST(ModelConfigTest, UnsupportedArchitectureIsNamed) {
  nlohmann::json j = llama_config();
  j["architectures"] = {"GPT2LMHeadModel"};
  const std::string message = error_of<Unsupported>(j);
  EXPECT_THAT(message,
              HasSubstr("config.json: architectures[0] 'GPT2LMHeadModel' is not supported"));
  EXPECT_THAT(message, HasSubstr("LlamaForCausalLM"));  // lists what is supported
}

TEST(ModelConfigTest, KvHeadsMustDivideHeads) {
  nlohmann::json j = llama_config();
  j["num_key_value_heads"] = 3;
  EXPECT_EQ(error_of<InvalidArgument>(j),
            "config.json: num_key_value_heads (3) must divide num_attention_heads (8)");
}

TEST(ModelConfigTest, MissingAndMistypedFieldsAreNamed) {
  nlohmann::json j = llama_config();
  j.erase("hidden_size");
  EXPECT_EQ(error_of<InvalidArgument>(j), "config.json: hidden_size is required");
  j = llama_config();
  j["num_hidden_layers"] = "two";
  EXPECT_THAT(error_of<InvalidArgument>(j),
              HasSubstr("config.json: num_hidden_layers must be an integer, got string"));
  j = llama_config();
  j["vocab_size"] = 0;
  EXPECT_THAT(error_of<InvalidArgument>(j),
              HasSubstr("config.json: vocab_size (0) is out of range"));
  j = llama_config();
  j["rms_norm_eps"] = 0;
  EXPECT_THAT(error_of<InvalidArgument>(j),
              HasSubstr("config.json: rms_norm_eps (0) must be in (0, 1)"));
  j = llama_config();
  j["tie_word_embeddings"] = 1;
  EXPECT_THAT(error_of<InvalidArgument>(j),
              HasSubstr("config.json: tie_word_embeddings must be true or false"));
}

TEST(ModelConfigTest, MalformedJsonIsInvalidArgument) {
  EXPECT_THROW(parse_model_config("{\"hidden_size\": ", "config.json"), InvalidArgument);
  EXPECT_THROW(parse_model_config("[1, 2]", "config.json"), InvalidArgument);
  EXPECT_THROW(parse_model_config("", "config.json"), InvalidArgument);
}

TEST(ModelConfigTest, RopeErrorsNameTheField) {
  nlohmann::json j = llama_config();
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "linear"}};
  EXPECT_EQ(error_of<InvalidArgument>(j),
            "config.json: rope_scaling.factor is required for rope_type linear");
  j["rope_scaling"] = {{"type", "ntk-by-parts"}, {"factor", 2.0}};
  EXPECT_THAT(error_of<Unsupported>(j),
              HasSubstr("config.json: rope_scaling.rope_type 'ntk-by-parts' is not supported"));
  j["rope_scaling"] = {{"rope_type", "longrope"},
                       {"short_factor", {1.0, 1.0}},
                       {"long_factor", {1.0, 1.0, 1.0, 1.0}}};
  EXPECT_EQ(error_of<InvalidArgument>(j),
            "config.json: rope_scaling.short_factor has 2 values, expected rotary_dim / 2 = 4");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}};
  EXPECT_EQ(error_of<InvalidArgument>(j),
            "config.json: rope_scaling.high_freq_factor is required for rope_type llama3");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
  EXPECT_THAT(error_of<Unsupported>(j), HasSubstr("rope_parameters.full_attention"));
}

TEST(ModelConfigTest, Phi3AcceptsOnlyDefaultAndLongrope) {
  nlohmann::json j = llama_config();
  j["architectures"] = {"Phi3ForCausalLM"};
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_THAT(error_of<InvalidArgument>(j),
              HasSubstr("config.json: rope_parameters.rope_type 'llama3' is not accepted by "
                        "Phi3ForCausalLM"));
}

TEST(ModelConfigTest, OddRotaryDimensionIsRejected) {
  nlohmann::json j = llama_config();
  j["head_dim"] = 7;
  EXPECT_THAT(error_of<InvalidArgument>(j), HasSubstr("config.json: head_dim (7)"));
}

TEST(ModelConfigTest, UnsupportedActivationIsNamed) {
  nlohmann::json j = llama_config();
  j["hidden_act"] = "quick_gelu";
  EXPECT_THAT(error_of<Unsupported>(j), HasSubstr("config.json: hidden_act 'quick_gelu'"));
}

TEST(ModelConfigTest, MoeFieldsAreChecked) {
  nlohmann::json j = llama_config();
  j["architectures"] = {"MixtralForCausalLM"};
  j["num_local_experts"] = 4;
  j["num_experts_per_tok"] = 5;
  EXPECT_EQ(error_of<InvalidArgument>(j),
            "config.json: num_experts_per_tok (5) is out of range [1, 4]");
  j["num_experts_per_tok"] = 2;
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_TRUE(c.norm_topk_prob);  // Mixtral always renormalises
  EXPECT_EQ(c.moe_intermediate_size, 128);
  EXPECT_EQ(c.layer_is_moe, std::vector<bool>(2, true));
}

TEST(ModelConfigTest, QwenLayerTypesMustMatchLayerCount) {
  nlohmann::json j = llama_config();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["use_sliding_window"] = true;
  j["layer_types"] = {"full_attention"};
  EXPECT_EQ(error_of<InvalidArgument>(j),
            "config.json: layer_types has 1 entries, expected num_hidden_layers (2)");
}

TEST(ModelConfigTest, NegativeTokenIdsMeanNone) {
  nlohmann::json j = llama_config();
  j["pad_token_id"] = -1;  // written by some old conversions
  j["eos_token_id"] = {2, 7};
  const ModelConfig c = parse_model_config(j.dump(), "config.json");
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(c.bos_token_id, 1);  // LlamaConfig's default when the key is absent
}

TEST(GenerationConfigTest, OverridesEosAndReadsSamplingDefaults) {
  ModelConfig c = parse_model_config(llama_config().dump(), "config.json");
  apply_generation_config(R"({"eos_token_id": [5, 6], "do_sample": true, "temperature": 0.6,
                              "top_p": 0.9, "top_k": 50, "repetition_penalty": 1.1,
                              "max_new_tokens": 64, "pad_token_id": 0})",
                          "generation_config.json", c);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(c.generation.eos_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(c.generation.do_sample, true);
  EXPECT_DOUBLE_EQ(*c.generation.temperature, 0.6);
  EXPECT_DOUBLE_EQ(*c.generation.top_p, 0.9);
  EXPECT_EQ(c.generation.top_k, 50);
  EXPECT_DOUBLE_EQ(*c.generation.repetition_penalty, 1.1);
  EXPECT_EQ(c.generation.max_new_tokens, 64);
  EXPECT_EQ(c.generation.pad_token_id, 0);
  EXPECT_EQ(c.generation.bos_token_id, 1);  // inherited from config.json's (default) value
}

TEST(GenerationConfigTest, KeepsConfigEosWhenAbsentAndNamesBadFields) {
  ModelConfig c = parse_model_config(llama_config().dump(), "config.json");
  apply_generation_config("{}", "generation_config.json", c);
  EXPECT_EQ(c.generation.eos_token_ids, std::vector<int32_t>{2});
  try {
    apply_generation_config(R"({"temperature": "hot"})", "generation_config.json", c);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("generation_config.json: temperature must be a number"));
  }
}

TEST(ModelConfigTest, MissingConfigFileIsIoError) {
  EXPECT_THROW(load_model_config("/nonexistent-lowbit-dir"), IoError);
}

}  // namespace
}  // namespace lowbit::models
