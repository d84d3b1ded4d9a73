// `lowbit compare` as a user runs it, on the embedded model with three schemes: the table is
// internally consistent (sizes are the files on disk, ΔPPL is the two evals' perplexities, bits
// per weight are what the checkpoint stores), a rerun resumes (finished steps kept, a deleted step
// measured again), other options in the same DIR are refused, and `lowbit report` draws the result.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kModel = repo_path("models/ref-llama-19m");

int64_t safetensors_bytes(const fs::path& dir) {
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

// Small enough for a 2-core CI machine (about a minute per scheme), large enough to separate
// the schemes: 4 windows of 256 tokens (1020 scored tokens) and 40 task items.
std::string compare_args(const fs::path& out, const std::string& ctx = "256") {
  return "compare " + quoted(kModel) + " --schemes FP8_DYNAMIC,W8A8,W4A16 --dataset " +
         quoted(fs::path(repo_path("data/text/calibration.txt"))) + " --ppl " +
         quoted(fs::path(repo_path("data/text/heldout.txt"))) + " --ctx " + ctx + " --windows 4 --tasks " +
         quoted(fs::path(repo_path("data/tasks/heldout_mc.jsonl"))) +
         " --limit 40 --bench-prompt-tokens 64 --bench-decode-tokens 8 --bench-repeats 1 -o " +
         quoted(out);
}

json read_json(const fs::path& path) { return json::parse(read_file(path)); }

class CompareTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "compare");
    fs::remove_all(*dir_);
    first_ = new CliResult(run_lowbit(compare_args(*dir_)));
  }
  static void TearDownTestSuite() {
    delete first_;
    delete dir_;
  }
  static fs::path* dir_;
  static CliResult* first_;
};
fs::path* CompareTest::dir_ = nullptr;
CliResult* CompareTest::first_ = nullptr;

TEST_F(CompareTest, WritesAConsistentTable) {
  ASSERT_EQ(first_->exit_code, 0) << first_->output;
  const json result = read_json(*dir_ / "compare.json");
  EXPECT_EQ(result["format"], "lowbit-compare/1");
  const json& base = result["baseline"];
  // Sizes are the bytes of the safetensors files on disk.
  EXPECT_EQ(base["size_bytes"].get<int64_t>(), safetensors_bytes(kModel));
  EXPECT_DOUBLE_EQ(base["bits_per_weight"].get<double>(), 16.0);  // BF16 decoder weights
  const json base_eval = read_json(*dir_ / "steps/baseline.eval.json");
  EXPECT_DOUBLE_EQ(base["ppl"].get<double>(), base_eval["ppl"].get<double>());
  EXPECT_EQ(result["protocol"]["windows"], 4);

  ASSERT_EQ(result["schemes"].size(), 3u);
  std::map<std::string, double> mean_layer_error;
  for (const json& s : result["schemes"]) {
    const std::string name = s["scheme"];
    SCOPED_TRACE(name);
    const fs::path checkpoint = *dir_ / s["dir"].get<std::string>();
    EXPECT_EQ(s["size_bytes"].get<int64_t>(), safetensors_bytes(checkpoint));
    EXPECT_LT(s["size_bytes"].get<int64_t>(), base["size_bytes"].get<int64_t>());
    // ΔPPL is the scheme's eval against the baseline's eval on the same windows; that eval saw
    // the very baseline perplexity of the baseline's own run.
    const json eval = read_json(*dir_ / ("steps/" + s["dir"].get<std::string>() + ".eval.json"));
    EXPECT_DOUBLE_EQ(s["ppl"].get<double>(), eval["ppl"].get<double>());
    EXPECT_DOUBLE_EQ(eval["baseline_ppl"].get<double>(), base["ppl"].get<double>());
    EXPECT_NEAR(s["delta_ppl"].get<double>(),
                s["ppl"].get<double>() / base["ppl"].get<double>() - 1, 1e-12);
    EXPECT_DOUBLE_EQ(s["kld_mean"].get<double>(), eval["kld_mean"].get<double>());
    EXPECT_GT(s["kld_mean"].get<double>(), 0.0);
    // Stored bits per weight: codes plus scales. A bf16 scale per output channel of 384..1024
    // inputs adds at most 16/384 = 0.042 bit to 8; int4 groups of 128 with a bf16 scale add
    // 16/128 = 0.125 to 4 (plus the few bytes of weight_shape).
    const double bits = s["bits_per_weight"].get<double>();
    if (name == "W4A16") {
      EXPECT_GT(bits, 4.0);
      EXPECT_LT(bits, 4.25);
    } else {
      EXPECT_GT(bits, 8.0);
      EXPECT_LT(bits, 8.1);
    }
    EXPECT_GT(s["decode_tok_s"].get<double>(), 0.0);
    EXPECT_GT(s["peak_rss_bytes"].get<int64_t>(), 0);
    ASSERT_TRUE(s["task_acc"].is_number());
    // 8 layers x 7 projections, each with a positive error below 1 (W and Q(W) are close).
    ASSERT_EQ(s["layer_errors"].size(), 56u);
    double sum = 0;
    for (const json& e : s["layer_errors"]) {
      EXPECT_GT(e["rel_error"].get<double>(), 0.0) << e["name"];
      EXPECT_LT(e["rel_error"].get<double>(), 0.5) << e["name"];
      sum += e["rel_error"].get<double>();
    }
    mean_layer_error[name] = sum / 56;
  }
  // 16 int4 levels per group round far more coarsely than 256 int8 levels per channel.
  EXPECT_GT(mean_layer_error["W4A16"], 4 * mean_layer_error["W8A8"]);
  EXPECT_EQ(result["layer_error_metric"], "weight_rel_fro");
  // The table a person reads lists every row.
  const std::string table = read_file(*dir_ / "compare.md");
  for (const char* row : {"BF16 (baseline)", "| FP8_DYNAMIC |", "| W8A8 |", "| W4A16 |"}) {
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  }
}

