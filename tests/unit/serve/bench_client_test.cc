// The benchmark client against an in-process imitation of an OpenAI streaming server (cpp-httplib
// on 127.0.0.1, an ephemeral port): counts and token totals are asserted exactly; timings only for
// being positive and ordered (no thresholds: the machine may be loaded).
#include "serve/bench_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

struct MockBehavior {
  int status = 200;
  int chunks = 5;     // text chunks per response
  int delay_ms = 20;  // before each text chunk
  bool send_usage = true;
  std::string error_body =
      R"({"error": {"message": "model 'nope' does not exist", "type": "NotFoundError"}})";
  bool error_event = false;  // send an error event after the first chunk
  std::string finish_reason = "length";  // on the last text chunk
};

// An OpenAI-compatible server that streams `chunks` chunks `delay_ms` apart, then usage (prompt
// tokens = the number of prompt ids, or 0 for text) and [DONE]. Chat streams open with a role-only
// chunk of empty content, as OpenAI and vLLM do.
class MockServer {
 public:
  explicit MockServer(MockBehavior behavior) : behavior_(std::move(behavior)) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(16); };
    server_.set_keep_alive_timeout(1);
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})",
                      "application/json");
    });
    auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res);
    };
    server_.Post("/v1/completions", handler);
    server_.Post("/v1/chat/completions", handler);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~MockServer() { stop(); }
  void stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_active() const { return max_active_; }
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard lock(mutex_);
    return bodies_;
  }

 private:
  void handle(const httplib::Request& req, httplib::Response& res) {
    const auto body = nlohmann::json::parse(req.body);
    {
      std::lock_guard lock(mutex_);
      bodies_.push_back(body);
    }
    if (behavior_.status != 200) {
      res.status = behavior_.status;
      res.set_content(behavior_.error_body, "application/json");
      return;
    }
    const int now = ++active_;
    int seen = max_active_.load();
    while (now > seen && !max_active_.compare_exchange_weak(seen, now)) {
    }
    const bool chat = req.path == "/v1/chat/completions";
    const int64_t prompt_tokens =
        !chat && body["prompt"].is_array() ? static_cast<int64_t>(body["prompt"].size()) : 0;
    const MockBehavior b = behavior_;
    // The request stops being active when its last byte is sent, not when httplib later releases
    // the response: by then a client with concurrency 1 may already have sent its next request.
    auto released = std::make_shared<std::atomic<bool>>(false);
    auto release = [this, released] {
      if (!released->exchange(true)) --active_;
    };
    res.set_chunked_content_provider(
        "text/event-stream",
        [b, chat, prompt_tokens, release](size_t, httplib::DataSink& sink) {
          auto send = [&sink](const nlohmann::json& event) {
            const std::string line = "data: " + event.dump() + "\n\n";
            // Two writes, so that the client also sees a line split across reads.
            const size_t half = line.size() / 2;
            return sink.write(line.data(), half) &&
                   sink.write(line.data() + half, line.size() - half);
          };
          if (chat)
            send({{"choices",
                   {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}}}}});
          for (int i = 0; i < b.chunks; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(b.delay_ms));
            const std::string text = "tok" + std::to_string(i);
            nlohmann::json choice =
                chat ? nlohmann::json{{"index", 0}, {"delta", {{"content", text}}}}
                     : nlohmann::json{{"index", 0}, {"text", text}};
            choice["finish_reason"] = i + 1 == b.chunks ? nlohmann::json(b.finish_reason)
                                                        : nlohmann::json(nullptr);
            if (!send({{"object", "text_completion"}, {"choices", {choice}}})) return false;
            if (b.error_event && i == 0) {
              release();
              send({{"error", {{"message", "engine died"}, {"type", "InternalServerError"}}}});
              sink.done();
              return true;
            }
          }
          if (b.send_usage) {
            send({{"choices", nlohmann::json::array()},
                  {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", b.chunks}}}});
          }
          const std::string done = "data: [DONE]\n\n";
          release();
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        },
        [release](bool) { release(); });
  }

  MockBehavior behavior_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> active_{0}, max_active_{0};
  mutable std::mutex mutex_;
  std::vector<nlohmann::json> bodies_;
};

BenchClientConfig config_for(const MockServer& server, int concurrency) {
  BenchClientConfig config;
  config.base_url = server.url();
  config.model = "mock-model";
  config.concurrency = concurrency;
  config.ignore_eos = true;
  config.timeout_s = 60;
  return config;
}

