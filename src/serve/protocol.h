// The OpenAI API protocol of `lowbit serve`, shaped as vLLM's OpenAI-compatible server speaks it:
// request bodies of /v1/completions and /v1/chat/completions parsed and validated into ApiRequest
// (never throwing anything but ApiError, with vLLM's messages where it has them), the sampling
// defaults of a model's generation_config.json, the context-length check, and the JSON the server
// answers with (responses, server-sent-event chunks, /v1/models, errors).
//
// Where OpenAI and vLLM differ, vLLM is followed unless a comment here or in protocol_*.cc says
// otherwise and why. Everything here is pure (no I/O but sampling_defaults_from_dir) and
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "lowbit/error.h"
#include "runtime/sampler.h"

namespace lowbit::serve {

// ---------------------------------------------------------------------------------------------
// Errors

// A request the server refuses, with the HTTP status and OpenAI's error fields. `type` follows
// vLLM's naming, which is the openai client's exception class for the status (BadRequestError,
// AuthenticationError, NotFoundError, ...); `param` names the offending request field.
class ApiError : public InvalidArgument {
 public:
  // type empty: error_type_for_status(status).
  ApiError(int status, std::string message, std::string param = {}, std::string type = {});

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // empty: none (JSON null)

  // 404 "The model `name` does not exist." (vLLM's words), param "model".
  static ApiError model_not_found(std::string_view model);
  // 401 for a missing or wrong API key.
  static ApiError unauthorized();

 private:
  int status_;
  std::string type_;
  std::string param_;
};

// The error type vLLM and the openai client use for an HTTP status ("BadRequestError" for 400,
// "NotFoundError" for 404, "InternalServerError" for 5xx, ...).
std::string error_type_for_status(int status);

// {"error": {"message", "type", "param", "code"}} with code the HTTP status (vLLM's ErrorResponse).
nlohmann::ordered_json error_json(const ApiError& error);
std::string error_body(const ApiError& error);

// Compact JSON text of a response body; invalid UTF-8 anywhere becomes U+FFFD instead of an
// exception (use it for every body this file builds).
std::string json_body(const nlohmann::ordered_json& payload);

// ---------------------------------------------------------------------------------------------
// Requests

enum class Endpoint { COMPLETIONS, CHAT };

// One completion prompt: text to tokenize, or token ids given by the client (lm-eval's
// local-completions sends ids). Exactly one of the two is set.
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

// Sampling defaults of the served model: generation_config.json's values (vLLM's
// --generation-config auto). Fields absent there stay empty; a request field left out takes the
// default here, else OpenAI's (temperature 1, top_p 1, top_k off, min_p 0, repetition 1).
struct SamplingDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_tokens;  // generation_config's max_new_tokens: caps every request
};

// Reads model_dir/generation_config.json (no file: all empty). Throws InvalidArgument naming the
// file and field for malformed JSON or wrong types (not ApiError: this is server start-up).
SamplingDefaults sampling_defaults_from_dir(const std::string& model_dir);
SamplingDefaults parse_sampling_defaults(std::string_view json_text,
                                         const std::string& name_for_errors);

struct ProtocolLimits {
  int64_t max_model_len = 0;  // prompt + completion tokens; check_length needs it > 0
  int32_t max_n = 128;        // choices per request (vLLM: VLLM_MAX_N_SEQUENCES)
  int32_t max_logprobs = 20;  // top logprobs per token (vLLM's --max-logprobs default)
  int32_t max_stop = 16;      // stop strings per request
  int32_t max_prompts = 1024;  // prompts in one completion request (VLLM_MAX_COMPLETION_PROMPTS)
  SamplingDefaults defaults{};
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::COMPLETIONS;
  std::optional<std::string> model;  // absent: the server's first served name (as vLLM)

  // /v1/completions
  std::vector<Prompt> prompts;
  bool echo = false;  // prepend the prompt (and its logprobs) to each choice
  // Let the tokenizer add BOS and the like (vLLM ext.): true for completions; false for chat,
  // whose template writes them.
  bool add_special_tokens = true;

  // /v1/chat/completions: messages as sent, with every content flattened to one string (text
  // parts joined by "\n", as vLLM's "string" content format). Roles are checked.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();

