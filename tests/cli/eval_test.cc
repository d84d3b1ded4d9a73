// `lowbit eval` as a user runs it: its perplexity is `lowbit ppl`'s, the model against itself has
// KLD 0 and full agreement, KLD grows W8A8 < FP8_DYNAMIC < W4A16 (RTN checkpoints written by
// `lowbit quantize` here), the lm-eval protocol scores every token once, generation tasks and the
// fp8 KV cache report, and bad input gives one clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = repo_path("models/ref-llama-19m");
const fs::path kHeldout = repo_path("data/text/heldout.txt");

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "eval";
  fs::create_directories(dir);
  return dir / name;
}

// Runs `lowbit eval ARGS --json FILE` and returns the JSON (test failure on a non-zero exit).
nlohmann::json eval_json(const std::string& args, const std::string& tag) {
  const fs::path out = scratch(tag + ".json");
  fs::remove(out);
  const CliResult r = run_lowbit("eval " + args + " --json " + quoted(out));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0 || !fs::exists(out)) return nlohmann::json::object();
  return nlohmann::json::parse(read_file(out));
}

const std::string kWindows = " --ppl " + quoted(kHeldout) + " --ctx 128 --windows 3";
const std::string kGreedy = " --greedy-prompts 2 --greedy-tokens 8";

TEST(EvalCliTest, PerplexityEqualsLowbitPpl) {
  for (const std::string flags : {" --ctx 128", " --ctx 96 --bos"}) {
    const CliResult ppl = run_lowbit("ppl " + quoted(kModel) + " --text " + quoted(kHeldout) +
                                     flags + " --max-windows 3 --json");
    ASSERT_EQ(ppl.exit_code, 0) << ppl.output;
    const auto expected = nlohmann::json::parse(ppl.output.substr(ppl.output.find('{')));
    const nlohmann::json j = eval_json(quoted(kModel) + " --ppl " + quoted(kHeldout) + flags +
                                           " --windows 3", "ppl");
    ASSERT_TRUE(j.contains("ppl")) << j.dump();
    // ppl prints 6 decimals of the same double; eval writes it whole.
    char printed[64];
    std::snprintf(printed, sizeof(printed), "%.6f", j["ppl"].get<double>());
    EXPECT_EQ(std::stod(printed), expected["perplexity"].get<double>()) << flags;
    EXPECT_EQ(j["ppl_tokens"], expected["scored_tokens"]);
    EXPECT_EQ(j["ppl_windows"], 3);
    EXPECT_EQ(j["protocol"]["perplexity"]["protocol"], "reference");
    EXPECT_EQ(j["protocol"]["perplexity"]["bos"], flags.find("--bos") != std::string::npos);
  }
}

