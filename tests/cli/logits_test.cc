// `lowbit logits` writes what transformers computes: the golden prompt's logits at every position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "cli_runner.h"
#include "formats/safetensors.h"

namespace lowbit::testing {
namespace {

TEST(LogitsCliTest, MatchesTransformersAtEveryPosition) {
  auto golden = formats::SafetensorsFile::open(repo_path("tests/golden/ref-llama-19m/reference_logits.safetensors"));
  Tensor ids = golden->get("prompt0.input_ids");
  Tensor expected = golden->get("prompt0.logits");
  std::string id_list;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    id_list += (i ? "," : "") + std::to_string(ids.data_as<const int64_t>()[i]);
  }
  std::filesystem::path out = std::filesystem::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "logits.safetensors";
  std::filesystem::create_directories(out.parent_path());
  auto r = run_lowbit("logits " + repo_path("models/ref-llama-19m") + " --prompt-ids " + id_list +
                      " -o '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto written = formats::SafetensorsFile::open(out.string());
  Tensor logits = written->get("logits");
  ASSERT_EQ(logits.dtype(), DType::F32);
  ASSERT_EQ(logits.numel(), expected.numel());
  ASSERT_EQ(logits.dim(0), ids.numel());
  const float* got = logits.data_as<const float>();
  const float* want = expected.data_as<const float>();
  float max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    max_abs = std::max(max_abs, std::fabs(want[i]));
    max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
  }
  // The bound: both sides compute in fp32 from the same bf16 weights, so only summation
  // order differs (~1e-6 relative); 1e-3 of the largest logit leaves room for nothing else.
  EXPECT_LE(max_diff, 1e-3f * max_abs);
  EXPECT_FALSE(std::filesystem::exists(out.string() + ".tmp"));
}

}  // namespace
}  // namespace lowbit::testing
