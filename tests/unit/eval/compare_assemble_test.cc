// compare's table arithmetic on hand-made step results: ΔPPL as a fraction of the baseline, the
// task score as the mean over tasks with the standard error of a mean, and the cross-check that
// every eval saw the same baseline.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/compare_assemble.h"
#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

using nlohmann::json;

CompareModelSteps baseline_steps() {
  CompareModelSteps b;
  b.dir = "/models/base";
  b.eval = {{"ppl", 20.0}, {"ppl_windows", 4},
            {"tasks", json::array({{{"kind", "multiple_choice"}, {"acc", 0.6}, {"acc_stderr", 0.03}}})}};
  b.bench = {{"decode_tps", 100.0}, {"prefill_tps", 900.0}, {"peak_rss_bytes", 1000}, {"threads", 2}};
  b.size = {2000, 16.0, 0};
  return b;
}

CompareSchemeSteps scheme_steps(double ppl, double baseline_ppl) {
  CompareSchemeSteps s;
  s.scheme = "W4A16";
  s.algo = "gptq";
  s.dir = "W4A16-gptq";
  s.eval = {{"ppl", ppl}, {"baseline_ppl", baseline_ppl}, {"kld_mean", 0.02}, {"kld_p99", 0.2},
            {"top1_agreement", 0.9},
            {"pitfalls", json::array({{{"kind", "shorter_outputs"}, {"message", "m"}}})}};
  s.bench = {{"decode_tps", 250.0}};
  s.size = {600, 4.125, 56};
  return s;
}

CompareOptions options() {
  CompareOptions o;
  o.model = "/models/base";
  o.ppl_text = "heldout.txt";
  o.ctx = 512;
  return o;
}

TEST(CompareAssemble, RowsCarryTheStepsFigures) {
  const CompareResult r =
      assemble_compare(options(), baseline_steps(), {scheme_steps(21.0, 20.0)}, {}, "2026-11-29T00:00:00Z");
  EXPECT_EQ(r.baseline.name, "BF16");
  EXPECT_EQ(r.protocol.windows, 4);
  ASSERT_EQ(r.schemes.size(), 1u);
  const CompareScheme& s = r.schemes[0];
  EXPECT_NEAR(s.delta_ppl, 0.05, 1e-15);  // 21 / 20 - 1, a fraction, not points
  EXPECT_EQ(s.label(), "W4A16 GPTQ");
  EXPECT_EQ(s.kv_cache, "auto");
  EXPECT_DOUBLE_EQ(*s.kld_mean, 0.02);
  EXPECT_DOUBLE_EQ(*s.decode_tok_s, 250.0);
  EXPECT_FALSE(s.prefill_tok_s.has_value());  // not measured stays "not measured"
  EXPECT_FALSE(s.task_acc.has_value());
  ASSERT_EQ(s.pitfalls.size(), 1u);
  EXPECT_EQ(s.pitfalls[0].kind, "shorter_outputs");
  EXPECT_EQ(r.baseline.peak_rss_bytes, 1000);
  // What it produced passes the strict reader report and recommend use.
  EXPECT_NO_THROW(CompareResult::from_json(r.to_json(), "assembled"));
}

TEST(CompareAssemble, EvalsThatSawAnotherBaselineAreRefused) {
  try {
    assemble_compare(options(), baseline_steps(), {scheme_steps(21.0, 20.5)}, {}, "t");
    FAIL() << "a baseline perplexity of 20.5 against 20 was accepted";
  } catch (const Internal& e) {
    EXPECT_NE(std::string(e.what()).find("W4A16-gptq"), std::string::npos) << e.what();
  }
}

TEST(CompareAssemble, TaskScoreIsTheMeanOverTasks) {
  const json eval = {{"tasks", json::array({
                         {{"kind", "multiple_choice"}, {"acc", 0.5}, {"acc_stderr", 0.03}},
                         {{"kind", "generation"}, {"exact_match_flexible", 0.3},
                          {"exact_match_flexible_stderr", 0.04}},
                     })}};
  const auto score = task_score(eval);
  ASSERT_TRUE(score.has_value());
  EXPECT_DOUBLE_EQ(score->acc, 0.4);
  // Independent tasks: se of the mean = sqrt(0.03² + 0.04²) / 2 = 0.025.
  EXPECT_NEAR(score->stderr_, 0.025, 1e-15);
  EXPECT_FALSE(task_score(json{{"ppl", 3.0}}).has_value());
}

TEST(CompareAssemble, LabelsNameAlgorithmAndCache) {
  EXPECT_EQ(scheme_label("w4a16", "rtn", ""), "W4A16");
  EXPECT_EQ(scheme_label("W4A16", "gptq", ""), "W4A16-gptq");
  EXPECT_EQ(scheme_label("FP8_DYNAMIC", "rtn", "fp8"), "FP8_DYNAMIC-kvfp8");
}

TEST(CompareAssemble, StepArgumentsFollowTheOptions) {
  CompareOptions o = options();
  o.kv_cache = "fp8";
  o.tasks = {"a.jsonl", "b.jsonl"};
  o.threads = 2;
  const auto eval = eval_argv("lowbit", o, "DIR/W4A16", true, "out.json");
  const std::string joined = [&] {
    std::string s;
    for (const auto& a : eval) s += a + " ";
    return s;
  }();
  EXPECT_NE(joined.find("--baseline /models/base"), std::string::npos) << joined;
  EXPECT_NE(joined.find("--tasks a.jsonl b.jsonl"), std::string::npos) << joined;
  EXPECT_NE(joined.find("--kv-cache-dtype fp8"), std::string::npos) << joined;
  EXPECT_NE(joined.find("--threads 2"), std::string::npos) << joined;
  // The baseline's own eval runs as stored: no baseline, no fp8 cache.
  const auto base = eval_argv("lowbit", o, o.model, false, "b.json");
  for (const auto& a : base) {
    EXPECT_NE(a, "--baseline");
    EXPECT_NE(a, "--kv-cache-dtype");
  }
  // Two runs with the same protocol match whatever their schemes and threads.
  CompareOptions other = o;
  other.schemes = {"W8A8"};
  other.threads = 8;
  EXPECT_EQ(compare_protocol_json(o), compare_protocol_json(other));
  other.ctx = 1024;
  EXPECT_NE(compare_protocol_json(o), compare_protocol_json(other));
}

}  // namespace
}  // namespace lowbit::eval