TEST_F(CompareTest, ResumesKeepingFinishedSteps) {
  ASSERT_EQ(first_->exit_code, 0) << first_->output;
  const json before = read_json(*dir_ / "compare.json");
  // An interrupted run: one step's result is missing, the rest are kept.
  fs::remove(*dir_ / "steps/W4A16.bench.json");
  const CliResult again = run_lowbit(compare_args(*dir_));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("eval W4A16: kept from an earlier run"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("quantize W8A8: kept from an earlier run"), std::string::npos);
  EXPECT_NE(again.output.find("bench W4A16 done"), std::string::npos) << again.output;
  const json after = read_json(*dir_ / "compare.json");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(after["schemes"][i]["ppl"], before["schemes"][i]["ppl"]);
    EXPECT_EQ(after["schemes"][i]["size_bytes"], before["schemes"][i]["size_bytes"]);
  }
}

TEST_F(CompareTest, RefusesOtherOptionsInTheSameDirectory) {
  ASSERT_EQ(first_->exit_code, 0) << first_->output;
  const CliResult other = run_lowbit(compare_args(*dir_, "128"));
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("compare-options.json"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("ctx"), std::string::npos) << other.output;
  EXPECT_TRUE(fs::exists(*dir_ / "compare.json"));  // nothing of the earlier run was lost
}

TEST_F(CompareTest, ReportDrawsTheResult) {
  ASSERT_EQ(first_->exit_code, 0) << first_->output;
  const CliResult r = run_lowbit("report " + quoted(*dir_));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = read_file(*dir_ / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("W4A16"), std::string::npos);
}

TEST(CompareErrors, BadInputIsOneClearError) {
  const fs::path out = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "compare-bad";
  fs::remove_all(out);
  const std::string ppl = " --ppl " + quoted(fs::path(repo_path("data/text/heldout.txt"))) + " -o " + quoted(out);
  CliResult r = run_lowbit("compare " + quoted(kModel) + " --schemes W4A16,W5X9" + ppl);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("W5X9"), std::string::npos) << r.output;
  r = run_lowbit("compare " + quoted(kModel) + " --schemes W4A16 --algo best" + ppl);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--algo"), std::string::npos) << r.output;
  r = run_lowbit("compare /nonexistent --schemes W4A16" + ppl);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent"), std::string::npos) << r.output;
  // A directory that is not a compare result is never overwritten.
  fs::create_directories(out);
  write_file(out / "precious.txt", "keep me");
  r = run_lowbit("compare " + quoted(kModel) + " --schemes W4A16" + ppl);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(fs::exists(out / "precious.txt"));
}

}  // namespace
}  // namespace lowbit::testing
