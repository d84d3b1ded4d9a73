// The load generator behind `lowbit bench serve`: vLLM's serving benchmark (`vllm bench serve`)
// against any OpenAI-compatible server. Every request streams (stream: true, stream_options:
// {include_usage: true}); the client times each chunk that carries text:
//   TTFT  send -> first chunk with non-empty text (completions: choices[0].text; chat:
//         choices[0].delta.content or .reasoning_content). Chunks with empty text, such as the
//         role-only first chunk of chat streams, are not tokens and are not timed; vLLM's client
//         times every chunk that has choices.
//   ITL   the gaps between consecutive text chunks
//   E2E   send -> last text chunk (the trailing usage chunk and [DONE] carry no token; as vLLM)
//   output tokens: usage.completion_tokens when the server sends usage, else the text chunks.
// Requests go out at their arrival times (bench_dataset.h) and at most `concurrency` at a time,
// first come first served; each concurrency slot is one thread with its own keep-alive connection.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/bench_dataset.h"
#include "serve/bench_stats.h"

namespace lowbit::serve {

struct BenchClientConfig {
  std::string base_url =
      "http://127.0.0.1:8000";               // scheme://host:port, optionally with a path prefix
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model;                         // sent as "model"
  std::string api_key;                       // "Authorization: Bearer ..." when not empty
  int concurrency = 0;                       // most requests in flight; 0 = no limit
  double request_rate = INFINITY;            // requests per second; inf = all at once
  uint64_t seed = 0;                         // for the arrival times
  bool ignore_eos = false;                   // vLLM's extension: generate exactly max_tokens
  double temperature = 0;
  double timeout_s = 3600;  // longest wait for the next bytes of a response
};

struct BenchRun {
  std::vector<RequestResult> results;  // one per request, in dataset order
  double duration_s = 0;               // first send to last response
  int max_in_flight = 0;               // most requests in flight at one instant
};

// Sends every request and measures it. Requests that fail (HTTP error, broken stream) are recorded
// as failures; when every request failed to connect at all, throws IoError naming the URL.
BenchRun run_benchmark(const BenchClientConfig& config, const std::vector<BenchRequest>& requests);

// The first model id of GET {base_url}/v1/models (vLLM's default for --model). Throws IoError
// naming the URL when the server cannot be reached or answers with an error.
std::string fetch_first_model(const std::string& base_url, const std::string& api_key,
                              double timeout_s);

// The JSON body of one request (exposed for tests).
std::string request_body(const BenchClientConfig& config, const BenchRequest& request);

// Splits a byte stream into Server-Sent-Events lines and hands over each `data:` payload as soon
// as its line is complete (OpenAI servers send one JSON object per data line). Comments (":..."),
// other fields and blank lines are skipped; "\r\n" line ends are accepted.
class SseLineReader {
 public:
  void feed(std::string_view bytes, const std::function<void(std::string_view)>& on_data);
  // The stream ended: a last data line without its newline still counts.
  void finish(const std::function<void(std::string_view)>& on_data);

 private:
  void dispatch(std::string_view line, const std::function<void(std::string_view)>& on_data);
  std::string buffer_;
};

namespace detail {
struct ParsedUrl {
  std::string scheme_host_port;  // "http://127.0.0.1:8000"
  std::string path_prefix;       // "" or "/prefix" (no trailing slash)
};
ParsedUrl parse_base_url(const std::string& base_url);
// The message of an OpenAI-style error body ({"error": {"message": ...}}, {"message": ...},
// {"detail": ...}), else the body itself, shortened.
std::string error_message(std::string_view body);
}  // namespace detail

}  // namespace lowbit::serve
