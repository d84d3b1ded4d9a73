// What `lowbit eval` measured, as one JSON object (--json; the keys `lowbit compare` reuses) and as
// a table for a person. JSON keys (absent when not measured):
//   model, baseline, quantization, kernels, kv_cache, protocol {...}, seconds
//   ppl, ppl_tokens, ppl_windows                          the model's perplexity (the protocol's)
//   word_perplexity, byte_perplexity, bits_per_byte       --ppl-protocol lm-eval, whole document
//   baseline_ppl, delta_ppl (= ppl - baseline_ppl), kld_mean, kld_mean_stderr, kld_median, kld_p90,
//   kld_p99, kld_max, top1_agreement, top1_agreement_stderr (fractions), kld_first_quarter,
//   kld_last_quarter                                      with --baseline
//   greedy_match_len, greedy {...}, decode_tok_s, baseline_decode_tok_s   with --baseline
//   task_acc, task_acc_stderr, task_acc_norm, task_acc_norm_stderr   the first multiple-choice task
//   task_exact_match_strict(_stderr), task_exact_match_flexible(_stderr)  the first generation task
//   tasks [{name, path, kind, n, scores..., items [...]}]
//   pitfalls [{kind, message}]                            with --baseline (possibly empty)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/greedy_compare.h"
#include "eval/kl_divergence.h"
#include "eval/pitfalls.h"
#include "eval/tasks.h"

namespace lowbit::eval {

struct PerplexitySection {
  std::string protocol;  // "reference" or "lm-eval"
  std::string text_file;
  int64_t context = 0;
  bool bos = false;
  int32_t prefix_token = -1;  // lm-eval
  int64_t text_tokens = 0;
  int64_t words = 0, bytes = 0;  // lm-eval: of the whole document; 0 when only part was scored
  WindowScores scores;
};

struct GreedySection {
  GreedyOptions options;
  GreedyRun model, baseline;
};

struct TaskSection {
  TaskFile task;  // items kept for the per-item report
  std::optional<MultipleChoiceResult> multiple_choice;
  std::optional<GenerationTaskResult> generation;
  TaskOptions options;
};

struct EvalReport {
  std::string model, baseline;
  std::string quantization;
  std::vector<std::string> kernels;
  std::string kv_cache;  // "" for a full-precision cache
  std::optional<PerplexitySection> perplexity;
  std::optional<GreedySection> greedy;
  std::vector<TaskSection> tasks;
  std::vector<Pitfall> pitfalls;
  bool pitfalls_checked = false;
  double seconds = 0;

  nlohmann::json to_json() const;
  std::string to_table() const;
};

// Every input the pitfall checks need, from the report and the two models.
PitfallInputs pitfall_inputs(const EvalReport& report, const std::string& model_lm_head_kernel,
                             const std::string& baseline_lm_head_kernel, bool kv_cache_fp8);

}  // namespace lowbit::eval
