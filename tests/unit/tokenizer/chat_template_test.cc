// Real model chat templates rendered by lowbit against transformers' own renders.
// Golden data: tests/golden/chat_templates/goldens.json, written by
// scripts/fixtures/chat_template_goldens.py with transformers 5.17.0 + jinja2 3.1.6
// (render_jinja_template, the function behind apply_chat_template; the ref-llama cases go through
// AutoTokenizer.apply_chat_template itself). Template sources:
// tests/golden/chat_templates/README.md.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lowbit/error.h"

namespace lowbit {
namespace {

const std::string kRoot = LOWBIT_SOURCE_DIR;
const std::string kGoldenDir = kRoot + "/tests/golden/chat_templates";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

const nlohmann::ordered_json& goldens() {
  static const nlohmann::ordered_json g = [] {
    std::ifstream in(kGoldenDir + "/goldens.json");
    return in ? nlohmann::ordered_json::parse(in) : nlohmann::ordered_json::object();
  }();
  return g;
}

struct ModelCase {
  std::string file;
  size_t index;
};

std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> out;
  if (!goldens().contains("templates")) return out;
  for (const auto& t : goldens()["templates"]) {
    for (size_t i = 0; i < t["cases"].size(); ++i) out.push_back({t["file"].get<std::string>(), i});
  }
  return out;
}

const nlohmann::ordered_json& case_json(const ModelCase& c) {
  for (const auto& t : goldens()["templates"]) {
    if (t["file"] == c.file) return t["cases"][c.index];
  }
  throw std::runtime_error("no template " + c.file);
}

TEST(ChatTemplateGoldenTest, CoversEveryModelTemplate) {
  ASSERT_TRUE(goldens().contains("templates")) << "missing " << kGoldenDir << "/goldens.json";
  EXPECT_EQ(goldens()["templates"].size(), 7u);
  EXPECT_GT(model_cases().size(), 120u);
}

class ModelTemplate : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelTemplate, MatchesTransformers) {
  const ModelCase& mc = GetParam();
  const auto& c = case_json(mc);
  ChatTemplate tpl(read(kGoldenDir + "/" + mc.file));
  bool agp = c["add_generation_prompt"].get<bool>();
  if (c.contains("expected")) {
    std::string got;
    ASSERT_NO_THROW(got = tpl.render(c["messages"], agp, c["extra"]));
    EXPECT_EQ(got, c["expected"].get<std::string>());
  } else {
    // transformers raised: so must we, with raise_exception's message intact.
    try {
      std::string got = tpl.render(c["messages"], agp, c["extra"]);
      ADD_FAILURE() << "transformers raised " << c["message"] << " but lowbit rendered: " << got;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(c["message"].get<std::string>()), std::string::npos)
          << e.what();
    }
  }
}

std::string model_case_name(const ::testing::TestParamInfo<ModelCase>& info) {
  std::string n = info.param.file.substr(0, info.param.file.size() - 6) + "_" +
                  case_json(info.param)["name"].get<std::string>();
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Golden, ModelTemplate, ::testing::ValuesIn(model_cases()),
                         model_case_name);

// The embedded reference model, end to end: template from the folder, special tokens from its
// tokenizer_config, and the string recorded in tests/golden/ref-llama-19m/reference.json.
TEST(ChatTemplateRefLlamaTest, MatchesReferenceExample) {
  const std::string dir = kRoot + "/models/ref-llama-19m";
  std::optional<ChatTemplate> tpl = ChatTemplate::from_dir(dir);
  ASSERT_TRUE(tpl.has_value());
  nlohmann::json specials = special_tokens_map(dir);
  EXPECT_EQ(specials, nlohmann::json(goldens()["ref_llama"]["special_tokens_map"]));
  auto reference =
      nlohmann::json::parse(read(kRoot + "/tests/golden/ref-llama-19m/reference.json"));
  nlohmann::ordered_json messages = {{{"role", "system"}, {"content", "You are terse."}},
                                     {{"role", "user"}, {"content", "Name a color."}}};
  EXPECT_EQ(tpl->render(messages, true, specials),
            reference["chat_template_example"].get<std::string>());
  for (const auto& c : goldens()["ref_llama"]["cases"]) {
    EXPECT_EQ(tpl->render(c["messages"], c["add_generation_prompt"].get<bool>(), specials),
              c["expected"].get<std::string>());
  }
}

