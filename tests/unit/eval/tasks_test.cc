// Task evaluation pieces against lm-eval 0.4.13 itself (tests/golden/lm_eval/protocol_cases.json,
// written by scripts/fixtures/make_lm_eval_goldens.sh from lm-eval's own functions): gsm8k's
// answer filters and exact match, mean_stderr, _encode_pair with the model's tokenizer, and the
// Python string facts the metrics count with. Plus the JSONL loader's errors.
#include "eval/tasks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "eval/answer_extraction.h"
#include "eval/py_text.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::eval {
namespace {

const std::string kModel = std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m";

const nlohmann::json& cases() {
  static const nlohmann::json data = [] {
    std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/lm_eval/protocol_cases.json");
    return nlohmann::json::parse(in);
  }();
  return data;
}

TEST(AnswerExtractionTest, PatternsAreGsm8kYamls) {
  EXPECT_EQ(cases()["gsm8k"]["strict_pattern"], kGsm8kStrictPattern);
  EXPECT_EQ(cases()["gsm8k"]["flexible_pattern"], kGsm8kFlexiblePattern);
  EXPECT_EQ(cases()["gsm8k"]["regexes_to_ignore"],
            nlohmann::json::array({",", "\\$", "(?s).*#### ", "\\.$"}));
}

TEST(AnswerExtractionTest, FiltersAndExactMatchEqualLmEval) {
  const nlohmann::json& g = cases()["gsm8k"];
  ASSERT_GE(g["responses"].size(), 15u);
  for (const nlohmann::json& r : g["responses"]) {
    const std::string response = r["response"];
    const std::string strict = gsm8k_strict_extract(response);
    const std::string flexible = gsm8k_flexible_extract(response);
    EXPECT_EQ(strict, r["strict"].get<std::string>()) << response;
    EXPECT_EQ(flexible, r["flexible"].get<std::string>()) << response;
    EXPECT_EQ(gsm8k_normalize(response), r["normalized"].get<std::string>()) << response;
    for (const auto& [reference, expected] : r["matches"].items()) {
      EXPECT_EQ(gsm8k_exact_match(strict, reference), expected[0].get<bool>())
          << response << " | " << reference;
      EXPECT_EQ(gsm8k_exact_match(flexible, reference), expected[1].get<bool>())
          << response << " | " << reference;
    }
  }
  for (const nlohmann::json& r : g["references"]) {
    EXPECT_EQ(gsm8k_normalize(r["reference"].get<std::string>()), r["normalized"].get<std::string>());
  }
}

// Exactly: the same operations in the same order as lm-eval's Python.
TEST(TaskStatisticsTest, MeanAndStderrEqualLmEvalExactly) {
  for (const nlohmann::json& c : cases()["mean_stderr"]) {
    const auto values = c["values"].get<std::vector<double>>();
    EXPECT_EQ(lm_eval_mean(values), c["mean"].get<double>());
    EXPECT_EQ(lm_eval_mean_stderr(values), c["mean_stderr"].get<double>()) << c["values"].dump();
    // For 0/1 scores it is sqrt(p (1 - p) / (n - 1)).
    const double p = lm_eval_mean(values), n = static_cast<double>(values.size());
    EXPECT_NEAR(lm_eval_mean_stderr(values), std::sqrt(p * (1 - p) / (n - 1)), 1e-15);
  }
}

TEST(PythonTextTest, LengthsStripAndSplitEqualPython) {
  for (const nlohmann::json& c : cases()["python"]) {
    const std::string text = c["text"];
    EXPECT_EQ(python_length(text), c["len"].get<int64_t>()) << c.dump();
    EXPECT_EQ(python_trailing_space_bytes(text), c["trailing_space_bytes"].get<size_t>()) << c.dump();
    EXPECT_EQ(python_split_count(text), c["split_count"].get<int64_t>()) << c.dump();
  }
}

TEST(EncodePairTest, EqualsLmEvalLocalCompletions) {
  auto model = models::Model::load(kModel);
  const Tokenizer tokenizer = Tokenizer::from_dir(kModel);
  const nlohmann::json& e = cases()["encode_pair"];
  const int32_t prefix = lm_eval_prefix_token(*model, tokenizer);
  EXPECT_EQ(prefix, e["prefix_token_id"].get<int32_t>());
  ASSERT_GE(e["cases"].size(), 6u);
  for (const nlohmann::json& c : e["cases"]) {
    const auto [context, continuation] =
        encode_pair(tokenizer, c["context"], c["continuation"], false, prefix);
    EXPECT_EQ(context, c["context_ids"].get<std::vector<int32_t>>()) << c.dump();
    EXPECT_EQ(continuation, c["continuation_ids"].get<std::vector<int32_t>>()) << c.dump();
  }
}

class TaskFileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& content) {
    const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "lowbit-tasks";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  // The error names the file and line and mentions `field`.
  void expect_error(const std::string& content, const std::string& line, const std::string& field) {
    const std::string path = write("bad.jsonl", content);
    try {
      load_task_file(path);
      ADD_FAILURE() << "no error for " << content;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(path + ":" + line), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
};

TEST_F(TaskFileTest, ReadsBothShapes) {
  const TaskFile mc = load_task_file(
      write("mc.jsonl", "{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 1}\r\n\n"
                        "{\"query\": \"r\", \"choices\": [\"c\", \"d\", \"e\"], \"gold\": 0}\n"));
  EXPECT_EQ(mc.name, "mc");
  EXPECT_EQ(mc.kind, TaskKind::MultipleChoice);
  ASSERT_EQ(mc.multiple_choice.size(), 2u);
  EXPECT_EQ(mc.multiple_choice[0].gold, 1);
  EXPECT_EQ(mc.multiple_choice[1].choices.size(), 3u);
  const TaskFile gen = load_task_file(write("gen.jsonl", "{\"question\": \"1+1?\", \"answer\": \"#### 2\"}\n"));
  EXPECT_EQ(gen.kind, TaskKind::Generation);
  ASSERT_EQ(gen.generation.size(), 1u);
  EXPECT_EQ(gen.generation[0].answer, "#### 2");
}

TEST_F(TaskFileTest, ErrorsNameFileLineAndField) {
  expect_error("{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 2}\n", "1", "gold");
  expect_error("{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 0}\n{\"query\": \"q\"}\n", "2",
               "choices");
  expect_error("{\"query\": \"q\", \"choices\": [\"a\", \"\"], \"gold\": 0}\n", "1", "choices");
  expect_error("{\"question\": \"q\"}\n", "1", "answer");
  expect_error("{\"text\": \"q\"}\n", "1", "query, choices, gold");
  expect_error("not json\n", "1", "JSON");
  EXPECT_THROW(load_task_file(write("empty.jsonl", "\n")), InvalidArgument);
  EXPECT_THROW(load_task_file("/nonexistent/task.jsonl"), IoError);
}

TEST_F(TaskFileTest, Gsm8kPromptFormat) {
  const TaskFile task = load_task_file(write(
      "g.jsonl", "{\"question\": \"A?\", \"answer\": \"a\\n#### 1\"}\n"
                 "{\"question\": \"B?\", \"answer\": \"#### 2\"}\n{\"question\": \"C?\", \"answer\": \"#### 3\"}\n"));
  EXPECT_EQ(generation_prompt(task, 0, task.generation[2]), "Question: C?\nAnswer:");
  EXPECT_EQ(generation_prompt(task, 2, task.generation[2]),
            "Question: A?\nAnswer: a\n#### 1\n\nQuestion: B?\nAnswer: #### 2\n\nQuestion: C?\nAnswer:");
}

}  // namespace
}  // namespace lowbit::eval
