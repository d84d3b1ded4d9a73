// The result of `lowbit compare` (DIR/compare.json, format "lowbit-compare/1"), as `compare`
// writes it and `report` and `recommend` read it. docs/report.md is the schema's reference; these
// structs mirror it field for field.
//
// The reader is strict on what a table row cannot do without (names, sizes, bits per weight,
// perplexities) and lenient on what a run may not have measured: those fields are optional, and
// JSON null or a missing key both mean "not measured" (shown as "—"). Present values are
// validated (a size is a positive integer, an accuracy lies in [0, 1], ...) and a bad one throws
// lowbit::InvalidArgument naming the file and the field, e.g. "compare.json: schemes[2].ppl: ...".
// Unknown keys are ignored, so a newer producer can add fields without breaking older readers.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eval/pitfalls.h"

namespace lowbit::eval {

inline constexpr const char* kCompareFormat = "lowbit-compare/1";

struct CompareMachine {
  std::string cpu;                  // optional: "" when unknown
  std::optional<int64_t> threads;
  std::string gpu;                  // optional: "" when the run used no GPU
};

// How every model was measured: the same tokens and task files for the baseline and each scheme.
struct CompareProtocol {
  std::string ppl_text;             // required: the text file perplexity was computed on
  int64_t ctx = 0;                  // required: window length in tokens
  std::optional<int64_t> windows;   // windows scored (null: all of the file)
  bool bos = false;                 // optional, default false
  std::vector<std::string> tasks;   // optional: task files (JSONL)
};

// Measurements shared by the baseline and the schemes. Optional ones are std::nullopt when the
// producer did not measure them.
struct CompareMeasurements {
  std::string dir;                  // optional: checkpoint directory, relative to compare.json's
  int64_t size_bytes = 0;           // required: bytes of the checkpoint's weight files on disk
  double bits_per_weight = 0;       // required: stored bits per quantizable weight, scales included
  double ppl = 0;                   // required
  std::optional<double> task_acc;         // 0..1, the mean over the protocol's tasks
  std::optional<double> task_acc_stderr;  // standard error of task_acc
  std::optional<double> decode_tok_s;
  std::optional<double> prefill_tok_s;
  std::optional<int64_t> peak_rss_bytes;
};

struct CompareBaseline : CompareMeasurements {
  std::string name;                 // required, e.g. "BF16"
};

// Relative error of one quantized module (docs/report.md: ||W - Q(W)||_F / ||W||_F by default;
// CompareResult::layer_error_metric says which error the producer measured).
struct LayerError {
  std::string name;                 // required, e.g. "model.layers.0.self_attn.q_proj"
  double rel_error = 0;             // required, >= 0
};

// Pitfalls (eval/pitfalls.h: kind and message, both required here) are those `lowbit eval`
// detects: lm_head_quantized, shorter_outputs, repetitive_outputs, not_faster,
// kv_cache_fp8_long_context; the report shows any other kind by its name.

struct CompareScheme : CompareMeasurements {
  std::string scheme;               // required, e.g. "W4A16"
  std::string algo;                 // optional: rtn, gptq, awq ("" when unknown)
  std::string kv_cache;             // optional: "auto", "fp8" ("" when unknown)
  double delta_ppl = 0;             // required: ppl / baseline.ppl - 1 (0.012 = +1.2 %)
  std::optional<double> kld_mean;   // mean KL(baseline || scheme) per token, nats
  std::optional<double> kld_p99;
  std::optional<double> top1_agreement;  // 0..1
  std::vector<LayerError> layer_errors;  // optional: empty when not measured
  std::vector<Pitfall> pitfalls;         // optional: empty when none was found

  // "W4A16", "W4A16 GPTQ", "W4A16 · KV FP8": the scheme with what distinguishes it from other
  // rows of the same scheme (an algorithm other than RTN, a quantized KV cache).
  std::string label() const;
};

struct CompareRecommendation {
  std::optional<std::string> scheme;  // null: nothing met the accuracy budget
  std::string algo;                   // optional: picks among rows of the same scheme
  std::vector<std::string> reasons;

  // Index into CompareResult::schemes, or nullopt (no recommendation, or the baseline itself).
  std::optional<size_t> index;
  bool is_baseline = false;           // the recommendation is to keep the baseline
};

struct CompareResult {
  std::string format = kCompareFormat;
  std::string model;                // required: the model that was quantized
  std::string created;              // required: ISO 8601 UTC, e.g. "2026-11-29T18:30:00Z"
  std::string layer_error_metric;   // optional, e.g. "weight_rel_fro"
  CompareMachine machine;           // optional object
  CompareProtocol protocol;         // required object
  CompareBaseline baseline;         // required object
  std::vector<CompareScheme> schemes;  // required, may be empty
  CompareRecommendation recommendation;  // optional object

  // Validates and converts; `source` (the file name) prefixes every error message.
  static CompareResult from_json(const nlohmann::json& json, const std::string& source);
  nlohmann::json to_json() const;
};

// Reads and validates DIR/compare.json (or any path): IoError when it cannot be opened,
// InvalidArgument naming the file (and the field) when it is not valid JSON or not a valid result.
CompareResult read_compare_result(const std::string& path);

// Writes `result` to `path` as indented JSON via path.tmp and a rename, so a reader never sees a
// half-written file.
void write_compare_result(const CompareResult& result, const std::string& path);

}  // namespace lowbit::eval
