// OpenAI's presence/frequency penalties as vLLM applies them, and the logprob helpers, checked
// against torch running vLLM's own lines (tests/unit/runtime/data/sampler_penalties_golden.json,
// from scripts/fixtures/make_sampler_penalty_goldens.py) and against the properties vLLM's
// definition implies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "lowbit/error.h"
#include "runtime/sampler.h"

namespace lowbit::runtime {
namespace {

nlohmann::json golden() {
  std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/runtime/data/sampler_penalties_golden.json");
  EXPECT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

std::vector<float> floats(const nlohmann::json& values) {
  std::vector<float> out;
  for (double v : values) out.push_back(static_cast<float>(v));
  return out;
}

std::vector<int32_t> ids(const nlohmann::json& values) { return values.get<std::vector<int32_t>>(); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Bit-exact: vLLM's two float32 subtractions, done by torch, against ours.
TEST(SamplerPenaltiesTest, MatchesVllmFormulaRunByTorch) {
  const nlohmann::json data = golden();
  ASSERT_EQ(data["penalties"].size(), 6u);
  for (const auto& c : data["penalties"]) {
    std::vector<float> logits = floats(c["logits"]);
    const std::vector<float> expected = floats(c["expected"]);
    std::vector<int32_t> context = ids(c["prompt"]);
    const size_t output_begin = context.size();
    for (int32_t id : ids(c["output"])) context.push_back(id);
    // Greedy: sample() stops right after the penalties, leaving the penalized logits.
    Sampler sampler({.presence_penalty = c["presence"].get<float>(),
                     .frequency_penalty = c["frequency"].get<float>()});
    sampler.sample(logits, context, output_begin);
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_TRUE(same_bits(logits[i], expected[i]))
          << "id " << i << ": " << logits[i] << " vs torch " << expected[i] << " in case "
          << c["presence"] << "/" << c["frequency"];
    }
  }
}

TEST(SamplerPenaltiesTest, PenalizedLogitDropsByExactlyTheFormula) {
  std::vector<float> logits = {1.5f, -0.25f, 3.0f, 0.75f, 2.0f};
  const std::vector<float> before = logits;
  // Prompt [2, 2, 4], then output [1, 3, 3, 3].
  const std::vector<int32_t> context = {2, 2, 4, 1, 3, 3, 3};
  apply_presence_frequency_penalties(logits, std::span(context).subspan(3), 0.5f, 0.25f);
  EXPECT_EQ(logits[0], before[0]);  // never seen
  EXPECT_EQ(logits[2], before[2]);  // prompt only: OpenAI's penalties ignore the prompt
  EXPECT_EQ(logits[4], before[4]);
  EXPECT_EQ(logits[1], before[1] - 0.25f * 1 - 0.5f);
  EXPECT_EQ(logits[3], before[3] - 0.25f * 3 - 0.5f);
}

TEST(SamplerPenaltiesTest, ZeroPenaltiesChangeNothingBitForBit) {
  const std::vector<float> start = {0.1f, -7.3f, 12.5f, -0.0f, 3.25f, 1e-30f};
  const std::vector<int32_t> context = {0, 1, 2, 2, 3, 5, 5, 5};
  std::vector<float> with = start;
  Sampler sampler({.repetition_penalty = 1.3f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f});
  sampler.sample(with, context, 2);
  std::vector<float> reference = start;
  apply_repetition_penalty(reference, context, 1.3f);
  for (size_t i = 0; i < start.size(); ++i) EXPECT_TRUE(same_bits(with[i], reference[i])) << i;
}

// vLLM: repetition (on prompt and output) first, then frequency, then presence.
TEST(SamplerPenaltiesTest, RepetitionPenaltyComesFirst) {
  std::vector<float> logits = {2.0f, 0.0f};
  const std::vector<int32_t> context = {0};  // token 0 generated once
  Sampler sampler({.repetition_penalty = 2.0f, .presence_penalty = 0.25f, .frequency_penalty = 0.5f});
  sampler.sample(logits, context, 0);
  // 2 / 2 = 1, - 0.5, - 0.25. The other order would give (2 - 0.75) / 2 = 0.625.
  EXPECT_EQ(logits[0], 0.25f);
}

// Penalties act on logits before temperature: with T = 0.5, logits [1, 0] and one earlier
// token 0 under frequency 2, p(0) = softmax([-1, 0] / 0.5)[0] = 1 / (1 + e^2) = 0.1192. Applying
// the penalty after temperature would give softmax([2 - 2, 0]) = 0.5. 20000 draws: sigma 0.0023,
// so 0.02 is over 8 sigma away from both the wrong answer and a false failure.
TEST(SamplerPenaltiesTest, PenaltiesApplyBeforeTemperature) {
  Sampler sampler({.temperature = 0.5f, .frequency_penalty = 2.0f, .seed = 11});
  const std::vector<int32_t> context = {0};
  int zeros = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<float> logits = {1.0f, 0.0f};
    zeros += sampler.sample(logits, context, 0) == 0;
  }
  EXPECT_NEAR(zeros / 20000.0, 1.0 / (1.0 + std::exp(2.0)), 0.02);
}

TEST(SamplerPenaltiesTest, NegativePenaltiesEncourageRepeats) {
  Sampler sampler({.presence_penalty = -1.0f});
  std::vector<float> logits = {1.0f, 0.5f};
  const std::vector<int32_t> context = {9, 1};  // 9 is outside the vocabulary: ignored
  EXPECT_EQ(sampler.sample(logits, context, 0), 1);
  EXPECT_EQ(logits[1], 0.5f + 1.0f);  // 0.5 - (-1) * 1
}

TEST(SamplerPenaltiesTest, OutputBeginSeparatesPromptFromOutput) {
  const std::vector<int32_t> context = {1, 1, 0};
  std::vector<float> prompt_excluded = {1.0f, 1.0f};
  Sampler({.frequency_penalty = 1.0f}).sample(prompt_excluded, context, 2);
  EXPECT_EQ(prompt_excluded[0], 0.0f);
  EXPECT_EQ(prompt_excluded[1], 1.0f);
  // The two-argument overload counts the whole context as output.
  std::vector<float> everything = {1.0f, 1.0f};
  Sampler({.frequency_penalty = 1.0f}).sample(everything, context);
  EXPECT_EQ(everything[0], 0.0f);
  EXPECT_EQ(everything[1], -1.0f);
  std::vector<float> logits = {1.0f, 1.0f};
  Sampler sampler({});
  EXPECT_THROW(sampler.sample(logits, context, 4), InvalidArgument);
}

TEST(SamplerPenaltiesTest, RejectsOutOfRangePenalties) {
  EXPECT_THROW(Sampler({.presence_penalty = 2.5f}), InvalidArgument);
  EXPECT_THROW(Sampler({.frequency_penalty = -2.01f}), InvalidArgument);
  EXPECT_THROW(Sampler({.frequency_penalty = std::numeric_limits<float>::quiet_NaN()}),
               InvalidArgument);
  EXPECT_NO_THROW(Sampler({.presence_penalty = -2.0f, .frequency_penalty = 2.0f}));
}

// Against torch.log_softmax in float64 from the same float32 logits: ours accumulates in double
// and rounds once to float, so it is within one float32 ulp (2^-23 relative) of the exact value.
// Against torch's float32 result (vLLM's raw logprobs), within 2 ulp plus its own rounding.
TEST(LogSoftmaxTest, MatchesTorch) {
  const nlohmann::json data = golden();
  for (const auto& c : data["log_softmax"]) {
    const std::vector<float> logits = floats(c["logits"]);
    std::vector<float> out(logits.size());
    log_softmax(logits, out);
    const std::vector<double> exact = c["expected64"].get<std::vector<double>>();
    const std::vector<double> torch32 = c["expected32"].get<std::vector<double>>();
    double total = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_NEAR(out[i], exact[i], std::max(1e-7, std::abs(exact[i]) * 1.2e-7)) << i;
      EXPECT_NEAR(out[i], torch32[i], std::max(1e-6, std::abs(torch32[i]) * 5e-7)) << i;
      total += std::exp(static_cast<double>(out[i]));
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST(LogSoftmaxTest, HandlesInfinitiesAndChecksSizes) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> out(3);
  log_softmax(std::vector<float>{0.0f, -inf, 0.0f}, out);
  EXPECT_FLOAT_EQ(out[0], std::log(0.5f));
  EXPECT_EQ(out[1], -inf);
  log_softmax(std::vector<float>{-inf, -inf, -inf}, out);
  EXPECT_EQ(out[2], -inf);
  std::vector<float> short_out(2);
  EXPECT_THROW(log_softmax(std::vector<float>{1.0f, 2.0f, 3.0f}, short_out), Error);
}

TEST(TopLogprobsTest, LargestFirstLowerIdOnTies) {
  const std::vector<float> logprobs = {-2.0f, -0.5f, -1.0f, -0.5f, -3.0f, -1.0f};
  const auto top = top_logprobs(logprobs, 4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0], (std::pair<int32_t, float>{1, -0.5f}));
  EXPECT_EQ(top[1], (std::pair<int32_t, float>{3, -0.5f}));
  EXPECT_EQ(top[2], (std::pair<int32_t, float>{2, -1.0f}));
  EXPECT_EQ(top[3], (std::pair<int32_t, float>{5, -1.0f}));
  EXPECT_EQ(top_logprobs(logprobs, 0).size(), 0u);
  EXPECT_EQ(top_logprobs(logprobs, -3).size(), 0u);
  EXPECT_EQ(top_logprobs(logprobs, 100).size(), logprobs.size());
}

}  // namespace
}  // namespace lowbit::runtime
