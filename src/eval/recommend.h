// `lowbit recommend`: seed 004's quantization decision tree (hardware → bottleneck → context
// length → accuracy budget, then "does it fit"), grounded in what the target GPU can compute
// (scheme_support.h) and what lowbit's method registry can run, optionally replacing the accuracy
// rules of thumb with the measurements of a `lowbit compare` run. docs/recommend.md describes the
// tree as implemented.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/compare_result.h"
#include "eval/gpu_catalog.h"
#include "eval/model_size.h"
#include "eval/scheme_support.h"
#include "lowbit/quant_method.h"

namespace lowbit::eval {

enum class Workload { Chat, Batch, LongContext };
enum class AccuracyBudget { Strict, Balanced, Aggressive };

// "chat", "batch", "long-context" / "strict", "balanced", "aggressive"; InvalidArgument naming
// `flag` for anything else.
Workload parse_workload(const std::string& text, const std::string& flag);
AccuracyBudget parse_accuracy(const std::string& text, const std::string& flag);
const char* workload_name(Workload w);
const char* accuracy_name(AccuracyBudget a);

// What an accuracy budget allows a scheme to cost against the unquantized model: relative
// perplexity increase and mean KL divergence per token (docs/recommend.md says where they come
// from: aggressive stops at seed 004 §6.1's "relative change > 5% needs attention").
struct Budget {
  double max_delta_ppl;  // relative: 0.01 = +1%
  double max_kld;        // nats per token
};
Budget accuracy_budget(AccuracyBudget a);

// ---- the request and the answer -----------------------------------------------------------------

// The machine lowbit runs on: the target when there is no GPU, and "what lowbit runs here".
struct HostTarget {
  quant::Platform platform;
  double memory_bytes = 0;
  std::string description;
};
HostTarget this_machine();

struct RecommendRequest {
  std::optional<GpuSpec> gpu;  // nullopt: recommend for the host's CPU
  int num_gpus = 1;
  ModelShape model;
  Workload workload = Workload::Chat;
  int64_t context = 0;       // tokens per sequence; 0: the workload's default
  int64_t concurrency = 32;  // sequences served at once (lowbit serve's --max-num-seqs default)
  AccuracyBudget accuracy = AccuracyBudget::Balanced;
  std::string scheme;        // a scheme the user asks about; empty: the tree chooses
  std::optional<CompareResult> compare;  // a `lowbit compare` result (eval/compare_result.h)
  std::string compare_path;              // its file, for messages
  HostTarget host = this_machine();
};

struct Reason {
  std::string step;  // hardware, bottleneck, context, accuracy, memory, measurement, request
  std::string text;
};

struct Verdict {
  std::string scheme;
  bool runs = false;
  std::string reason;
};

struct Recommendation {
  std::string target;            // "1 x NVIDIA H100 (Hopper, sm_90, 80 GB)"
  ModelShape model;
  std::string workload;          // chat, batch, long-context
  std::string accuracy;          // strict, balanced, aggressive
  std::string branch;            // blackwell, hopper-ada, ampere-40g, older-gpu, amd, cpu, none
  bool feasible = false;         // a scheme was found that runs (and fits, or fits with TP)
  std::string scheme;            // preset, or UNQUANTIZED
  SchemeFacts facts;
  std::string algo;              // rtn, gptq, awq, smoothquant+gptq; empty for UNQUANTIZED
  std::string kv_cache = "auto";  // "fp8" or "auto" (the model's 16-bit dtype)
  int64_t context = 0;
  int64_t concurrency = 0;
  double weight_bytes = 0;
  double kv_bytes_per_sequence = 0;  // at the chosen KV dtype
  double usable_bytes = 0;           // per replica: tensor_parallel GPUs x memory x utilization
  int64_t max_sequences = 0;         // full-length sequences that fit next to the weights
  int tensor_parallel = 1;
  int replicas = 1;                  // data-parallel copies over --num-gpus
  std::string quantize_command, vllm_command, lowbit_command;
  std::vector<Reason> reasons;
  std::vector<Verdict> target_support;  // every preset: can the target compute it
  std::optional<Verdict> requested;     // --scheme's verdict
  std::string lowbit_on_target;         // what lowbit's registry runs on the target
  std::string lowbit_here;              // and on this machine
  std::vector<std::string> assumptions;
  std::vector<std::string> warnings;
  nlohmann::ordered_json measured;      // the numbers that decided (null without a compare)
};

Recommendation recommend(const RecommendRequest& request);

nlohmann::ordered_json recommendation_to_json(const Recommendation& r);
std::string recommendation_to_text(const Recommendation& r);

// ---- pieces shared by recommend.cc and recommend_measured.cc ------------------------------------

// Picks among measured schemes: those the target runs and that fit, within the budget; the
// smallest (bits per weight) wins, ties by lower KLD. For a batch workload only schemes that
// quantize activations count (weight-only ones do not speed up prefill). `runs` and `fits` are the
// tree's own checks. Returns the index into compare.schemes, or nullopt; `record` gets one JSON
// row per measured scheme saying what happened to it, and `reasons` the deciding numbers.
struct MeasuredChecks {
  std::function<Verdict(const SchemeFacts&)> runs;
  std::function<bool(double bits_per_weight)> fits;
};
std::optional<size_t> pick_measured(const CompareResult& compare, const std::string& path,
                                    AccuracyBudget accuracy,
                                    Workload workload, const MeasuredChecks& checks,
                                    nlohmann::ordered_json& record, std::vector<Reason>& reasons);

}  // namespace lowbit::eval
