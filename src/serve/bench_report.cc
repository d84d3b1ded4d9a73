#include "serve/bench_report.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

// Python's "{:c^50}".format(text): centred, the odd padding character on the right.
std::string centered(const std::string& text, char fill, size_t width) {
  if (text.size() >= width) return text;
  const size_t pad = width - text.size();
  return std::string(pad / 2, fill) + text + std::string(pad - pad / 2, fill);
}

// "{:<40} {:<10}" and "{:<40} {:<10.2f}" of vLLM's table.
std::string row(const std::string& label, const std::string& value) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-40s %-10s\n", label.c_str(), value.c_str());
  return buf;
}
std::string fixed2(double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", value);
  return buf;
}

struct MetricView {
  const char* key;     // vLLM's attribute name: ttft, tpot, itl, e2el
  const char* label;   // TTFT, TPOT, ITL, E2EL
  const char* header;  // the section title
  const Distribution* values;
};

std::vector<MetricView> metric_views(const BenchMetrics& m) {
  return {{"ttft", "TTFT", "Time to First Token", &m.ttft_ms},
          {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &m.tpot_ms},
          {"itl", "ITL", "Inter-token Latency", &m.itl_ms},
          {"e2el", "E2EL", "End-to-end Latency", &m.e2el_ms}};
}

bool selected(const BenchReportOptions& options, const char* key) {
  for (const auto& name : options.percentile_metrics) {
    if (name == key) return true;
  }
  return false;
}

}  // namespace

std::string percentile_word(double q) {
  if (q == std::floor(q)) return std::to_string(static_cast<int64_t>(q));
  char buf[32];
  auto [end, ec] =
      std::to_chars(buf, buf + sizeof(buf), q);  // shortest round trip, as Python's str()
  if (ec != std::errc()) throw Internal("percentile_word: to_chars failed");
  return std::string(buf, end);
}

std::string format_summary(const BenchMetrics& m, const BenchRun& run,
                           const BenchReportOptions& options) {
  std::string out = centered(" Serving Benchmark Result ", '=', 50) + "\n";
  out += row("Successful requests:", std::to_string(m.completed));
  out += row("Failed requests:", std::to_string(m.failed));
  if (options.concurrency > 0)
    out += row("Maximum request concurrency:", std::to_string(options.concurrency));
  if (!std::isinf(options.request_rate))
    out += row("Request rate configured (RPS):", fixed2(options.request_rate));
  out += row("Benchmark duration (s):", fixed2(m.duration));
  out += row("Total input tokens:", std::to_string(m.total_input));
  out += row("Total generated tokens:", std::to_string(m.total_output));
  out += row("Request throughput (req/s):", fixed2(m.request_throughput));
  out += row("Output token throughput (tok/s):", fixed2(m.output_throughput));
  out += row("Peak output token throughput (tok/s):", fixed2(m.max_output_tokens_per_s));
  out += row("Peak concurrent requests:", fixed2(static_cast<double>(m.max_concurrent_requests)));
  out += row("Max requests in flight:", std::to_string(run.max_in_flight));
  out += row("Total token throughput (tok/s):", fixed2(m.total_token_throughput));
  for (const auto& metric : metric_views(m)) {
    if (!selected(options, metric.key)) continue;
    out += centered(metric.header, '-', 50) + "\n";
    out += row(std::string("Mean ") + metric.label + " (ms):", fixed2(metric.values->mean));
    out += row(std::string("Median ") + metric.label + " (ms):", fixed2(metric.values->median));
    for (const auto& [q, value] : metric.values->percentiles) {
      out += row("P" + percentile_word(q) + " " + metric.label + " (ms):", fixed2(value));
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::ordered_json result_json(const BenchMetrics& m, const BenchRun& run,
                                   const BenchReportOptions& options, const std::string& date) {
  nlohmann::ordered_json j;
  j["date"] = date;
  j["endpoint_type"] = options.endpoint_type;
  j["backend"] = options.endpoint_type;
  j["label"] = nullptr;
  j["model_id"] = options.model_id;
  j["tokenizer_id"] = nullptr;  // the client has no tokenizer: token counts come from the server
  j["num_prompts"] = options.num_prompts;
  if (std::isinf(options.request_rate))
    j["request_rate"] = "inf";
  else
    j["request_rate"] = options.request_rate;
  j["burstiness"] = 1.0;
  if (options.concurrency > 0)
    j["max_concurrency"] = options.concurrency;
  else
    j["max_concurrency"] = nullptr;
  j["duration"] = m.duration;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = nullptr;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  j["max_in_flight_requests"] = run.max_in_flight;  // lowbit's addition
  if (options.save_detailed) {
    nlohmann::ordered_json input_lens = nlohmann::ordered_json::array(),
                           output_lens = nlohmann::ordered_json::array(),
                           ttfts = nlohmann::ordered_json::array(),
                           itls = nlohmann::ordered_json::array(),
                           texts = nlohmann::ordered_json::array(),
                           errors = nlohmann::ordered_json::array();
    for (const auto& r : run.results) {
      input_lens.push_back(r.prompt_tokens);
      output_lens.push_back(r.success ? r.output_tokens : 0);
      ttfts.push_back(r.ttft);
      itls.push_back(r.itl);
      texts.push_back(r.generated_text);
      errors.push_back(r.error);
    }
    j["input_lens"] = input_lens;
    j["output_lens"] = output_lens;
    j["ttfts"] = ttfts;
    j["itls"] = itls;
    j["generated_texts"] = texts;
    j["errors"] = errors;
  }
  for (const auto& metric : metric_views(m)) {
    if (!selected(options, metric.key)) continue;
    const std::string key = metric.key;
    j["mean_" + key + "_ms"] = metric.values->mean;
    j["median_" + key + "_ms"] = metric.values->median;
    j["std_" + key + "_ms"] = metric.values->std;
    for (const auto& [q, value] : metric.values->percentiles)
      j["p" + percentile_word(q) + "_" + key + "_ms"] = value;
  }
  return j;
}

}  // namespace lowbit::serve