  // Completion length: completions default to 16 (OpenAI, vLLM); chat to nullopt, meaning up
  // to the context limit. 0 only for completions with echo (vLLM: echo the prompt, generate
  // nothing). See effective_max_tokens.
  std::optional<int64_t> max_tokens;

  // Sampling, with the defaults already applied (request, else SamplingDefaults, else OpenAI).
  double temperature = 1.0;  // 0: greedy; (0, 0.01) raised to 0.01 as vLLM does
  double top_p = 1.0;
  int32_t top_k = 0;  // 0 (or -1 in the request): off
  double min_p = 0.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::optional<int64_t> seed;  // -1 in the request means none (vLLM)
  int32_t n = 1;

  std::vector<std::string> stop;        // non-empty strings
  std::vector<int32_t> stop_token_ids;  // deduplicated, order kept
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;

  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage (vLLM: true when the
                                        // object is given without it)
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats (vLLM ext.)

  // Top log-probabilities per token: completions' `logprobs` (0..max_logprobs), chat's
  // `top_logprobs` when `logprobs` is true. nullopt: no logprobs in the response.
  std::optional<int32_t> logprobs;

  std::string user;  // accepted and ignored
};

// Parse and validate a request body. Unknown fields are ignored (vLLM's default); features lowbit
// does not implement (tools, structured output, logit_bias, beam search, ...) are refused with
// 400 rather than silently ignored. Every failure is an ApiError whose param names the field.
ApiRequest parse_completion_request(std::string_view body, const ProtocolLimits& limits);
ApiRequest parse_chat_request(std::string_view body, const ProtocolLimits& limits);

// After tokenizing: throws ApiError 400 when the prompt (prompt_tokens long) does not leave room
// for the requested completion under limits.max_model_len, in vLLM's (and OpenAI's) words:
// "This model's maximum context length is N tokens. However, you requested M tokens (P in the
// messages, C in the completion). Please reduce the length of the messages or completion."
// A chat request without max_tokens fails only when the prompt alone fills the context.
void check_length(const ApiRequest& request, size_t prompt_tokens, const ProtocolLimits& limits);

// check_length, then the number of tokens to generate: max_tokens, or for chat without it
// max_model_len - prompt_tokens; capped by generation_config's max_new_tokens (vLLM).
int64_t effective_max_tokens(const ApiRequest& request, size_t prompt_tokens,
                             const ProtocolLimits& limits);

// The role of the reply (vLLM's get_chat_request_role): "assistant", or with
// add_generation_prompt false the role of the last message, which the reply continues.
std::string response_role(const ApiRequest& request);

// The runtime sampler's parameters for choice `choice_index` of the request. With a request seed,
// choice i uses seed + i (so n choices differ but the request is reproducible); without one,
// `random_seed` (the server draws it).
runtime::SamplingParams to_sampling_params(const ApiRequest& request, int32_t choice_index,
                                           uint64_t random_seed);

// ---------------------------------------------------------------------------------------------
// Responses

// How a token whose bytes are not valid UTF-8 on their own (part of a multi-byte character) is
// shown in logprobs. vLLM decodes each token alone, which turns such bytes into U+FFFD;
// OpenAI writes them as "bytes:\xNN" escapes.
enum class TokenTextStyle { REPLACEMENT_CHARACTER, BYTES_ESCAPE };

// The string a logprobs entry shows for a token's raw decoded bytes.
std::string logprob_token_text(std::string_view raw, TokenTextStyle style);

struct TopLogprob {
  int32_t id = 0;
  std::string token;  // raw decoded bytes of this id alone
  float logprob = 0.0f;
};

// One output (or echoed prompt) token's log-probability, filled by the server from the engine.
struct LogprobEntry {
  int32_t id = 0;
  std::string token;              // raw decoded bytes of this id alone (tokenizer.decode([id]))
  std::optional<float> logprob;   // nullopt: none (the first prompt token when echoing)
  std::vector<TopLogprob> top;    // the model's top-k, most likely first (runtime::top_logprobs)
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens, as
  // OpenAI and vLLM report it); nullopt when prefix caching is off.
  std::optional<int64_t> cached_tokens;
};

// What ended a choice beyond the finish reason: vLLM's stop_reason (the stop string, or the stop
// token id; none for EOS or length).
using StopReason = std::variant<std::monostate, int64_t, std::string>;

struct ResponseMeta {
  std::string id;       // make_response_id("cmpl") / ("chatcmpl")
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served name the client asked for
};

struct LogprobOptions {
  int32_t top = 0;  // the request's logprobs / top_logprobs
  TokenTextStyle style = TokenTextStyle::REPLACEMENT_CHARACTER;
};

struct CompletionChoice {
  int32_t index = 0;
  std::string text;  // with echo: prompt text + output text
  std::optional<std::vector<LogprobEntry>> logprobs;  // with echo: prompt entries first
  std::optional<std::string> finish_reason;  // "stop", "length", "abort"; nullopt mid-stream
  StopReason stop_reason;
};

struct ChatChoice {
  int32_t index = 0;
  std::string content;
  std::optional<std::vector<LogprobEntry>> logprobs;
  std::string finish_reason = "stop";
  StopReason stop_reason;
  std::string role = "assistant";
};

// "<prefix>-" followed by 32 random hex digits (vLLM: f"cmpl-{uuid4().hex}").
std::string make_response_id(std::string_view prefix);

// Logprobs objects: completions' {text_offset, token_logprobs, tokens, top_logprobs} (offsets in
// characters, starting at initial_text_offset) and chat's {content: [...]}.
nlohmann::ordered_json completion_logprobs_json(std::span<const LogprobEntry> entries,
                                                const LogprobOptions& options,
                                                int64_t initial_text_offset = 0);
nlohmann::ordered_json chat_logprobs_json(std::span<const LogprobEntry> entries,
                                          const LogprobOptions& options);

nlohmann::ordered_json usage_json(const Usage& usage);

// Non-streaming bodies.
nlohmann::ordered_json completion_response(const ResponseMeta& meta,
                                           std::span<const CompletionChoice> choices,
                                           const Usage& usage, const LogprobOptions& options);
nlohmann::ordered_json chat_response(const ResponseMeta& meta, std::span<const ChatChoice> choices,
                                     const Usage& usage, const LogprobOptions& options);

// The `usage` member of a streamed chunk: absent (no include_usage), null (include_usage: every
// chunk but the last carries "usage": null, as OpenAI documents), or running totals
// (continuous_usage_stats).
struct ChunkUsage {
  bool present = false;
  std::optional<Usage> value;
};
ChunkUsage chunk_usage(const ApiRequest& request, std::optional<Usage> running = std::nullopt);

// Streamed chunks. A completion chunk carries one choice's new text (its logprobs' text_offset
// starting at initial_text_offset, the characters already sent for that choice).
nlohmann::ordered_json completion_chunk(const ResponseMeta& meta, const CompletionChoice& choice,
                                        const LogprobOptions& options,
                                        int64_t initial_text_offset, const ChunkUsage& usage);
// Chat: the first chunk of each choice carries only the role (delta {role, content: ""}); later
// ones the new content; the last one the finish reason (and stop_reason).
nlohmann::ordered_json chat_role_chunk(const ResponseMeta& meta, int32_t index,
                                       std::string_view role, const ChunkUsage& usage);
nlohmann::ordered_json chat_content_chunk(const ResponseMeta& meta, int32_t index,
                                          std::string_view content,
                                          const std::vector<LogprobEntry>* logprobs,
                                          const std::optional<std::string>& finish_reason,
                                          const StopReason& stop_reason,
                                          const LogprobOptions& options, const ChunkUsage& usage);
// The last chunk when include_usage: empty choices and the request's total usage.
nlohmann::ordered_json usage_chunk(const ResponseMeta& meta, Endpoint endpoint, const Usage& usage);

// Server-sent events: "data: <compact json>\n\n", and the stream's end marker.
std::string sse_event(const nlohmann::ordered_json& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// /v1/models.
struct ModelCard {
  std::string id;    // a served model name
  std::string root;  // the model path it serves
  int64_t created = 0;
  int64_t max_model_len = 0;
};
nlohmann::ordered_json models_list(std::span<const ModelCard> models);
// The body for served names that all serve one model (root: the first name unless given).
std::string models_list_body(const std::vector<std::string>& served_model_names,
                             int64_t max_model_len, int64_t created, std::string_view root = {});

}  // namespace lowbit::serve
