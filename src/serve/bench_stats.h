// Statistics of `lowbit bench serve`, defined as vLLM's serving benchmark defines them
// (vllm/benchmarks/serve.py, calculate_metrics) so that numbers from the two tools compare:
// numpy's mean, median, population standard deviation and percentile (linear interpolation), an
// empty list counting as [0]; TPOT per request = (e2e - ttft) / (output tokens - 1) for requests
// with more than one output token; ITL pooled over all requests; throughputs over the wall-clock
// duration of the whole run.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lowbit::serve {

// What the client measured for one request. Times are in seconds.
struct RequestResult {
  bool success = false;
  std::string error;              // why it failed ("HTTP 400: ...", "connection failed: ...")
  bool connection_error = false;  // could not connect at all (refused, unreachable, TLS handshake)
  int64_t prompt_tokens = 0;  // from the server's usage, else the dataset's known length, else 0
  int64_t output_tokens = 0;  // from the server's usage, else the number of token chunks
  double start_time = 0;      // when the request was sent, from the start of the run
  double ttft = 0;            // send -> first chunk carrying text
  double latency = 0;         // send -> last chunk carrying text (vLLM's end-to-end latency)
  std::vector<double> itl;    // gaps between consecutive text chunks
  std::string generated_text;
};

// numpy.percentile(values, q) with numpy's default method ("linear"); q in [0, 100]. values must
// not be empty.
double percentile(std::vector<double> values, double q);

struct Distribution {
  double mean = 0;
  double median = 0;
  double std = 0;                                      // population (ddof = 0), as numpy.std
  std::vector<std::pair<double, double>> percentiles;  // (q, value)
};

// mean/median/std/percentiles of values; an empty list is summarized as [0] (vLLM's `values or 0`).
Distribution summarize(const std::vector<double>& values, const std::vector<double>& percentiles);

struct BenchMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double duration = 0;                // seconds
  double request_throughput = 0;      // completed / duration
  double output_throughput = 0;       // total_output / duration
  double total_token_throughput = 0;  // (total_input + total_output) / duration
  // vLLM's peak figures: successful requests' tokens and activity counted in one-second buckets
  // from the first request's start.
  double max_output_tokens_per_s = 0;
  int64_t max_concurrent_requests = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
};

BenchMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s,
                             const std::vector<double>& percentiles);

}  // namespace lowbit::serve
