#include "serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

// vLLM's boundaries (vllm/v1/metrics/loggers.py): TTFT spans a millisecond to 43 minutes (long
// prompts queue), per-token latencies 10 ms to 80 s, whole requests 0.3 s to about two hours.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// Writes `# HELP` and `# TYPE` for one family. HELP text escapes backslash and newline.
void write_header(std::string& out, std::string_view name, std::string_view help,
                  std::string_view type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// One sample line; labels are given already sorted by name (Prometheus clients sort them, and the
// golden test compares text).
void write_sample(std::string& out, std::string_view name,
                  const std::vector<std::pair<std::string_view, std::string>>& labels,
                  double value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out += ',';
      out += labels[i].first;
      out += "=\"";
      out += detail::escape_label_value(labels[i].second);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += detail::format_prometheus_value(value);
  out += '\n';
}

struct HistogramText {
  std::string_view name;
  std::string_view help;
};

}  // namespace

const std::vector<double>& latency_buckets(LatencyHistogram which) {
  switch (which) {
    case LatencyHistogram::TTFT:
      return kTtftBuckets;
    case LatencyHistogram::ITL:
    case LatencyHistogram::TPOT:
      return kTokenLatencyBuckets;
    case LatencyHistogram::E2E:
      return kRequestLatencyBuckets;
  }
  throw Internal("latency_buckets: unknown histogram");
}

ServerMetrics::Histogram::Histogram(const std::vector<double>& upper_bounds)
    : bounds(upper_bounds), buckets(upper_bounds.size() + 1, 0) {}

void ServerMetrics::Histogram::observe(double value) {
  // Prometheus buckets are "less than or equal": a value on a bound belongs to that bound's bucket.
  size_t index =
      static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++buckets[index];
  ++count;
  sum += value;
}

ServerMetrics::ServerMetrics()
    : ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets) {}

const ServerMetrics::Histogram& ServerMetrics::histogram(LatencyHistogram which) const {
  switch (which) {
    case LatencyHistogram::TTFT:
      return ttft_;
    case LatencyHistogram::ITL:
      return itl_;
    case LatencyHistogram::TPOT:
      return tpot_;
    case LatencyHistogram::E2E:
      return e2e_;
  }
  throw Internal("ServerMetrics: unknown histogram");
}

ServerMetrics::Histogram& ServerMetrics::histogram(LatencyHistogram which) {
  return const_cast<Histogram&>(static_cast<const ServerMetrics*>(this)->histogram(which));
}

void ServerMetrics::record_request(std::string_view endpoint, int status) {
  std::lock_guard lock(mutex_);
  http_requests_[{std::string(endpoint), status}] += 1;
}

void ServerMetrics::record_tokens(int64_t prompt, int64_t generated) {
  LOWBIT_CHECK(prompt >= 0 && generated >= 0, "ServerMetrics::record_tokens: negative token count");
  std::lock_guard lock(mutex_);
  prompt_tokens_ += static_cast<double>(prompt);
  generation_tokens_ += static_cast<double>(generated);
}

void ServerMetrics::record_success(std::string_view finished_reason) {
  std::lock_guard lock(mutex_);
  if (finished_reason == "stop")
    success_stop_ += 1;
  else if (finished_reason == "length")
    success_length_ += 1;
  else if (finished_reason == "abort")
    success_abort_ += 1;
  else
    throw InvalidArgument(
        "ServerMetrics::record_success: finished_reason must be stop, length "
        "or abort, got '" +
        std::string(finished_reason) + "'");
}

