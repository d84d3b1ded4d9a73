// POST /v1/completions and /v1/chat/completions: parse (protocol.h), turn prompts into token ids
// (the tokenizer; the chat template for chat), submit one engine request per prompt and choice,
// then answer with one JSON body or stream server-sent events as tokens arrive.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/protocol.h"
#include "tokenizer/chat_template.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace lowbit {
class Tokenizer;
namespace models {
class Model;
}
}  // namespace lowbit

namespace lowbit::serve {

class ServerMetrics;
struct ServerOptions;

// One choice in flight: its engine stream and what the response needs about its prompt.
struct ChoiceStream {
  int32_t index = 0;
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> prompt_ids;
  std::string prompt_text;  // for echo
};

// A parsed, tokenized, submitted request.
struct SubmittedRequest {
  ApiRequest api;
  ResponseMeta meta;
  LogprobOptions logprob_options;
  std::vector<ChoiceStream> choices;
  std::chrono::steady_clock::time_point arrived;
};

class CompletionHandler {
 public:
  CompletionHandler(const models::Model& model, const Tokenizer* tokenizer, Engine& engine,
                    ServerMetrics& metrics, const ServerOptions& options);

  void handle(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);

 private:
  std::shared_ptr<SubmittedRequest> submit(const std::string& body, Endpoint endpoint);
  std::vector<int32_t> chat_prompt(const ApiRequest& api) const;
  void respond_whole(SubmittedRequest& request, httplib::Response& res);
  void respond_stream(std::shared_ptr<SubmittedRequest> request, httplib::Response& res);
  uint64_t draw_seed();

  const Tokenizer* tokenizer_;
  Engine& engine_;
  ServerMetrics& metrics_;
  const ServerOptions& options_;
  ProtocolLimits limits_;
  std::optional<ChatTemplate> chat_template_;
  nlohmann::ordered_json template_variables_;  // bos_token, eos_token, ...
  std::mutex seed_mutex_;
  std::mt19937_64 seed_source_{std::random_device{}()};
};

// The logprobs entries of engine tokens, with each token's text as the tokenizer decodes it
// alone ("token_id:N" without a tokenizer, as vLLM's return_tokens_as_token_ids).
std::vector<LogprobEntry> logprob_entries(const Tokenizer* tokenizer,
                                          const std::vector<TokenLogprob>& logprobs);

const char* finish_reason_name(FinishReason reason);

// vLLM's stop_reason of an event: the stop string, the stop token id, or none.
StopReason stop_reason_of(const StreamEvent& event);

// Counts one finished choice in the server's metrics (its prompt tokens only when count_prompt:
// the n choices of one prompt share it).
void record_choice_metrics(ServerMetrics& metrics, const RequestSummary& summary,
                           const char* reason, bool count_prompt);

}  // namespace lowbit::serve
