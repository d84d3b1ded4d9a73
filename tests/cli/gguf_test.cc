// The CLI on GGUF files (tests/golden/gguf, made by scripts/fixtures/make_gguf_model_fixtures.py):
// `lowbit logits` with a text prompt goes through the GGUF's own tokenizer and weights and must
// give transformers' logits of the same file (1e-3 · max |logit|, as tests/golden/
// model_logits_test.cc: identical fp32 weights, only summation order differs); inspect / ppl run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "cli_runner.h"
#include "formats/safetensors.h"

namespace lowbit::testing {
namespace {

const std::string kQ8 = "tests/golden/gguf/ref-llama-2l-q8_0.gguf";
const std::string kQ4 = "tests/golden/gguf/ref-llama-2l-q4_k_m.gguf";

TEST(GgufCliTest, LogitsOfTextPromptMatchTransformers) {
  auto golden = formats::SafetensorsFile::open(repo_path("tests/golden/gguf/gguf_logits.safetensors"));
  Tensor expected = golden->get("q8_0.prompt0.logits");  // "The history of the city", with BOS
  std::filesystem::path out =
      std::filesystem::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "gguf-logits.safetensors";
  std::filesystem::create_directories(out.parent_path());
  auto r = run_lowbit("logits " + repo_path(kQ8) + " -p 'The history of the city' -o '" +
                      out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Tensor logits = formats::SafetensorsFile::open(out.string())->get("logits");
  ASSERT_EQ(logits.shape(), expected.shape());
  const float* a = logits.data_as<const float>();
  const float* b = expected.data_as<const float>();
  float max_abs = 0.0f, max_diff = 0.0f;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    max_abs = std::max(max_abs, std::fabs(b[i]));
    max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
  }
  EXPECT_LE(max_diff, 1e-3f * max_abs);
}

TEST(GgufCliTest, InspectDescribesTheFile) {
  auto r = run_lowbit("inspect --tensors " + repo_path(kQ4));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("runs on lowbit   yes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("layers           2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("blk.1.ffn_down.weight"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Q4_K"), std::string::npos) << r.output;
}

TEST(GgufCliTest, PerplexityRuns) {
  auto r = run_lowbit("ppl " + repo_path(kQ4) + " --text " + repo_path("data/text/heldout.txt") +
                      " --ctx 128 --max-windows 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("perplexity"), std::string::npos) << r.output;
}

TEST(GgufCliTest, UnknownArchitectureIsReported) {
  std::string bytes = read_file(repo_path(kQ4));
  const std::string value = std::string("\x05\0\0\0\0\0\0\0", 8);
  const size_t at = bytes.find(value + "llama");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + 8, 5, "gemma");
  std::filesystem::path path =
      std::filesystem::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "gemma-arch.gguf";
  std::filesystem::create_directories(path.parent_path());
  write_file(path, bytes);
  auto r = run_lowbit("generate " + quoted(path) + " --prompt-ids 0,1 -n 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("general.architecture 'gemma' is not supported"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace lowbit::testing
