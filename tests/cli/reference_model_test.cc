// The bundled model through the CLI, against transformers' numbers in
// tests/golden/ref-llama-19m/reference.json.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

nlohmann::json reference() {
  std::ifstream in(repo_path("tests/golden/ref-llama-19m/reference.json"));
  return nlohmann::json::parse(in);
}

double ppl_of(const std::string& text_file) {
  auto r = run_lowbit("ppl " + repo_path("models/ref-llama-19m") + " --text " + repo_path(text_file) +
                      " --ctx 512 --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto start = r.output.find('{');
  if (start == std::string::npos) return -1;
  return nlohmann::json::parse(r.output.substr(start))["perplexity"].get<double>();
}

// transformers scored the same windows in fp32; our sums differ only in rounding order, so 0.05%
// (the bound) is far above the expected ~1e-5 relative difference.
TEST(ReferenceModelCliTest, PerplexityOnHeldoutText) {
  double expected = reference()["ppl_heldout"];
  EXPECT_NEAR(ppl_of("data/text/heldout.txt"), expected, expected * 5e-4);
}

TEST(ReferenceModelCliTest, PerplexityOnWikiText) {
  double expected = reference()["ppl_wikitext2_test"];
  EXPECT_NEAR(ppl_of("data/text/wikitext2-test-rederived.txt"), expected, expected * 5e-4);
}

TEST(ReferenceModelCliTest, GreedyGenerationMatchesTransformersText) {
  auto ref = reference();
  for (size_t i = 0; i < ref["prompts"].size(); ++i) {
    std::string prompt = ref["prompts"][i];
    std::string expected = ref["greedy"][i];  // BOS token text + prompt + 48 greedy tokens
    auto r = run_lowbit("generate " + repo_path("models/ref-llama-19m") + " --prompt '" + prompt +
                        "' --max-tokens 48 --ignore-eos");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::string continuation = expected.substr(expected.find(prompt) + prompt.size());
    EXPECT_EQ(r.output, continuation + "\n") << "prompt " << i;
  }
}

TEST(ReferenceModelCliTest, TokenizeMatchesHuggingFace) {
  auto ref = reference();
  for (const auto& c : ref["tokenizer_cases"]) {
    std::string text = c["text"];
    if (text.find('\'') != std::string::npos || text.find('\n') != std::string::npos) continue;
    auto r = run_lowbit("tokenize " + repo_path("models/ref-llama-19m") + " --text '" + text + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output), c["ids_with_bos"]) << text;
  }
}

TEST(ReferenceModelCliTest, PromptIdsInIdsOut) {
  auto r = run_lowbit("generate " + repo_path("models/ref-llama-19m") +
                      " --prompt-ids 0,504,1364 --max-tokens 5 --output-ids");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto ids = nlohmann::json::parse(r.output);
  EXPECT_EQ(ids.size(), 5u);
}

}  // namespace
}  // namespace lowbit::testing