TEST(SpecialTokensMapTest, MatchesTransformersOnRealConfigs) {
  EXPECT_EQ(special_tokens_map(kRoot + "/models/ref-llama-19m"),
            nlohmann::json(goldens()["special_tokens_maps"]["ref-llama-19m"]));
  EXPECT_EQ(special_tokens_map(kRoot + "/tests/golden/tokenizers/tinyllama-1.1b-chat"),
            nlohmann::json(goldens()["special_tokens_maps"]["tinyllama-1.1b-chat"]));
}

// from_dir's file lookup, on small folders written here.
class ChatTemplateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lowbit_chat_template_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::string render(const ChatTemplate& t) {
    return t.render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), false);
  }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateDirTest, NoTemplateGivesNullopt) {
  EXPECT_FALSE(ChatTemplate::from_dir(dir_.string()).has_value());
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(ChatTemplate::from_dir(dir_.string()).has_value());
  write("tokenizer_config.json", R"({"chat_template": null})");
  EXPECT_FALSE(ChatTemplate::from_dir(dir_.string()).has_value());
}

TEST_F(ChatTemplateDirTest, JinjaFileWinsOverConfig) {
  write("tokenizer_config.json", R"({"chat_template": "config {{ messages[0].content }}"})");
  ASSERT_TRUE(ChatTemplate::from_dir(dir_.string()).has_value());
  EXPECT_EQ(render(*ChatTemplate::from_dir(dir_.string())), "config hi");
  write("chat_template.jinja", "file {{ messages[0].content }}\n");
  EXPECT_EQ(render(*ChatTemplate::from_dir(dir_.string())), "file hi");
}

TEST_F(ChatTemplateDirTest, ListPicksDefault) {
  write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(render(*ChatTemplate::from_dir(dir_.string())), "D");
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THROW(ChatTemplate::from_dir(dir_.string()), InvalidArgument);
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(ChatTemplate::from_dir(dir_.string()), InvalidArgument);
  write("tokenizer_config.json", R"({"chat_template": )");
  EXPECT_THROW(ChatTemplate::from_dir(dir_.string()), InvalidArgument);
}

TEST_F(ChatTemplateDirTest, SpecialTokensFromStringsAndObjects) {
  write(
      "tokenizer_config.json",
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null,
            "pad_token": {"__type": "AddedToken", "content": "<pad>"}, "sep_token": "<sep>"})");
  EXPECT_EQ(special_tokens_map(dir_.string()),
            nlohmann::json({{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"pad_token", "<pad>"}}));
  EXPECT_EQ(special_tokens_map((dir_ / "missing").string()), nlohmann::json::object());
}

TEST(ChatTemplateApiTest, SyntaxErrorNamesLineAndColumn) {
  try {
    ChatTemplate("{% if x %}\n  {{ 1 + }}\n{% endif %}");
    FAIL() << "expected a syntax error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("syntax error at 2:"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateApiTest, RenderErrorNamesPosition) {
  ChatTemplate t("line one\n{{ raise_exception('Roles must alternate') }}");
  try {
    t.render(nlohmann::ordered_json::array(), false);
    FAIL() << "expected raise_exception to throw";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("Roles must alternate"), std::string::npos) << what;
    EXPECT_NE(what.find("2:1"), std::string::npos) << what;
  }
}

TEST(ChatTemplateApiTest, ToolsAndDocumentsAreNoneUnlessGiven) {
  ChatTemplate t(
      "{{ tools is none }} {{ documents is none }} {{ tools is defined }} {{ extra_var }}");
  EXPECT_EQ(t.render(nlohmann::ordered_json::array(), false, {{"extra_var", 3}}),
            "True True True 3");
  EXPECT_EQ(t.render(nlohmann::ordered_json::array(), false,
                     {{"tools", nlohmann::ordered_json::array()}}),
            "False True True ");
}

TEST(ChatTemplateApiTest, RejectsNonArrayMessages) {
  ChatTemplate t("x");
  EXPECT_THROW(t.render(nlohmann::ordered_json::object(), false), InvalidArgument);
  EXPECT_THROW(t.render(nlohmann::ordered_json::array(), false, nlohmann::ordered_json::array()),
               InvalidArgument);
}

}  // namespace
}  // namespace lowbit
