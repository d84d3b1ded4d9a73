// Datasets and arrival times of `lowbit bench serve`, and its report (vLLM's table and JSON keys).
#include "serve/bench_dataset.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "lowbit/error.h"
#include "serve/bench_report.h"

namespace lowbit::serve {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(BenchDatasetTest, ReadsPromptAndShareGptLines) {
  const std::string path = write_temp("bench_dataset.jsonl",
                                      "{\"prompt\": \"Hello\", \"output_len\": 7}\n"
                                      "\n"
                                      "{\"conversations\": [{\"from\": \"system\", \"value\": "
                                      "\"sys\"}, {\"from\": \"human\", \"value\": \"Hi\"},"
                                      " {\"from\": \"gpt\", \"value\": \"Yo\"}]}\n"
                                      "{\"prompt\": \"Third\"}\n");
  const auto requests = load_dataset_file(path, 5, std::nullopt, 128);
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_EQ(requests[0].prompt, "Hello");
  EXPECT_EQ(requests[0].output_len, 7);
  EXPECT_EQ(requests[0].prompt_len, -1);
  EXPECT_EQ(requests[1].prompt, "Hi");
  EXPECT_EQ(requests[1].output_len, 128);
  EXPECT_EQ(requests[2].prompt, "Third");
  EXPECT_EQ(requests[3].prompt, "Hello");  // starts over at the top
  EXPECT_EQ(requests[4].prompt, "Hi");
  EXPECT_EQ(load_dataset_file(path, 1, 32, 128)[0].output_len, 32);  // --output-len wins
}

TEST(BenchDatasetTest, ReadsAJsonArray) {
  const std::string path = write_temp(
      "bench_dataset.json", " [{\"conversations\": [{\"from\": \"user\", \"value\": \"Q\"}]}]");
  const auto requests = load_dataset_file(path, 2, std::nullopt, 16);
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].prompt, "Q");
}

TEST(BenchDatasetTest, MalformedLinesNameTheFileAndLine) {
  const std::string path =
      write_temp("bench_bad.jsonl", "{\"prompt\": \"ok\"}\n{\"text\": \"no prompt\"}\n");
  try {
    load_dataset_file(path, 1, std::nullopt, 16);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path + " line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      load_dataset_file(write_temp("bench_bad2.jsonl", "{not json\n"), 1, std::nullopt, 16),
      InvalidArgument);
  EXPECT_THROW(load_dataset_file(testing::TempDir() + "no_such_dataset.jsonl", 1, std::nullopt, 16),
               IoError);
}

TEST(BenchDatasetTest, RandomPromptsHaveExactLengthsAndIdsInRange) {
  const auto a = random_dataset(4, 33, 9, 50, 7);
  const auto b = random_dataset(4, 33, 9, 50, 7);
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].prompt.is_array());
    EXPECT_EQ(a[i].prompt.size(), 33u);
    EXPECT_EQ(a[i].prompt_len, 33);
    EXPECT_EQ(a[i].output_len, 9);
    EXPECT_EQ(a[i].prompt, b[i].prompt);  // same seed, same prompts
    for (const auto& id : a[i].prompt) {
      EXPECT_GE(id.get<int64_t>(), 10);
      EXPECT_LT(id.get<int64_t>(), 50);
    }
  }
  EXPECT_NE(random_dataset(1, 33, 9, 50, 8)[0].prompt, a[0].prompt);
  EXPECT_THROW(random_dataset(1, 4, 4, 10, 0), InvalidArgument);
}

