// Task evaluation in lm-eval's two common shapes (lm-eval 0.4.13 semantics, checked against
// lm-eval itself: tests/golden/eval_lm_eval_test.cc), read from JSONL files:
//
// Multiple choice by log-likelihood, {"query": str, "choices": [str, ...], "gold": int} per line.
//   Each choice is scored as lm-eval's local-completions / HF models score a (context,
//   continuation) request: context = query, continuation = " " + choice (target_delimiter);
//   trailing whitespace of the context moves to the continuation (_encode_pair); the context and
//   context + continuation are encoded (special tokens only with add_bos) and the continuation's
//   tokens are those of the whole past the context's token count; an empty query is replaced by
//   the prefix token (BOS, else EOS). loglikelihood = Σ log p(token | everything before it).
//   acc: argmax of the log-likelihoods (first maximum) == gold; acc_norm: argmax of
//   loglikelihood / len(choice) in characters (code points, without the delimiter) == gold.
//
// Generation with exact match, {"question": str, "answer": str} per line (gsm8k's shape: the
//   answer ends in "#### N"). The first num_fewshot items are the n-shot examples and are not
//   scored; the prompt is "Question: {q}\nAnswer: {a}\n\n" per example then
//   "Question: {q}\nAnswer:"; greedy decoding until "\n\n", "Question:", an EOS id or
//   max_gen_tokens; scored by gsm8k's strict-match and flexible-extract (answer_extraction.h).
//
// Every score comes with lm-eval's standard error of a mean: sample_stddev / sqrt(n).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lowbit {
class Tokenizer;
namespace models {
class Model;
}
}  // namespace lowbit

namespace lowbit::eval {

struct MultipleChoiceItem {
  std::string query;
  std::vector<std::string> choices;
  int64_t gold = 0;
};

struct GenerationItem {
  std::string question;
  std::string answer;
};

enum class TaskKind { MultipleChoice, Generation };

struct TaskFile {
  std::string path;
  std::string name;  // the file name without directory and .jsonl
  TaskKind kind = TaskKind::MultipleChoice;
  std::vector<MultipleChoiceItem> multiple_choice;
  std::vector<GenerationItem> generation;
};

// Reads a JSONL task; the first line's keys decide its kind and every line must have that shape.
// Errors (IoError / InvalidArgument) name the file, the line and the field.
TaskFile load_task_file(const std::string& path);

// lm-eval's aggregation of per-item scores: mean, and sample_stddev / sqrt(n) computed in the same
// order of operations as its Python (0 for n < 2, where lm-eval would divide by zero).
double lm_eval_mean(const std::vector<double>& values);
double lm_eval_mean_stderr(const std::vector<double>& values);

struct TaskOptions {
  bool add_bos = false;          // encode with special tokens (lm-eval's add_bos_token=True)
  int64_t max_length = 2048;     // longer inputs lose tokens on the left, as lm-eval truncates
  int64_t limit = 0;             // score only the first `limit` items (0: all)
  int num_fewshot = 0;           // generation tasks: n-shot examples taken from the file's start
  int max_gen_tokens = 256;
};

// lm-eval's prefix token (stands in for an empty context): the tokenizer's BOS, else its EOS.
int32_t lm_eval_prefix_token(const models::Model& model, const Tokenizer& tokenizer);

// lm-eval's _encode_pair (causal models), with its empty-context rule: (context ids, continuation
// ids).
std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_pair(const Tokenizer& tokenizer,
                                                                  const std::string& context,
                                                                  const std::string& continuation,
                                                                  bool add_special_tokens,
                                                                  int32_t prefix_token);

struct MultipleChoiceItemResult {
  std::vector<double> loglikelihoods;  // one per choice
  std::vector<int64_t> continuation_tokens;
  int64_t pred = 0, pred_norm = 0;
  bool acc = false, acc_norm = false;
};

struct MultipleChoiceResult {
  std::vector<MultipleChoiceItemResult> items;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;
  double seconds = 0;
};

MultipleChoiceResult evaluate_multiple_choice(const models::Model& model,
                                              const Tokenizer& tokenizer, const TaskFile& task,
                                              const TaskOptions& options);

struct GenerationItemResult {
  std::string output;
  std::string strict, flexible;  // extracted answers ("[invalid]" when none)
  bool strict_match = false, flexible_match = false;
};

struct GenerationTaskResult {
  std::vector<GenerationItemResult> items;
  double strict = 0, strict_stderr = 0, flexible = 0, flexible_stderr = 0;
  double seconds = 0;
};

// The n-shot prompt of `item` (examples: the file's first num_fewshot items).
std::string generation_prompt(const TaskFile& task, int num_fewshot, const GenerationItem& item);

GenerationTaskResult evaluate_generation(const models::Model& model, const Tokenizer& tokenizer,
                                         const TaskFile& task, const TaskOptions& options);

}  // namespace lowbit::eval