void expect_timings_ordered(const RequestResult& r, size_t chunks) {
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_GT(r.ttft, 0);
  ASSERT_EQ(r.itl.size(), chunks - 1);
  for (double gap : r.itl) EXPECT_GT(gap, 0);
  EXPECT_GT(r.latency, r.ttft);
  // E2E is the first chunk's time plus the gaps, up to rounding of the differences.
  EXPECT_NEAR(r.latency, r.ttft + std::accumulate(r.itl.begin(), r.itl.end(), 0.0), 1e-9);
  EXPECT_GE(r.start_time, 0);
}

TEST(BenchClientTest, StreamsAtConcurrencyOneAndFour) {
  for (int concurrency : {1, 4}) {
    SCOPED_TRACE("concurrency " + std::to_string(concurrency));
    MockServer server({});
    const auto requests =
        random_dataset(8, /*input_len=*/6, /*output_len=*/5, /*vocab=*/100, /*seed=*/1);
    const BenchRun run = run_benchmark(config_for(server, concurrency), requests);
    ASSERT_EQ(run.results.size(), 8u);
    const BenchMetrics m = compute_metrics(run.results, run.duration_s, {50, 99});
    EXPECT_EQ(m.completed, 8);
    EXPECT_EQ(m.failed, 0);
    EXPECT_EQ(m.total_input, 8 * 6);
    EXPECT_EQ(m.total_output, 8 * 5);
    for (const auto& r : run.results) {
      expect_timings_ordered(r, 5);
      EXPECT_EQ(r.output_tokens, 5);
      EXPECT_EQ(r.generated_text, "tok0tok1tok2tok3tok4");
    }
    EXPECT_GE(run.max_in_flight, 1);
    EXPECT_LE(run.max_in_flight, concurrency);
    EXPECT_LE(server.max_active(), concurrency);
    if (concurrency == 1) {
      EXPECT_EQ(run.max_in_flight, 1);
    }
    EXPECT_GT(m.ttft_ms.mean, 0);
    EXPECT_GT(m.tpot_ms.mean, 0);
    EXPECT_GT(run.duration_s, 0);

    const auto bodies = server.bodies();
    ASSERT_EQ(bodies.size(), 8u);
    for (const auto& body : bodies) {
      EXPECT_EQ(body["model"], "mock-model");
      EXPECT_EQ(body["stream"], true);
      EXPECT_EQ(body["stream_options"]["include_usage"], true);
      EXPECT_EQ(body["ignore_eos"], true);
      EXPECT_EQ(body["max_tokens"], 5);
      EXPECT_EQ(body["temperature"], 0.0);
      ASSERT_TRUE(body["prompt"].is_array());
      EXPECT_EQ(body["prompt"].size(), 6u);
    }
  }
}

TEST(BenchClientTest, WithoutUsageCountsTextChunks) {
  MockBehavior behavior;
  behavior.send_usage = false;
  behavior.chunks = 3;
  MockServer server(behavior);
  std::vector<BenchRequest> requests(2);
  for (auto& r : requests) {
    r.prompt = "Hello";
    r.output_len = 3;
  }
  const BenchRun run = run_benchmark(config_for(server, 2), requests);
  for (const auto& r : run.results) {
    expect_timings_ordered(r, 3);
    EXPECT_EQ(r.output_tokens, 3);
    EXPECT_EQ(r.prompt_tokens, 0);  // text prompt, no usage: unknown
  }
}

TEST(BenchClientTest, ChatSkipsTheRoleChunk) {
  MockServer server({});
  BenchClientConfig config = config_for(server, 1);
  config.endpoint = "/v1/chat/completions";
  std::vector<BenchRequest> requests(2);
  for (auto& r : requests) {
    r.prompt = "Say something";
    r.output_len = 5;
  }
  const BenchRun run = run_benchmark(config, requests);
  for (const auto& r : run.results) {
    expect_timings_ordered(r, 5);  // 5 text chunks: the empty role chunk is not a token
    EXPECT_EQ(r.generated_text, "tok0tok1tok2tok3tok4");
  }
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[0]["messages"][0]["role"], "user");
  EXPECT_EQ(bodies[0]["messages"][0]["content"], "Say something");
  EXPECT_EQ(bodies[0]["max_completion_tokens"], 5);
  // Token-id prompts cannot go to chat.
  EXPECT_THROW(run_benchmark(config, random_dataset(1, 4, 4, 100, 0)), InvalidArgument);
}

