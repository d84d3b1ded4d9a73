// Building `lowbit compare`'s result from what its steps wrote: the eval and bench JSON of the
// baseline and of each scheme, the checkpoints' sizes and the per-layer errors. Pure (no I/O), so
// the arithmetic of the table is tested on its own.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/checkpoint_size.h"
#include "eval/compare_plan.h"
#include "eval/compare_result.h"

namespace lowbit::eval {

struct CompareModelSteps {
  std::string dir;            // relative to compare.json's directory (or absolute)
  nlohmann::json eval;        // `lowbit eval --json`
  nlohmann::json bench;       // `lowbit bench --json` (null when not measured)
  CheckpointSize size;
};

struct CompareSchemeSteps : CompareModelSteps {
  std::string scheme, algo, kv_cache;
  bool layer_errors_measured = false;
  std::vector<LayerError> layer_errors;
};

// The task accuracy of one eval JSON: the mean over its tasks of multiple-choice acc and
// generation flexible exact match, with the standard error of that mean (tasks independent:
// sqrt(sum se²) / tasks). nullopt when the eval ran no task.
struct TaskScore {
  double acc = 0, stderr_ = 0;
};
std::optional<TaskScore> task_score(const nlohmann::json& eval);

// Throws Internal when the steps disagree with each other (a scheme's eval saw another baseline
// perplexity than the baseline's own eval: the tokens or windows differ).
CompareResult assemble_compare(const CompareOptions& options, const CompareModelSteps& baseline,
                               const std::vector<CompareSchemeSteps>& schemes,
                               const CompareMachine& machine, const std::string& created);

// The table a person reads (also DIR/compare.md): scheme | bits/weight | size | ΔPPL | KLD |
// task acc | decode tok/s | prefill tok/s | peak memory, the baseline first, then pitfalls and the
// recommendation.
std::string compare_markdown(const CompareResult& result);

}  // namespace lowbit::eval
