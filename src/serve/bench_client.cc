#include "serve/bench_client.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

bool is_chat(const std::string& endpoint) {
  return endpoint.size() >= 16 &&
         endpoint.compare(endpoint.size() - 16, 16, "chat/completions") == 0;
}

std::unique_ptr<httplib::Client> make_client(const detail::ParsedUrl& url, double timeout_s,
                                             bool keep_alive) {
  auto client = std::make_unique<httplib::Client>(url.scheme_host_port);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(timeout_s));
  client->set_connection_timeout(std::min(timeout, std::chrono::microseconds(30'000'000)));
  client->set_read_timeout(timeout);
  client->set_write_timeout(timeout);
  client->set_keep_alive(keep_alive);
  // Small request writes (headers, then body) must not wait for delayed ACKs (Nagle).
  client->set_tcp_nodelay(true);
  return client;
}

// httplib's names ("Connection", "Read") said as a sentence.
std::string describe(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "connection refused or host unreachable";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "reading the response failed or timed out (--timeout)";
    case httplib::Error::Write:
      return "sending the request failed";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate was not accepted";
    default:
      return httplib::to_string(error);
  }
}

httplib::Headers request_headers(const std::string& api_key) {
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  return headers;
}

std::string text_of(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// What one streaming response has delivered so far.
struct StreamState {
  bool chat = false;
  Clock::time_point start;
  Clock::time_point last;  // the latest text chunk
  RequestResult* result = nullptr;
  int64_t text_chunks = 0;
  int64_t usage_completion = -1;
  int64_t usage_prompt = -1;
  std::string finish_reason;  // the last one a chunk carried
  std::string error;  // set on an error event or malformed data: the stream is abandoned

  void on_data(std::string_view payload) {
    const auto now = Clock::now();
    if (payload == "[DONE]" || !error.empty()) return;
    nlohmann::json data;
    try {
      data = nlohmann::json::parse(payload);
    } catch (const nlohmann::json::exception&) {
      error = "invalid JSON in the event stream: " + std::string(payload.substr(0, 200));
      return;
    }
    if (!data.is_object()) return;
    if (data.contains("error")) {
      error = "error event: " + detail::error_message(payload);
      return;
    }
    auto usage = data.find("usage");
    if (usage != data.end() && usage->is_object()) {
      if (usage->contains("completion_tokens") && (*usage)["completion_tokens"].is_number_integer())
        usage_completion = (*usage)["completion_tokens"];
      if (usage->contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number_integer())
        usage_prompt = (*usage)["prompt_tokens"];
    }
    auto choices = data.find("choices");
    if (choices == data.end() || !choices->is_array() || choices->empty()) return;
    const nlohmann::json& choice = (*choices)[0];
    if (choice.is_object() && choice.contains("finish_reason") && choice["finish_reason"].is_string())
      finish_reason = choice["finish_reason"];
    std::string text;
    if (chat) {
      const nlohmann::json delta = choice.is_object()
                                       ? choice.value("delta", nlohmann::json::object())
                                       : nlohmann::json::object();
      text = text_of(delta, "content");
      if (text.empty()) text = text_of(delta, "reasoning_content");
    } else {
      text = text_of(choice, "text");
    }
    // vLLM's benchmark: a completion chunk is a token even when its text is empty (a token that
    // ends mid-character, or a held-back stop-string prefix); a chat chunk counts only with content
    // (the role-only first chunk does not).
    if (chat && text.empty()) return;
    if (text_chunks == 0)
      result->ttft = seconds_between(start, now);
    else
      result->itl.push_back(seconds_between(last, now));
    last = now;
    ++text_chunks;
    result->generated_text += text;
  }
};

RequestResult send_one(httplib::Client& client, const detail::ParsedUrl& url,
                       const BenchClientConfig& config, const BenchRequest& request,
                       Clock::time_point run_start) {
  RequestResult result;
  httplib::Request req;
  req.method = "POST";
  req.path = url.path_prefix + config.endpoint;
  req.headers = request_headers(config.api_key);
  req.headers.emplace("Content-Type", "application/json");
  req.headers.emplace("Accept", "text/event-stream");
  req.body = request_body(config, request);

  int status = -1;
  std::string error_body;
  StreamState state;
  state.chat = is_chat(config.endpoint);
  state.result = &result;
  SseLineReader reader;
  auto on_data = [&state](std::string_view payload) { state.on_data(payload); };
  req.response_handler = [&status](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 65536) error_body.append(data, size);
      return true;
    }
    reader.feed(std::string_view(data, size), on_data);
    return state.error.empty();
  };

  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  state.start = Clock::now();
  result.start_time = seconds_between(run_start, state.start);
  const bool completed = client.send(req, response, error);
  if (status == 200 && completed) reader.finish(on_data);

  const std::string url_text = url.scheme_host_port + url.path_prefix + config.endpoint;
  if (status == -1) {
    // Never connected (as opposed to a connection that broke): the server is not there.
    result.connection_error =
        error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout ||
        error == httplib::Error::SSLConnection || error == httplib::Error::BindIPAddress;
    result.error = "connection to " + url_text + " failed: " + describe(error);
  } else if (status != 200) {
    result.error = "HTTP " + std::to_string(status) + ": " +
                   detail::error_message(error_body.empty() ? response.body : error_body);
  } else if (!state.error.empty()) {
    result.error = state.error;
  } else if (!completed) {
    result.error = "the event stream from " + url_text + " broke off: " + describe(error);
  } else if (state.finish_reason == "abort") {
    // vLLM's reason for a request the engine gave up on (here: a failed step): its tokens are not
    // a completed request's, and counting them as one hides the failure in the throughput.
    result.error = "the server aborted the request (finish_reason \"abort\") after " +
                   std::to_string(state.text_chunks) + " token chunks";
  } else if (state.text_chunks == 0) {
    result.error = "no token chunk in the response: cannot measure TTFT";
  } else {
    result.success = true;
    result.latency = seconds_between(state.start, state.last);
  }
  result.output_tokens = state.usage_completion >= 0 ? state.usage_completion : state.text_chunks;
  result.prompt_tokens =
      state.usage_prompt >= 0 ? state.usage_prompt : std::max<int64_t>(request.prompt_len, 0);
  return result;
}

}  // namespace

