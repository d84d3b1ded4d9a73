#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "lowbit/error.h"

namespace lowbit::runtime {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

std::map<int32_t, int> histogram(SamplingParams params, const std::vector<float>& logits, int draws) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> copy = logits;
    ++counts[sampler.sample(copy, {})];
  }
  return counts;
}

TEST(SamplerTest, GreedyIsFirstArgmax) {
  Sampler sampler(SamplingParams{});
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(sampler.sample(logits, {}), 1);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f};
  std::vector<int32_t> context = {0, 1, 1};
  apply_repetition_penalty(logits, context, 2.0f);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], -4.0f);  // applied once per distinct id, not per occurrence
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

TEST(SamplerTest, PenaltyCanChangeTheGreedyChoice) {
  Sampler sampler(SamplingParams{.repetition_penalty = 3.0f});
  std::vector<float> logits = {2.0f, 1.0f};
  std::vector<int32_t> context = {0};
  EXPECT_EQ(sampler.sample(logits, context), 1);
}

// With temperature 1 and no filtering, frequencies follow the softmax. 20000 draws: the standard
// deviation of a frequency near 0.5 is 0.0035, so 0.02 is more than 5 sigma.
TEST(SamplerTest, FrequenciesFollowSoftmax) {
  std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  auto counts = histogram({.temperature = 1.0f, .seed = 7}, logits_of(probs), 20000);
  for (int id = 0; id < 4; ++id) EXPECT_NEAR(counts[id] / 20000.0, probs[static_cast<size_t>(id)], 0.02);
}

TEST(SamplerTest, TemperatureSharpens) {
  std::vector<double> probs = {0.6, 0.4};
  // p ∝ p_i^(1/T): at T=0.5 the split is 0.36/0.52 = 0.6923 vs 0.3077.
  auto counts = histogram({.temperature = 0.5f, .seed = 3}, logits_of(probs), 20000);
  EXPECT_NEAR(counts[0] / 20000.0, 0.36 / 0.52, 0.02);
}

TEST(SamplerTest, TopKTopPAndMinPRestrictTheSupport) {
  std::vector<float> logits = logits_of({0.5, 0.3, 0.15, 0.05});
  auto top_k = histogram({.temperature = 1.0f, .top_k = 2, .seed = 1}, logits, 2000);
  EXPECT_EQ(top_k.count(2) + top_k.count(3), 0u);
  EXPECT_GT(top_k[1], 0);
  auto top_p = histogram({.temperature = 1.0f, .top_p = 0.85f, .seed = 1}, logits, 2000);
  EXPECT_EQ(top_p.count(3), 0u);  // 0.5 + 0.3 + 0.15 = 0.95 ≥ 0.85: the 0.05 token is cut
  EXPECT_GT(top_p[2], 0);
  auto min_p = histogram({.temperature = 1.0f, .min_p = 0.5f, .seed = 1}, logits, 2000);
  EXPECT_EQ(min_p.count(2) + min_p.count(3), 0u);  // threshold 0.25: only 0.5 and 0.3 stay
  EXPECT_GT(min_p[1], 0);
}

TEST(SamplerTest, SameSeedSameSequence) {
  std::vector<float> logits = logits_of({0.25, 0.25, 0.25, 0.25});
  Sampler a({.temperature = 1.0f, .seed = 42});
  Sampler b({.temperature = 1.0f, .seed = 42});
  Sampler c({.temperature = 1.0f, .seed = 43});
  int differences = 0;
  for (int i = 0; i < 64; ++i) {
    std::vector<float> la = logits, lb = logits, lc = logits;
    int32_t ta = a.sample(la, {});
    EXPECT_EQ(ta, b.sample(lb, {}));
    differences += ta != c.sample(lc, {});
  }
  EXPECT_GT(differences, 0);
}

TEST(SamplerTest, RejectsBadParameters) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), InvalidArgument);
  EXPECT_THROW(Sampler({.min_p = 1.5f}), InvalidArgument);
  EXPECT_THROW(Sampler({.repetition_penalty = 0.0f}), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::runtime