TEST(BenchDatasetTest, RandomPrefixIsSharedAndTheRestIsNot) {
  const auto a = random_dataset(3, 20, 5, 1000, 7, /*prefix_len=*/12);
  ASSERT_EQ(a.size(), 3u);
  for (const auto& r : a) {
    ASSERT_EQ(r.prompt.size(), 32u);
    EXPECT_EQ(r.prompt_len, 32);
  }
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(a[1].prompt[i], a[0].prompt[i]);
    EXPECT_EQ(a[2].prompt[i], a[0].prompt[i]);
  }
  int differing = 0;
  for (size_t i = 12; i < 32; ++i) differing += a[1].prompt[i] != a[0].prompt[i];
  EXPECT_GT(differing, 15);  // 20 draws from 990 ids: a few coincidences at most
  EXPECT_THROW(random_dataset(1, 4, 4, 100, 0, -1), InvalidArgument);
}

TEST(BenchDatasetTest, ArrivalTimes) {
  for (double t : arrival_times(5, INFINITY, 0)) EXPECT_EQ(t, 0);
  const auto times = arrival_times(50, 4.0, 3);
  ASSERT_EQ(times.size(), 50u);
  EXPECT_GT(times[0], 0);
  for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i], times[i - 1]);
  EXPECT_DOUBLE_EQ(times.back(), 50 / 4.0);  // rescaled to exactly n / rate, as vLLM does
  EXPECT_EQ(arrival_times(50, 4.0, 3), times);
  EXPECT_NE(arrival_times(50, 4.0, 4), times);
  EXPECT_THROW(arrival_times(3, 0.0, 0), InvalidArgument);
}

TEST(BenchReportTest, TableAndJsonFollowVllm) {
  BenchMetrics m;
  m.completed = 8;
  m.failed = 1;
  m.duration = 2.5;
  m.total_input = 48;
  m.total_output = 40;
  m.request_throughput = 3.2;
  m.ttft_ms.mean = 12.345;
  m.ttft_ms.percentiles = {{50, 11.0}, {99.9, 30.0}};
  BenchRun run;
  run.max_in_flight = 4;
  BenchReportOptions options;
  options.model_id = "mock";
  options.endpoint_type = "openai";
  options.concurrency = 4;
  options.percentiles = {50, 99.9};
  const std::string table = format_summary(m, run, options);
  EXPECT_EQ(table.substr(0, 51), "============ Serving Benchmark Result ============\n");
  EXPECT_NE(table.find("Successful requests:                     8         \n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("Maximum request concurrency:             4         \n"), std::string::npos);
  EXPECT_NE(table.find("Benchmark duration (s):                  2.50      \n"), std::string::npos);
  EXPECT_NE(table.find("---------------Time to First Token----------------\n"), std::string::npos);
  EXPECT_NE(table.find("Mean TTFT (ms):                          12.35     \n"), std::string::npos);
  EXPECT_NE(table.find("P99.9 TTFT (ms):                         30.00     \n"), std::string::npos);
  EXPECT_NE(table.find("-----Time per Output Token (excl. 1st token)------\n"), std::string::npos);
  EXPECT_EQ(table.find("Request rate configured"), std::string::npos);  // inf is not printed

  const auto json = result_json(m, run, options, "20261101-120000");
  EXPECT_EQ(json["request_rate"], "inf");
  EXPECT_EQ(json["max_concurrency"], 4);
  EXPECT_EQ(json["completed"], 8);
  EXPECT_EQ(json["total_output_tokens"], 40);
  EXPECT_EQ(json["request_throughput"], 3.2);
  EXPECT_EQ(json["mean_ttft_ms"], 12.345);
  EXPECT_EQ(json["p50_ttft_ms"], 11.0);
  EXPECT_EQ(json["p99.9_ttft_ms"], 30.0);
  for (const char* key :
       {"output_throughput", "total_token_throughput", "median_tpot_ms", "std_itl_ms",
        "mean_e2el_ms", "max_concurrent_requests", "max_output_tokens_per_s", "duration"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_FALSE(json.contains("ttfts"));  // only with --save-detailed
  EXPECT_EQ(percentile_word(99.0), "99");
  EXPECT_EQ(percentile_word(99.9), "99.9");
}

}  // namespace
}  // namespace lowbit::serve
