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

namespace lowbit::testing {
namespace {

// The greedy continuation of prompt 0 is known (reference.json); a stop string inside it must cut
// the output right before it, and the stop string itself is not printed.
TEST(ReferenceModelCliTest, StopStringEndsGeneration) {
  std::string expected = reference()["greedy"][0];
  std::string prompt = reference()["prompts"][0];
  std::string continuation = expected.substr(expected.find(prompt) + prompt.size());
  size_t cut = continuation.find("New World");
  ASSERT_NE(cut, std::string::npos);
  auto r = run_lowbit("generate --stop 'New World' --stop 'never appears' " +
                      repo_path("models/ref-llama-19m") + " --prompt '" + prompt + "' -n 48");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, continuation.substr(0, cut) + "\n");
}

// The chat template renders the prompt (reference.json's example, same messages) and the result
// is encoded without a second BOS.
TEST(ReferenceModelCliTest, ChatPromptUsesTheTemplate) {
  auto chat = run_lowbit("generate " + repo_path("models/ref-llama-19m") +
                         " --chat --system 'You are terse.' --prompt 'Name a color.' -n 1 --output-ids");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  std::string rendered = reference()["chat_template_example"];
  // Single quotes keep the newlines as they are for /bin/sh (the text has no single quote).
  auto ids = run_lowbit("tokenize " + repo_path("models/ref-llama-19m") + " --no-special-tokens --text '" +
                        rendered + "'");
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  auto rendered_ids = nlohmann::json::parse(ids.output);
  EXPECT_EQ(rendered_ids[0], 0);
  EXPECT_NE(rendered_ids[1], 0);  // exactly one BOS
  // Greedy next token after the rendered prompt: the same with --chat and with the raw ids.
  std::string id_list;
  for (const auto& id : rendered_ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(id.get<int>());
  auto raw = run_lowbit("generate " + repo_path("models/ref-llama-19m") + " --prompt-ids " + id_list +
                        " -n 1 --output-ids");
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_EQ(chat.output, raw.output);
}

}  // namespace
}  // namespace lowbit::testing