std::string request_body(const BenchClientConfig& config, const BenchRequest& request) {
  nlohmann::json body;
  body["model"] = config.model;
  if (is_chat(config.endpoint)) {
    LOWBIT_CHECK(request.prompt.is_string(),
                 "bench serve: " + config.endpoint +
                     " needs text prompts; token-id prompts (the random "
                     "dataset) work with /v1/completions");
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", request.prompt}}});
    body["max_completion_tokens"] = request.output_len;
  } else {
    body["prompt"] = request.prompt;
    body["max_tokens"] = request.output_len;
  }
  body["temperature"] = config.temperature;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (config.ignore_eos) body["ignore_eos"] = true;
  return body.dump();
}

BenchRun run_benchmark(const BenchClientConfig& config, const std::vector<BenchRequest>& requests) {
  LOWBIT_CHECK(!requests.empty(), "bench serve: no requests to send");
  LOWBIT_CHECK(config.concurrency >= 0, "bench serve: --concurrency must not be negative");
  LOWBIT_CHECK(config.timeout_s > 0, "bench serve: --timeout must be positive");
  const size_t suffix = config.endpoint.rfind("completions");
  LOWBIT_CHECK(suffix != std::string::npos && suffix + 11 == config.endpoint.size(),
               "bench serve: --endpoint must end in /completions or /chat/completions, got '" +
                   config.endpoint + "'");
  // Refuse a bad request body before any thread starts (chat with token-id prompts).
  for (const auto& request : requests) (void)request_body(config, request);
  const detail::ParsedUrl url = detail::parse_base_url(config.base_url);
  const std::vector<double> arrivals =
      arrival_times(static_cast<int64_t>(requests.size()), config.request_rate, config.seed);
  const size_t workers = config.concurrency > 0
                             ? std::min(static_cast<size_t>(config.concurrency), requests.size())
                             : requests.size();

  BenchRun run;
  run.results.resize(requests.size());
  std::atomic<size_t> next{0};
  std::atomic<int> in_flight{0}, max_in_flight{0};
  const auto run_start = Clock::now();
  auto worker = [&] {
    auto client = make_client(url, config.timeout_s, /*keep_alive=*/true);
    for (size_t i = next++; i < requests.size(); i = next++) {
      // Requests are taken in arrival order, so a request waits for its time and then for a slot.
      std::this_thread::sleep_until(run_start + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(arrivals[i])));
      const int now = ++in_flight;
      int seen = max_in_flight.load();
      while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
      }
      try {
        run.results[i] = send_one(*client, url, config, requests[i], run_start);
      } catch (const std::exception& e) {
        run.results[i].error = e.what();
      }
      --in_flight;
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (size_t w = 0; w < workers; ++w) threads.emplace_back(worker);
  for (auto& thread : threads) thread.join();
  run.duration_s = seconds_between(run_start, Clock::now());
  run.max_in_flight = max_in_flight.load();

  const bool none_connected =
      std::all_of(run.results.begin(), run.results.end(),
                  [](const RequestResult& r) { return r.connection_error; });
  if (none_connected) {
    throw IoError("bench serve: " + run.results.front().error +
                  " (is the server running? check --base-url)");
  }
  return run;
}

