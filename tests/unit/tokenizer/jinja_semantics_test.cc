// One small template per Jinja semantic (whitespace control, scoping, Python printing, operators,
// filters, tests, methods, errors). Expected outputs and which cases raise come from jinja2 3.1.6
// inside transformers 5.17.0's chat-template environment, recorded by
// scripts/fixtures/chat_template_goldens.py in tests/golden/chat_templates/semantics.json.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lowbit/error.h"
#include "tokenizer/jinja/template.h"

namespace lowbit::jinja {
namespace {

struct SemanticCase {
  std::string name;
  std::string source;
  nlohmann::ordered_json variables;
  bool raises = false;
  std::string expected;  // output, or jinja's error message when raises
  std::string error_type;
};

std::vector<SemanticCase> load_cases() {
  std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/chat_templates/semantics.json");
  std::vector<SemanticCase> cases;
  if (!in) return cases;  // the Load test below reports the missing file
  for (const auto& j : nlohmann::ordered_json::parse(in)) {
    SemanticCase c;
    c.name = j["name"].get<std::string>();
    c.source = j["template"].get<std::string>();
    c.variables = j["variables"];
    c.raises = j.contains("error");
    c.expected = c.raises ? j["message"].get<std::string>() : j["expected"].get<std::string>();
    if (c.raises) c.error_type = j["error"].get<std::string>();
    cases.push_back(std::move(c));
  }
  return cases;
}

const std::vector<SemanticCase>& cases() {
  static const std::vector<SemanticCase> all = load_cases();
  return all;
}

TEST(JinjaSemanticsTest, GoldenFileLoads) { EXPECT_GT(cases().size(), 150u); }

class JinjaSemantics : public ::testing::TestWithParam<size_t> {};

TEST_P(JinjaSemantics, MatchesJinja) {
  const SemanticCase& c = cases()[GetParam()];
  SCOPED_TRACE("template: " + c.source);
  if (!c.raises) {
    std::string got;
    ASSERT_NO_THROW(got = Template(c.source).render(c.variables));
    EXPECT_EQ(got, c.expected);
    return;
  }
  // jinja raised: lowbit must raise too (syntax errors at parse or render, it does not matter
  // which).
  try {
    std::string got = Template(c.source).render(c.variables);
    ADD_FAILURE() << "expected " << c.error_type << " (" << c.expected << "), got output: " << got;
  } catch (const InvalidArgument& e) {
    // raise_exception() must carry the template's own message, which users see.
    if (c.error_type == "TemplateError") {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string n = cases()[info.param].name;
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(Golden, JinjaSemantics, ::testing::Range<size_t>(0, cases().size()),
                         case_name);

}  // namespace
}  // namespace lowbit::jinja
