// `lowbit bench serve` statistics against numpy (data/bench_stats_golden.json, made by
// scripts/fixtures/make_bench_stats_goldens.py with numpy 2.4.6). Our code sums in numpy's pairwise
// order and interpolates as numpy does, so results agree to the last bit; EXPECT_DOUBLE_EQ (4 ULPs)
// leaves room only for a compiler contracting a multiply-add, nothing more.
#include "serve/bench_stats.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

nlohmann::json golden() {
  std::ifstream in(std::string(LOWBIT_SOURCE_DIR) +
                   "/tests/unit/serve/data/bench_stats_golden.json");
  EXPECT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

void expect_distribution(const Distribution& d, const nlohmann::json& want) {
  EXPECT_DOUBLE_EQ(d.mean, want["mean"].get<double>());
  EXPECT_DOUBLE_EQ(d.median, want["median"].get<double>());
  EXPECT_DOUBLE_EQ(d.std, want["std"].get<double>());
  ASSERT_EQ(d.percentiles.size(), want["percentiles"].size());
  for (size_t i = 0; i < d.percentiles.size(); ++i) {
    EXPECT_EQ(d.percentiles[i].first, want["percentiles"][i][0].get<double>());
    EXPECT_DOUBLE_EQ(d.percentiles[i].second, want["percentiles"][i][1].get<double>())
        << "p" << d.percentiles[i].first;
  }
}

TEST(BenchStatsTest, DistributionsMatchNumpy) {
  const auto g = golden();
  const std::vector<double> percentiles = g["percentiles"];
  for (const auto& [name, want] : g["distributions"].items()) {
    SCOPED_TRACE(name);
    const std::vector<double> values = want["values"];
    expect_distribution(summarize(values, percentiles), want);
    if (!values.empty()) {
      for (const auto& p : want["percentiles"]) {
        EXPECT_DOUBLE_EQ(percentile(values, p[0].get<double>()), p[1].get<double>());
      }
    }
  }
}

TEST(BenchStatsTest, MetricsMatchVllmDefinitions) {
  const auto g = golden()["metrics"];
  std::vector<RequestResult> results;
  for (const auto& r : g["requests"]) {
    RequestResult out;
    out.success = r["success"];
    out.prompt_tokens = r["prompt_tokens"];
    out.output_tokens = r["output_tokens"];
    out.start_time = r["start_time"];
    out.ttft = r["ttft"];
    out.latency = r["latency"];
    out.itl = r["itl"].get<std::vector<double>>();
    results.push_back(out);
  }
  const BenchMetrics m = compute_metrics(results, g["duration"], golden()["percentiles"]);
  EXPECT_EQ(m.completed, g["completed"].get<int64_t>());
  EXPECT_EQ(m.failed, g["failed"].get<int64_t>());
  EXPECT_EQ(m.total_input, g["total_input"].get<int64_t>());
  EXPECT_EQ(m.total_output, g["total_output"].get<int64_t>());
  EXPECT_DOUBLE_EQ(m.request_throughput, g["request_throughput"].get<double>());
  EXPECT_DOUBLE_EQ(m.output_throughput, g["output_throughput"].get<double>());
  EXPECT_DOUBLE_EQ(m.total_token_throughput, g["total_token_throughput"].get<double>());
  EXPECT_EQ(m.max_output_tokens_per_s, g["max_output_tokens_per_s"].get<double>());
  EXPECT_EQ(m.max_concurrent_requests, g["max_concurrent_requests"].get<int64_t>());
  {
    SCOPED_TRACE("ttft");
    expect_distribution(m.ttft_ms, g["ttft_ms"]);
  }
  {
    SCOPED_TRACE("tpot");
    expect_distribution(m.tpot_ms, g["tpot_ms"]);
  }
  {
    SCOPED_TRACE("itl");
    expect_distribution(m.itl_ms, g["itl_ms"]);
  }
  {
    SCOPED_TRACE("e2el");
    expect_distribution(m.e2el_ms, g["e2el_ms"]);
  }
}

TEST(BenchStatsTest, AllFailedGivesZeros) {
  std::vector<RequestResult> results(3);
  results[0].error = "HTTP 400: bad";
  const BenchMetrics m = compute_metrics(results, 2.0, {99});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 3);
  EXPECT_EQ(m.ttft_ms.mean, 0);
  EXPECT_EQ(m.ttft_ms.percentiles.at(0).second, 0);
  EXPECT_EQ(m.max_concurrent_requests, 0);
}

TEST(BenchStatsTest, RejectsBadArguments) {
  EXPECT_THROW(percentile({}, 50), InvalidArgument);
  EXPECT_THROW(percentile({1.0}, 101), InvalidArgument);
  EXPECT_THROW(compute_metrics({}, 0.0, {99}), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::serve