std::string fetch_first_model(const std::string& base_url, const std::string& api_key,
                              double timeout_s) {
  const detail::ParsedUrl url = detail::parse_base_url(base_url);
  const std::string models_url = url.scheme_host_port + url.path_prefix + "/v1/models";
  auto client = make_client(url, timeout_s, /*keep_alive=*/false);
  auto response = client->Get(url.path_prefix + "/v1/models", request_headers(api_key));
  if (!response) {
    throw IoError("bench serve: cannot connect to " + models_url + ": " +
                  describe(response.error()) + " (is the server running? pass --base-url)");
  }
  if (response->status != 200) {
    throw IoError("bench serve: GET " + models_url + " answered HTTP " +
                  std::to_string(response->status) + ": " + detail::error_message(response->body));
  }
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(response->body);
  } catch (const nlohmann::json::exception&) {
    throw IoError("bench serve: GET " + models_url + " did not return JSON");
  }
  if (!body.is_object() || !body.contains("data") || !body["data"].is_array() ||
      body["data"].empty() || !body["data"][0].is_object() || !body["data"][0].contains("id") ||
      !body["data"][0]["id"].is_string()) {
    throw IoError("bench serve: GET " + models_url +
                  " lists no model with an \"id\"; pass --model");
  }
  return body["data"][0]["id"];
}

void SseLineReader::feed(std::string_view bytes,
                         const std::function<void(std::string_view)>& on_data) {
  buffer_.append(bytes);
  size_t begin = 0;
  for (size_t end = buffer_.find('\n'); end != std::string::npos; end = buffer_.find('\n', begin)) {
    dispatch(std::string_view(buffer_).substr(begin, end - begin), on_data);
    begin = end + 1;
  }
  buffer_.erase(0, begin);
}

void SseLineReader::finish(const std::function<void(std::string_view)>& on_data) {
  if (!buffer_.empty()) dispatch(buffer_, on_data);
  buffer_.clear();
}

void SseLineReader::dispatch(std::string_view line,
                             const std::function<void(std::string_view)>& on_data) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.substr(0, 5) != "data:") return;
  line.remove_prefix(5);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  on_data(line);
}

namespace detail {

ParsedUrl parse_base_url(const std::string& base_url) {
  const size_t scheme_end = base_url.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : base_url.substr(0, scheme_end);
  LOWBIT_CHECK(
      scheme == "http" || scheme == "https",
      "bench serve: --base-url must start with http:// or https://, got '" + base_url + "'");
  ParsedUrl url;
  const size_t path_start = base_url.find('/', scheme_end + 3);
  url.scheme_host_port = base_url.substr(0, path_start);
  LOWBIT_CHECK(url.scheme_host_port.size() > scheme_end + 3,
               "bench serve: --base-url has no host: '" + base_url + "'");
  if (path_start != std::string::npos) url.path_prefix = base_url.substr(path_start);
  while (!url.path_prefix.empty() && url.path_prefix.back() == '/') url.path_prefix.pop_back();
  return url;
}

std::string error_message(std::string_view body) {
  try {
    const auto json = nlohmann::json::parse(body);
    if (json.is_object()) {
      auto error = json.find("error");
      if (error != json.end() && error->is_object() && error->contains("message") &&
          (*error)["message"].is_string())
        return (*error)["message"];
      if (error != json.end() && error->is_string()) return *error;
      for (const char* key : {"message", "detail"}) {
        if (json.contains(key) && json[key].is_string()) return json[key];
      }
    }
  } catch (const nlohmann::json::exception&) {
  }
  if (body.empty()) return "(empty body)";
  return std::string(body.substr(0, 500));
}

}  // namespace detail
}  // namespace lowbit::serve
