// KL divergence and its statistics (llama.cpp's definitions), and the windows both perplexity
// protocols score: the reference protocol against perplexity() itself, the lm-eval protocol against
// lm-eval's own window functions (tests/golden/lm_eval/protocol_cases.json, from
// scripts/fixtures/make_lm_eval_goldens.sh).
#include "eval/kl_divergence.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "eval/perplexity.h"
#include "eval/py_text.h"
#include "eval/scored_windows.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::eval {
namespace {

const std::string kModel = std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m";

nlohmann::json protocol_cases() {
  std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/lm_eval/protocol_cases.json");
  return nlohmann::json::parse(in);
}

TEST(KlDivergenceTest, IdenticalRowsGiveExactlyZero) {
  const std::vector<float> row = {1.5f, -2.0f, 0.25f, 3.0f, -30.0f};
  const RowComparison c = compare_logit_rows(row.data(), row.data(), 5);
  EXPECT_EQ(c.kld, 0.0);
  EXPECT_TRUE(c.same_top);
}

// p = (1/2, 1/2) and q = (4/5, 1/5): KL(p ‖ q) = ½ ln(5/8) + ½ ln(5/2) = ln(5/4) and
// KL(q ‖ p) = ⅘ ln(8/5) + ⅕ ln(2/5). A handful of double operations: 1e-14 is a few ulps.
TEST(KlDivergenceTest, ClosedFormAndDirection) {
  const std::vector<float> uniform = {0.0f, 0.0f};
  const std::vector<float> skewed = {static_cast<float>(std::log(4.0)), 0.0f};
  // The fp32 logit ln 4 is not exact: the expected value uses the rounded logit.
  const double l = static_cast<double>(skewed[0]);
  const double q0 = std::exp(l) / (std::exp(l) + 1), q1 = 1 / (std::exp(l) + 1);
  const double base_is_uniform = 0.5 * std::log(0.5 / q0) + 0.5 * std::log(0.5 / q1);
  const double base_is_skewed = q0 * std::log(q0 / 0.5) + q1 * std::log(q1 / 0.5);
  EXPECT_NEAR(compare_logit_rows(skewed.data(), uniform.data(), 2).kld, base_is_uniform, 1e-14);
  EXPECT_NEAR(compare_logit_rows(uniform.data(), skewed.data(), 2).kld, base_is_skewed, 1e-14);
  EXPECT_NEAR(base_is_uniform, std::log(1.25), 1e-7);  // the fp32 rounding of ln 4 only
  EXPECT_GT(std::abs(base_is_uniform - base_is_skewed), 0.02);
}

TEST(KlDivergenceTest, InvariantToAShiftOfTheLogits) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> a(1000), b(1000), shifted(1000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = normal(rng);
    b[i] = a[i] + 0.3f * normal(rng);
    shifted[i] = b[i] + 8.0f;
  }
  const double kld = compare_logit_rows(b.data(), a.data(), 1000).kld;
  EXPECT_GT(kld, 0.0);
  // The shift rounds each logit by up to half an ulp of ~10 (5e-7): relative error well below 1e-4.
  EXPECT_NEAR(compare_logit_rows(shifted.data(), a.data(), 1000).kld, kld, 1e-4 * kld);
}

TEST(KlDivergenceTest, SameTopTakesTheFirstMaximum) {
  const std::vector<float> tie = {1.0f, 5.0f, 5.0f};
  const std::vector<float> second = {1.0f, 5.0f, 4.0f};
  const std::vector<float> third = {1.0f, 4.0f, 5.0f};
  EXPECT_TRUE(compare_logit_rows(tie.data(), second.data(), 3).same_top);
  EXPECT_FALSE(compare_logit_rows(tie.data(), third.data(), 3).same_top);
}

