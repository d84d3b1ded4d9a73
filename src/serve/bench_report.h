// How `lowbit bench serve` reports a run: vLLM's result table (the same lines, widths and
// precision as `vllm bench serve`) and the JSON record of its --save-result, with the same keys
// ("request_throughput", "output_throughput", "mean_ttft_ms", "p99_itl_ms", ...) so that scripts
// that read vLLM's results read ours.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/bench_client.h"
#include "serve/bench_stats.h"

namespace lowbit::serve {

struct BenchReportOptions {
  std::string model_id;
  std::string endpoint_type;  // vLLM's backend name: "openai" (completions) or "openai-chat"
  int64_t num_prompts = 0;
  double request_rate = INFINITY;
  int concurrency = 0;  // 0: no limit
  // Metrics with a percentile section, of "ttft", "tpot", "itl", "e2el" (vLLM's names).
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  std::vector<double> percentiles = {99};
  bool save_detailed = false;  // per-request arrays (input_lens, ttfts, itls, errors, ...)
};

// The table, from "==== Serving Benchmark Result ====" to the closing rule, with a newline at the
// end of each line. Adds one line vLLM lacks: "Max requests in flight:" (the instantaneous peak).
std::string format_summary(const BenchMetrics& metrics, const BenchRun& run,
                           const BenchReportOptions& options);

// The JSON record. `date` is "YYYYmmdd-HHMMSS" as vLLM writes it.
nlohmann::ordered_json result_json(const BenchMetrics& metrics, const BenchRun& run,
                                   const BenchReportOptions& options, const std::string& date);

// vLLM's name for a percentile in keys and labels: "99" for 99.0, "99.9" for 99.9.
std::string percentile_word(double q);

}  // namespace lowbit::serve