void ServerMetrics::observe_ttft(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void ServerMetrics::observe_itl(double seconds) {
  std::lock_guard lock(mutex_);
  itl_.observe(seconds);
}

void ServerMetrics::observe_tpot(double seconds) {
  std::lock_guard lock(mutex_);
  tpot_.observe(seconds);
}

void ServerMetrics::observe_e2e(double seconds) {
  std::lock_guard lock(mutex_);
  e2e_.observe(seconds);
}

void ServerMetrics::set_scheduler_state(int64_t running, int64_t waiting, double kv_usage) {
  std::lock_guard lock(mutex_);
  running_ = running;
  waiting_ = waiting;
  kv_usage_ = kv_usage;
}

void ServerMetrics::set_prefix_cache(bool enabled, int64_t queries, int64_t hits) {
  std::lock_guard lock(mutex_);
  prefix_caching_ = enabled;
  prefix_queries_ = static_cast<double>(queries);
  prefix_hits_ = static_cast<double>(hits);
}

HistogramSnapshot ServerMetrics::snapshot(LatencyHistogram which) const {
  std::lock_guard lock(mutex_);
  const Histogram& h = histogram(which);
  HistogramSnapshot s;
  s.upper_bounds = h.bounds;
  uint64_t running_total = 0;
  for (uint64_t n : h.buckets) {
    running_total += n;
    s.cumulative.push_back(running_total);
  }
  s.count = h.count;
  s.sum = h.sum;
  return s;
}

std::string ServerMetrics::prometheus_text(std::string_view model_name) const {
  std::lock_guard lock(mutex_);
  const std::string model(model_name);
  std::string out;
  auto family = [&](std::string_view name, std::string_view help, std::string_view type,
                    double value) {
    write_header(out, name, help, type);
    write_sample(out, name, {{"model_name", model}}, value);
  };
  family("lowbit:num_requests_running", "Number of sequences in the running batch.", "gauge",
         static_cast<double>(running_));
  family("lowbit:num_requests_waiting", "Number of sequences waiting to be scheduled.", "gauge",
         static_cast<double>(waiting_));
  family("lowbit:kv_cache_usage_perc", "Fraction of the KV cache in use (1 means full).", "gauge",
         kv_usage_);
  family("lowbit:prompt_tokens_total", "Number of prompt tokens prefilled.", "counter",
         prompt_tokens_);
  family("lowbit:generation_tokens_total", "Number of tokens generated.", "counter",
         generation_tokens_);
  if (prefix_caching_) {
    family("lowbit:prefix_cache_queries_total",
           "Prompt tokens looked up in the prefix cache.", "counter", prefix_queries_);
    family("lowbit:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", "counter",
           prefix_hits_);
  }

  write_header(out, "lowbit:request_success_total", "Number of requests that finished.", "counter");
  const std::pair<const char*, double> reasons[] = {
      {"stop", success_stop_}, {"length", success_length_}, {"abort", success_abort_}};
  for (const auto& [reason, value] : reasons) {
    write_sample(out, "lowbit:request_success_total",
                 {{"finished_reason", reason}, {"model_name", model}}, value);
  }

  const std::pair<const Histogram*, HistogramText> histograms[] = {
      {&ttft_, {"lowbit:time_to_first_token_seconds", "Time to first token in seconds."}},
      {&itl_,
       {"lowbit:inter_token_latency_seconds",
        "Time between consecutive output tokens in seconds."}},
      {&tpot_,
       {"lowbit:request_time_per_output_token_seconds",
        "Mean time per output token of each finished request in seconds."}},
      {&e2e_, {"lowbit:e2e_request_latency_seconds", "End-to-end request latency in seconds."}},
  };
  for (const auto& [h, text] : histograms) {
    write_header(out, text.name, text.help, "histogram");
    const std::string bucket_name = std::string(text.name) + "_bucket";
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h->bounds.size(); ++i) {
      cumulative += h->buckets[i];
      double bound = i < h->bounds.size() ? h->bounds[i] : INFINITY;
      write_sample(out, bucket_name,
                   {{"le", detail::format_prometheus_value(bound)}, {"model_name", model}},
                   static_cast<double>(cumulative));
    }
    write_sample(out, std::string(text.name) + "_count", {{"model_name", model}},
                 static_cast<double>(h->count));
    write_sample(out, std::string(text.name) + "_sum", {{"model_name", model}}, h->sum);
  }

  write_header(out, "lowbit:http_requests_total",
               "Number of HTTP responses by endpoint and status.", "counter");
  for (const auto& [key, value] : http_requests_) {
    write_sample(out, "lowbit:http_requests_total",
                 {{"endpoint", key.first}, {"status", std::to_string(key.second)}}, value);
  }
  return out;
}

namespace detail {

std::string format_prometheus_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, e.g. "1.5e+06", "2.56e+03", "1e-05".
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  if (ec != std::errc()) throw Internal("format_prometheus_value: to_chars failed");
  std::string sci(buf, end);
  const size_t e_pos = sci.find('e');
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  std::string mantissa = sci.substr(0, e_pos);
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  // Go and prometheus_client switch to exponents below 1e-4 and from 1e6 up; the exponent has at
  // least two digits and a sign.
  if (exponent < -4 || exponent >= 6) {
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return sign + mantissa + exp_buf;
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string fixed;
  if (exponent >= 0) {
    const size_t int_len = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_len) {
      fixed = digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      fixed = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  } else {
    fixed = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  }
  return sign + fixed;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

}  // namespace detail
}  // namespace lowbit::serve