TEST(KldStatisticsTest, LlamaCppDefinitions) {
  // 0..10 shuffled: mean 5, E[x²] - E[x]² = 35 - 25 = 10, stderr sqrt(10 / 10) = 1; median 5;
  // p90 at 0.9 · 10 = 9, p99 at 9.9 (interpolated between 9 and 10).
  const KldStatistics s = kld_statistics({7, 3, 10, 0, 5, 1, 9, 2, 8, 4, 6}, 8);
  EXPECT_EQ(s.count, 11);
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.mean_stderr, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.median, 5.0);
  EXPECT_NEAR(s.p90, 9.0, 1e-12);
  EXPECT_NEAR(s.p99, 9.9, 1e-12);
  EXPECT_EQ(s.min, 0.0);
  EXPECT_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(s.same_top, 8.0 / 11.0);
  EXPECT_NEAR(s.same_top_stderr, std::sqrt(8.0 / 11.0 * 3.0 / 11.0 / 10.0), 1e-15);
  // Even count: the mean of the two middle values; 10 values or fewer: no uncertainty.
  const KldStatistics even = kld_statistics({4, 1, 3, 2}, 4);
  EXPECT_DOUBLE_EQ(even.median, 2.5);
  EXPECT_EQ(even.mean_stderr, 0.0);
  EXPECT_EQ(even.same_top, 1.0);
  EXPECT_EQ(kld_statistics({}, 0).count, 0);
}

// The reference windows are perplexity()'s: scoring them gives its total NLL bit for bit, and the
// model against itself has KLD exactly 0 and full top-1 agreement on every token.
TEST(ScoreWindowsTest, ReferenceProtocolEqualsPerplexityAndSelfKldIsZero) {
  auto model = models::Model::load(kModel);
  const Tokenizer tokenizer = Tokenizer::from_dir(kModel);
  const std::string text = read_text_file_universal_newlines(std::string(LOWBIT_SOURCE_DIR) +
                                                             "/data/text/heldout.txt");
  const std::vector<int32_t> tokens = tokenizer.encode(text.substr(0, 3000), false);
  PerplexityOptions options;
  options.context = 64;
  options.max_windows = 3;
  options.bos_id = 0;
  const PerplexityResult reference = perplexity(*model, tokens, options);
  const WindowScores scores = score_windows(*model, model.get(), reference_windows(tokens, options));
  EXPECT_EQ(scores.total_nll, reference.total_nll);
  EXPECT_EQ(scores.scored_tokens, reference.scored_tokens);
  EXPECT_EQ(scores.windows, 3);
  EXPECT_EQ(scores.base_total_nll, scores.total_nll);
  ASSERT_EQ(static_cast<int64_t>(scores.kld.size()), scores.scored_tokens);
  EXPECT_TRUE(std::all_of(scores.kld.begin(), scores.kld.end(), [](double k) { return k == 0.0; }));
  EXPECT_EQ(scores.same_top, scores.scored_tokens);
  // Quarters of a 64-token window: rows 0..15 and 48..63 (of which 48..62 are scored).
  EXPECT_EQ(scores.first_quarter_tokens, 3 * 16);
  EXPECT_EQ(scores.last_quarter_tokens, 3 * 15);
}

TEST(ScoredWindowsTest, LmEvalRollingWindowsMatchLmEval) {
  const nlohmann::json cases = protocol_cases().at("rolling_windows");
  ASSERT_GE(cases.size(), 5u);
  for (const nlohmann::json& c : cases) {
    const auto tokens = c.at("tokens").get<std::vector<int32_t>>();
    const auto windows = lm_eval_rolling_windows(tokens, c.at("prefix_token").get<int32_t>(),
                                                 c.at("max_length").get<int64_t>());
    const nlohmann::json& expected = c.at("windows");
    ASSERT_EQ(windows.size(), expected.size()) << c.dump();
    for (size_t w = 0; w < windows.size(); ++w) {
      EXPECT_EQ(windows[w].input, expected[w].at("input").get<std::vector<int32_t>>()) << c.dump();
      EXPECT_EQ(windows[w].first_scored, expected[w].at("first_scored").get<int64_t>()) << c.dump();
      EXPECT_EQ(windows[w].targets, expected[w].at("targets").get<std::vector<int32_t>>())
          << c.dump();
    }
  }
  // --windows keeps the first N.
  const std::vector<int32_t> tokens(20, 5);
  EXPECT_EQ(lm_eval_rolling_windows(tokens, 7, 4, 2).size(), 2u);
  EXPECT_EQ(lm_eval_rolling_windows(tokens, 7, 4).size(), 5u);
}

}  // namespace
}  // namespace lowbit::eval