TEST(BenchClientTest, HttpErrorsAreFailedRequestsWithTheServerMessage) {
  MockBehavior behavior;
  behavior.status = 400;
  MockServer server(behavior);
  const BenchRun run = run_benchmark(config_for(server, 2), random_dataset(5, 4, 4, 100, 0));
  const BenchMetrics m = compute_metrics(run.results, run.duration_s, {99});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 5);
  for (const auto& r : run.results) {
    EXPECT_FALSE(r.success);
    EXPECT_FALSE(r.connection_error);
    EXPECT_EQ(r.error, "HTTP 400: model 'nope' does not exist");
  }
}

TEST(BenchClientTest, ErrorEventMidStreamFailsTheRequest) {
  MockBehavior behavior;
  behavior.error_event = true;
  MockServer server(behavior);
  const BenchRun run = run_benchmark(config_for(server, 1), random_dataset(2, 4, 5, 100, 0));
  for (const auto& r : run.results) {
    EXPECT_FALSE(r.success);
    EXPECT_EQ(r.error, "error event: engine died");
  }
}

// A stream that ends normally but with finish_reason "abort" (the engine gave up on the request)
// is a failed request, not a short successful one.
TEST(BenchClientTest, AnAbortedRequestFails) {
  MockBehavior behavior;
  behavior.finish_reason = "abort";
  MockServer server(behavior);
  const BenchRun run = run_benchmark(config_for(server, 1), random_dataset(2, 4, 5, 100, 0));
  for (const auto& r : run.results) {
    EXPECT_FALSE(r.success);
    EXPECT_EQ(r.error, "the server aborted the request (finish_reason \"abort\") after 5 token chunks");
  }
}

TEST(BenchClientTest, ConnectionRefusedIsAnIoErrorNamingTheUrl) {
  std::string url;
  {
    MockServer server({});
    url = server.url();
    server.stop();  // the port is now closed: connecting is refused
  }
  BenchClientConfig config;
  config.base_url = url;
  config.model = "m";
  config.concurrency = 2;
  try {
    run_benchmark(config, random_dataset(3, 4, 4, 100, 0));
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(url + "/v1/completions"), std::string::npos) << e.what();
  }
  try {
    fetch_first_model(url, "", 10);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(url + "/v1/models"), std::string::npos) << e.what();
  }
}

TEST(BenchClientTest, FetchesTheFirstModel) {
  MockServer server({});
  EXPECT_EQ(fetch_first_model(server.url(), "key", 10), "mock-model");
  EXPECT_EQ(fetch_first_model(server.url() + "/", "", 10), "mock-model");
}

TEST(BenchClientTest, SseReaderReassemblesLines) {
  std::vector<std::string> got;
  auto collect = [&got](std::string_view payload) { got.emplace_back(payload); };
  SseLineReader reader;
  reader.feed("data: {\"a\"", collect);
  EXPECT_TRUE(got.empty());
  reader.feed(":1}\n\n: keep-alive comment\nevent: message\ndata:[DONE]\r\n", collect);
  reader.feed("data: {\"tail\":true}", collect);
  EXPECT_EQ(got.size(), 2u);
  reader.finish(collect);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "{\"a\":1}");
  EXPECT_EQ(got[1], "[DONE]");
  EXPECT_EQ(got[2], "{\"tail\":true}");
}

TEST(BenchClientTest, ParsesBaseUrlsAndErrorBodies) {
  EXPECT_EQ(detail::parse_base_url("http://127.0.0.1:8000").scheme_host_port,
            "http://127.0.0.1:8000");
  const auto with_prefix = detail::parse_base_url("https://example.com/proxy/");
  EXPECT_EQ(with_prefix.scheme_host_port, "https://example.com");
  EXPECT_EQ(with_prefix.path_prefix, "/proxy");
  EXPECT_THROW(detail::parse_base_url("127.0.0.1:8000"), InvalidArgument);
  EXPECT_EQ(detail::error_message(R"({"object": "error", "message": "too long"})"), "too long");
  EXPECT_EQ(detail::error_message(R"({"detail": "Not Found"})"), "Not Found");
  EXPECT_EQ(detail::error_message("plain text"), "plain text");
  EXPECT_EQ(detail::error_message(""), "(empty body)");
}

}  // namespace
}  // namespace lowbit::serve