TEST(EvalCliTest, ModelAgainstItselfIsExactlyZero) {
  const nlohmann::json j =
      eval_json(quoted(kModel) + " --baseline " + quoted(kModel) + kWindows + kGreedy, "self");
  ASSERT_TRUE(j.contains("kld_mean")) << j.dump();
  EXPECT_EQ(j["kld_mean"].get<double>(), 0.0);
  EXPECT_EQ(j["kld_max"].get<double>(), 0.0);
  EXPECT_EQ(j["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(j["delta_ppl"].get<double>(), 0.0);
  EXPECT_EQ(j["ppl"], j["baseline_ppl"]);
  // Same greedy outputs: every generated id is common. Each output has decode_tokens / 2 + 1 ids
  // (2 prompts; the first id of each comes from the prefill).
  EXPECT_EQ(j["greedy_match_len"].get<double>(),
            j["greedy"]["model"]["decode_tokens"].get<double>() / 2 + 1);
  EXPECT_GT(j["greedy_match_len"].get<double>(), 0.0);
  EXPECT_EQ(j["pitfalls"], nlohmann::json::array());
}

// RTN checkpoints of the embedded model: per-token KL(baseline ‖ quantized) must order the schemes
// by how much they round the weights, which dominates the error of this small model (it has no
// activation outliers). That order is W8A8 < FP8_DYNAMIC < W4A16, not the FP8 < W8A8 the issue
// expected: with per-channel scales, INT8's 255 evenly spaced levels round a weight row more
// finely than FP8 E4M3's 3 mantissa bits. Checked independently with torch 2.11 on this model's
// projection weights (per-channel absmax scales): relative RMS weight error INT8 0.75%,
// FP8 E4M3 2.6%, INT4 group-128 11.8%. FP8 wins over INT8 only when outliers stretch the range.
TEST(EvalCliTest, KldGrowsW8a8ThenFp8ThenW4a16) {
  std::vector<double> kld;
  for (const std::string scheme : {"W8A8", "FP8_DYNAMIC", "W4A16"}) {
    const fs::path out = scratch("rtn-" + scheme);
    const CliResult q = run_lowbit("quantize " + quoted(kModel) + " -o " + quoted(out) +
                                   " --scheme " + scheme + " --algo rtn --overwrite --no-progress");
    ASSERT_EQ(q.exit_code, 0) << q.output;
    const nlohmann::json j = eval_json(
        quoted(out) + " --baseline " + quoted(kModel) + kWindows + kGreedy, "rtn-" + scheme);
    ASSERT_TRUE(j.contains("kld_mean")) << j.dump();
    std::cout << scheme << ": kld_mean " << j["kld_mean"] << " kld_p99 " << j["kld_p99"]
              << " top1 " << j["top1_agreement"] << " delta_ppl " << j["delta_ppl"]
              << " greedy_match_len " << j["greedy_match_len"] << " kernels " << j["kernels"]
              << " pitfalls " << j["pitfalls"].size() << "\n";
    EXPECT_GT(j["kld_mean"].get<double>(), 0.0) << scheme;
    EXPECT_LE(j["top1_agreement"].get<double>(), 1.0);
    EXPECT_NEAR(j["delta_ppl"].get<double>(),
                j["ppl"].get<double>() - j["baseline_ppl"].get<double>(), 1e-12);
    kld.push_back(j["kld_mean"].get<double>());
  }
  ASSERT_EQ(kld.size(), 3u);
  EXPECT_LT(kld[0], kld[1]);
  EXPECT_LT(kld[1], kld[2]);
}

// A checkpoint whose LM head was quantized too (--ignore "" drops the default ignore: [lm_head]):
// eval reads the head's kernel from the loaded model and reports the pitfall.
TEST(EvalCliTest, QuantizedLmHeadIsAPitfall) {
  const fs::path out = scratch("rtn-W8A8-head");
  const CliResult q = run_lowbit("quantize " + quoted(kModel) + " -o " + quoted(out) +
                                 " --scheme W8A8 --algo rtn --ignore '' --overwrite --no-progress");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  const nlohmann::json j =
      eval_json(quoted(out) + " --baseline " + quoted(kModel) + kWindows + kGreedy, "head");
  ASSERT_TRUE(j.contains("pitfalls")) << j.dump();
  bool found = false;
  for (const nlohmann::json& p : j["pitfalls"]) found = found || p["kind"] == "lm_head_quantized";
  EXPECT_TRUE(found) << j["pitfalls"].dump();
}

// The lm-eval protocol scores every token of the document exactly once; the word and byte figures
// are the same NLL over the document's words and bytes.
TEST(EvalCliTest, LmEvalProtocolScoresEveryTokenOnce) {
  const fs::path text = scratch("doc.txt");
  write_file(text, read_file(kHeldout).substr(0, 2500));
  const nlohmann::json j =
      eval_json(quoted(kModel) + " --ppl " + quoted(text) + " --ppl-protocol lm-eval --ctx 128",
                "lm-eval");
  ASSERT_TRUE(j.contains("word_perplexity")) << j.dump();
  EXPECT_EQ(j["ppl_tokens"], j["protocol"]["perplexity"]["text_tokens"]);
  EXPECT_GT(j["ppl_windows"].get<int64_t>(), 1);
  const double nll = std::log(j["ppl"].get<double>()) * j["ppl_tokens"].get<double>();
  const double bytes = static_cast<double>(read_file(text).size());
  EXPECT_NEAR(j["bits_per_byte"].get<double>(), nll / bytes / std::log(2.0), 1e-9);
  EXPECT_NEAR(std::log(j["byte_perplexity"].get<double>()), nll / bytes, 1e-9);
  EXPECT_GT(j["word_perplexity"].get<double>(), j["ppl"].get<double>());  // more tokens than words
  // Part of the document (--windows): no word or byte figures, which need all of it.
  const nlohmann::json part = eval_json(
      quoted(kModel) + " --ppl " + quoted(text) + " --ppl-protocol lm-eval --ctx 128 --windows 1",
      "lm-eval-part");
  EXPECT_EQ(part["ppl_tokens"], 128);
  EXPECT_FALSE(part.contains("word_perplexity")) << part.dump();
}

TEST(EvalCliTest, GenerationTaskAndFp8KvCache) {
  const fs::path task = scratch("gsm.jsonl");
  write_file(task, "{\"question\": \"Tom has 2 apples and buys 3 more. How many?\", \"answer\": \"2 + 3 = 5\\n#### 5\"}\n"
                   "{\"question\": \"What is 4 times 2?\", \"answer\": \"4 * 2 = 8\\n#### 8\"}\n"
                   "{\"question\": \"What is 10 minus 7?\", \"answer\": \"10 - 7 = 3\\n#### 3\"}\n");
  const nlohmann::json j = eval_json(quoted(kModel) + " --baseline " + quoted(kModel) + kWindows +
                                         kGreedy + " --kv-cache-dtype fp8 --tasks " + quoted(task) +
                                         " --num-fewshot 1 --max-gen-tokens 12",
                                     "gen");
  ASSERT_TRUE(j.contains("tasks")) << j.dump();
  EXPECT_EQ(j["tasks"][0]["kind"], "generation");
  EXPECT_EQ(j["tasks"][0]["n"], 2);  // the first item is the 1-shot example
  const double strict = j["task_exact_match_strict"];
  EXPECT_TRUE(strict == 0.0 || strict == 0.5 || strict == 1.0);
  EXPECT_FALSE(j["kv_cache"].is_null());
  EXPECT_GT(j["kld_mean"].get<double>(), 0.0);  // fp8 rounding of the cache changes the logits
  EXPECT_TRUE(j.contains("kld_first_quarter") && j.contains("kld_last_quarter"));
  EXPECT_TRUE(j["pitfalls"].is_array());
}

TEST(EvalCliTest, BadInput) {
  // A baseline with another vocabulary.
  const fs::path other = scratch_copy("models/ref-llama-19m", "eval-other-tokenizer");
  std::string tokenizer = read_file(other / "tokenizer.json");
  const std::string from = "\"<|eot_id|>\"", to = "\"<|eot_XX|>\"";
  ASSERT_NE(tokenizer.find(from), std::string::npos);
  while (tokenizer.find(from) != std::string::npos) tokenizer.replace(tokenizer.find(from), from.size(), to);
  write_file(other / "tokenizer.json", tokenizer);
  CliResult r = run_lowbit("eval " + quoted(kModel) + " --baseline " + quoted(other) + kWindows);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("same tokenizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("<|eot_XX|>"), std::string::npos) << r.output;

  r = run_lowbit("eval " + quoted(kModel));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nothing to evaluate"), std::string::npos) << r.output;
  r = run_lowbit("eval " + quoted(kModel) + " --baseline " + quoted(kModel) + " --tasks x.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--ppl"), std::string::npos) << r.output;
  r = run_lowbit("eval " + quoted(kModel) + kWindows + " --ppl-protocol wikitext");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--ppl-protocol"), std::string::npos) << r.output;
  const fs::path bad = scratch("bad.jsonl");
  write_file(bad, "{\"query\": \"q\", \"choices\": [\"a\"], \"gold\": 0}\n");
  r = run_lowbit("eval " + quoted(kModel) + " --tasks " + quoted(bad));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace lowbit::testing
