// ServerMetrics against the reference: the exposition for the observations in
// data/metrics_observations.json must equal, byte for byte, what the official Python client
// (prometheus_client 0.26.0) writes for the same observations (data/metrics_reference.prom, made by
// scripts/fixtures/check_prometheus_text.py, which also checked that its text-format parser reads
// our output back to the same samples: data/metrics_samples.json).
#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

const std::string kData = std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/serve/data/";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json observations() {
  return nlohmann::json::parse(read_text(kData + "metrics_observations.json"));
}

void replay(ServerMetrics& m, const nlohmann::json& obs) {
  const auto& state = obs["scheduler_state"];
  m.set_scheduler_state(state["running"], state["waiting"], state["kv_usage"]);
  for (const auto& t : obs["tokens"]) m.record_tokens(t[0], t[1]);
  for (const auto& r : obs["success"]) m.record_success(r.get<std::string>());
  for (double v : obs["ttft"]) m.observe_ttft(v);
  for (double v : obs["itl"]) m.observe_itl(v);
  for (double v : obs["tpot"]) m.observe_tpot(v);
  for (double v : obs["e2e"]) m.observe_e2e(v);
  for (const auto& r : obs["http_requests"]) m.record_request(r[0].get<std::string>(), r[1]);
}

TEST(MetricsTest, ExpositionEqualsPrometheusClientReference) {
  const auto obs = observations();
  ServerMetrics m;
  replay(m, obs);
  const std::string text = m.prometheus_text(obs["model_name"].get<std::string>());
  // Left in the build tree for scripts/fixtures/check_prometheus_text.py (compare / parse).
  std::ofstream(std::string(LOWBIT_BINARY_DIR) + "/serve_metrics_exposition.prom", std::ios::binary)
      << text;
  EXPECT_EQ(text, read_text(kData + "metrics_reference.prom"));
}

TEST(MetricsTest, ParsedSamplesAgreeWithSnapshots) {
  // data/metrics_samples.json is prometheus_client's parse of our exposition: every sample line was
  // accepted, and the histogram series it read back are the ones the snapshots hold.
  const auto obs = observations();
  ServerMetrics m;
  replay(m, obs);
  const auto samples = nlohmann::json::parse(read_text(kData + "metrics_samples.json"));
  const std::string text = m.prometheus_text(obs["model_name"].get<std::string>());
  size_t sample_lines = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    sample_lines += !line.empty() && line[0] != '#';
  EXPECT_EQ(samples.size(), sample_lines);

  const HistogramSnapshot ttft = m.snapshot(LatencyHistogram::TTFT);
  size_t bucket = 0;
  for (const auto& s : samples) {
    const std::string name = s["name"];
    if (name == "lowbit:time_to_first_token_seconds_bucket") {
      ASSERT_LT(bucket, ttft.cumulative.size());
      EXPECT_EQ(s["value"].get<double>(), static_cast<double>(ttft.cumulative[bucket++]));
    } else if (name == "lowbit:time_to_first_token_seconds_count") {
      EXPECT_EQ(s["value"].get<double>(), static_cast<double>(ttft.count));
    } else if (name == "lowbit:time_to_first_token_seconds_sum") {
      EXPECT_EQ(s["value"].get<double>(), ttft.sum);
    } else if (name == "lowbit:prompt_tokens_total") {
      EXPECT_EQ(s["value"].get<double>(), 2001234.0);
    }
  }
  EXPECT_EQ(bucket, ttft.cumulative.size());
}

TEST(MetricsTest, HistogramsAreCumulativeWithCountAndSum) {
  const auto obs = observations();
  ServerMetrics m;
  replay(m, obs);
  const std::pair<LatencyHistogram, const char*> all[] = {{LatencyHistogram::TTFT, "ttft"},
                                                          {LatencyHistogram::ITL, "itl"},
                                                          {LatencyHistogram::TPOT, "tpot"},
                                                          {LatencyHistogram::E2E, "e2e"}};
  for (const auto& [which, key] : all) {
    SCOPED_TRACE(key);
    const HistogramSnapshot s = m.snapshot(which);
    const std::vector<double> values = obs[key];
    ASSERT_EQ(s.cumulative.size(), s.upper_bounds.size() + 1);
    EXPECT_EQ(s.upper_bounds, latency_buckets(which));
    for (size_t i = 1; i < s.cumulative.size(); ++i)
      EXPECT_GE(s.cumulative[i], s.cumulative[i - 1]);
    EXPECT_EQ(s.cumulative.back(), values.size());
    EXPECT_EQ(s.count, values.size());
    double sum = 0;  // same order of additions as the histogram: exact equality holds
    for (double v : values) sum += v;
    EXPECT_EQ(s.sum, sum);
    // Each bucket holds exactly the observations <= its bound (a value on a bound counts in it).
    for (size_t i = 0; i < s.upper_bounds.size(); ++i) {
      uint64_t expected = 0;
      for (double v : values) expected += v <= s.upper_bounds[i];
      EXPECT_EQ(s.cumulative[i], expected) << "le=" << s.upper_bounds[i];
    }
  }
}

TEST(MetricsTest, ValuesFormatAsPrometheusClientDoes) {
  // Expected strings are what prometheus_client.utils.floatToGoString (0.26.0) returns.
  using detail::format_prometheus_value;
  EXPECT_EQ(format_prometheus_value(1e-05), "1e-05");
  EXPECT_EQ(format_prometheus_value(0.0001), "0.0001");
  EXPECT_EQ(format_prometheus_value(1.5e-07), "1.5e-07");
  EXPECT_EQ(format_prometheus_value(2560.0), "2560.0");
  EXPECT_EQ(format_prometheus_value(3.0), "3.0");
  EXPECT_EQ(format_prometheus_value(0.0), "0.0");
  EXPECT_EQ(format_prometheus_value(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_prometheus_value(123456.789), "123456.789");
  EXPECT_EQ(format_prometheus_value(999999.0), "999999.0");
  EXPECT_EQ(format_prometheus_value(1.5e6), "1.5e+06");
  EXPECT_EQ(format_prometheus_value(7e9), "7e+09");
  EXPECT_EQ(format_prometheus_value(-2.5), "-2.5");
  EXPECT_EQ(format_prometheus_value(INFINITY), "+Inf");
  EXPECT_EQ(detail::escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  ServerMetrics m;
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < kEach; ++i) {
        m.observe_itl(0.02);
        m.record_tokens(3, 1);
        m.record_request("/v1/completions", 200);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.snapshot(LatencyHistogram::ITL).count, static_cast<uint64_t>(kThreads * kEach));
  const std::string text = m.prometheus_text("m");
  EXPECT_NE(text.find("lowbit:prompt_tokens_total{model_name=\"m\"} 24000.0\n"), std::string::npos);
  EXPECT_NE(
      text.find("lowbit:http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 8000.0\n"),
      std::string::npos);
}

TEST(MetricsTest, RejectsUnknownFinishReason) {
  ServerMetrics m;
  EXPECT_THROW(m.record_success("eos"), InvalidArgument);
  EXPECT_THROW(m.record_tokens(-1, 0), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::serve
