// Prometheus metrics of `lowbit serve`, exposed on GET /metrics in the text exposition format
// (version 0.0.4). Names follow vLLM's (vllm/v1/metrics/loggers.py) under a `lowbit:` prefix, with
// vLLM's bucket boundaries and a model_name label, so that dashboards built for vLLM need only the
// prefix changed:
//   lowbit:num_requests_running, lowbit:num_requests_waiting, lowbit:kv_cache_usage_perc  gauges
//   lowbit:prompt_tokens_total, lowbit:generation_tokens_total                           counters
//   lowbit:request_success_total{finished_reason="stop"|"length"|"abort"}                 counter
//   lowbit:time_to_first_token_seconds, lowbit:inter_token_latency_seconds,
//   lowbit:request_time_per_output_token_seconds, lowbit:e2e_request_latency_seconds histograms
//   lowbit:http_requests_total{endpoint,status}                                          counter
// (vLLM renamed time_per_output_token_seconds to inter_token_latency_seconds in 0.11 and added the
// per-request request_time_per_output_token_seconds; we expose the current names.)
//
// Thread safety: every method may be called from any thread; one mutex guards the state (updates
// are a few additions, far cheaper than the token they describe).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lowbit::serve {

// One histogram's state as Prometheus exposes it.
struct HistogramSnapshot {
  std::vector<double> upper_bounds;  // the finite `le` bounds, ascending; +Inf is implied
  std::vector<uint64_t> cumulative;  // observations <= each bound, then the +Inf bucket (= count)
  uint64_t count = 0;
  double sum = 0;
};

enum class LatencyHistogram { TTFT, ITL, TPOT, E2E };

// vLLM's bucket boundaries (seconds) for each histogram.
const std::vector<double>& latency_buckets(LatencyHistogram which);

class ServerMetrics {
 public:
  ServerMetrics();

  // One HTTP response: endpoint is the route ("/v1/completions"), status the HTTP status code.
  void record_request(std::string_view endpoint, int status);
  // Tokens processed: prompt tokens prefilled and tokens generated (both may be 0).
  void record_tokens(int64_t prompt, int64_t generated);
  // A request that finished: finished_reason is "stop", "length" or "abort" (vLLM's values);
  // anything else throws InvalidArgument.
  void record_success(std::string_view finished_reason);

  void observe_ttft(double seconds);  // request arrival to its first generated token
  void observe_itl(double seconds);   // each gap between two consecutive output tokens
  void observe_tpot(double seconds);  // per finished request: (e2e - ttft) / (output tokens - 1)
  void observe_e2e(double seconds);   // request arrival to its last token

  // The scheduler's state now: sequences being decoded, sequences queued, fraction of the KV
  // cache in use (0..1).
  void set_scheduler_state(int64_t running, int64_t waiting, double kv_usage);
  // Prefix caching's totals so far (prompt tokens looked up, of which found), exported as
  // counters when `enabled` (vLLM's prefix_cache_queries / prefix_cache_hits).
  void set_prefix_cache(bool enabled, int64_t queries, int64_t hits);

  HistogramSnapshot snapshot(LatencyHistogram which) const;

  // The whole exposition, every series labelled model_name="<model_name>" (except
  // http_requests_total, labelled by endpoint and status).
  std::string prometheus_text(std::string_view model_name) const;

 private:
  struct Histogram {
    explicit Histogram(const std::vector<double>& bounds);
    void observe(double value);
    std::vector<double> bounds;
    std::vector<uint64_t> buckets;  // non-cumulative counts; the last is (bounds.back(), +Inf)
    uint64_t count = 0;
    double sum = 0;
  };
  const Histogram& histogram(LatencyHistogram which) const;
  Histogram& histogram(LatencyHistogram which);

  mutable std::mutex mutex_;
  int64_t running_ = 0;
  int64_t waiting_ = 0;
  double kv_usage_ = 0;
  bool prefix_caching_ = false;
  double prefix_queries_ = 0;
  double prefix_hits_ = 0;
  double prompt_tokens_ = 0;  // Prometheus values are floats; doubles count exactly to 2^53
  double generation_tokens_ = 0;
  double success_stop_ = 0;
  double success_length_ = 0;
  double success_abort_ = 0;
  Histogram ttft_;
  Histogram itl_;
  Histogram tpot_;
  Histogram e2e_;
  std::map<std::pair<std::string, int>, double> http_requests_;
};

namespace detail {
// A number as Prometheus' Go client writes it and as prometheus_client (Python) writes it for
// values below 1e10: the shortest round-trip digits, "1.0" for whole numbers, "1e-05" for small
// ones, "1.5e+06" from one million up; "+Inf", "-Inf", "NaN".
std::string format_prometheus_value(double value);
// A label value with backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view value);
}  // namespace detail

}  // namespace lowbit::serve
