// Response bodies, streamed chunks and errors, field for field as vLLM's protocol models serialize
// them (vllm/entrypoints/openai/*/protocol.py, serving.py). Kept: every field OpenAI's types
// define, plus vLLM's stop_reason. Left out: vLLM-internal extras that are always null here
// (token_ids, prompt_token_ids, prompt_logprobs, kv_transfer_params, metrics).
// One deliberate difference: with stream_options.include_usage every chunk but the last carries
// "usage": null, as OpenAI documents; vLLM leaves the key out. Clients accept both, and a client
// that indexes chunk["usage"] only works with the former.
#include <random>

#include "serve/protocol.h"

namespace lowbit::serve {

using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Errors

std::string error_type_for_status(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 403: return "PermissionDeniedError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 409: return "ConflictError";
    case 413: return "RequestEntityTooLargeError";
    case 422: return "UnprocessableEntityError";
    case 429: return "RateLimitError";
    case 501: return "NotImplementedError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

ApiError::ApiError(int status, std::string message, std::string param, std::string type)
    : InvalidArgument(std::move(message)),
      status_(status),
      type_(type.empty() ? error_type_for_status(status) : std::move(type)),
      param_(std::move(param)) {}

ApiError ApiError::model_not_found(std::string_view model) {
  return ApiError(404, "The model `" + std::string(model) + "` does not exist.", "model");
}

ApiError ApiError::unauthorized() {
  return ApiError(401, "Unauthorized: a valid API key is required (header 'Authorization: Bearer "
                       "KEY').");
}

Json error_json(const ApiError& error) {
  Json inner = Json::object();
  inner["message"] = error.what();
  inner["type"] = error.type();
  inner["param"] = error.param().empty() ? Json(nullptr) : Json(error.param());
  inner["code"] = error.status();
  return Json{{"error", std::move(inner)}};
}

std::string json_body(const Json& payload) {
  // Invalid UTF-8 (a message quoting the client's bytes, an undecodable token) becomes U+FFFD
  // instead of an exception mid-response.
  return payload.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string error_body(const ApiError& error) { return json_body(error_json(error)); }

// ---------------------------------------------------------------------------------------------
// Token text

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when the bytes there are not one
// (then the maximal invalid subpart is s[i] .. s[i + skip) with skip >= 1).
size_t utf8_sequence(std::string_view s, size_t i, size_t& skip) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  skip = 1;
  if (b < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size() || byte(i + k) < lo || byte(i + k) > hi) {
      skip = k;  // the lead byte and the valid continuations so far form one invalid subpart
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

bool valid_utf8(std::string_view s) {
  size_t skip = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t length = utf8_sequence(s, i, skip);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

// Characters (code points) of valid UTF-8, as Python's len() counts a str.
int64_t code_points(std::string_view s) {
  int64_t count = 0;
  for (unsigned char c : s) count += (c & 0xC0) != 0x80;
  return count;
}

}  // namespace

std::string logprob_token_text(std::string_view raw, TokenTextStyle style) {
  if (valid_utf8(raw)) return std::string(raw);
  std::string out;
  if (style == TokenTextStyle::BYTES_ESCAPE) {
    static const char* kHex = "0123456789abcdef";
    out = "bytes:";
    for (unsigned char c : raw) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
    return out;
  }
  // U+FFFD for each maximal invalid subpart: what Python's decode(errors="replace") and the
  // tokenizers library's lossy decode produce for a token decoded alone.
  size_t skip = 0;
  for (size_t i = 0; i < raw.size();) {
    const size_t length = utf8_sequence(raw, i, skip);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      i += skip;
    } else {
      out.append(raw.substr(i, length));
      i += length;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Logprobs

namespace {

// vLLM clamps -inf to OpenAI's JSON-safe floor.
double clamp_logprob(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

// The candidates vLLM lists for a position: the chosen token first, then the model's top-k,
// each id once.
std::vector<TopLogprob> candidates(const LogprobEntry& entry) {
  std::vector<TopLogprob> out;
  out.push_back(TopLogprob{entry.id, entry.token, entry.logprob.value_or(0.0f)});
  for (const TopLogprob& t : entry.top) {
    bool seen = false;
    for (const TopLogprob& o : out) seen = seen || o.id == t.id;
    if (!seen) out.push_back(t);
  }
  return out;
}

Json utf8_bytes(std::string_view raw, const std::string& shown, TokenTextStyle style) {
  // OpenAI lists the token's real bytes; vLLM the UTF-8 of the string it shows.
  const std::string_view bytes = style == TokenTextStyle::BYTES_ESCAPE ? raw : shown;
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

Json chat_candidate(const TopLogprob& t, TokenTextStyle style) {
  const std::string shown = logprob_token_text(t.token, style);
  Json out = Json::object();
  out["token"] = shown;
  out["logprob"] = clamp_logprob(t.logprob);
  out["bytes"] = utf8_bytes(t.token, shown, style);
  return out;
}

}  // namespace

Json completion_logprobs_json(std::span<const LogprobEntry> entries, const LogprobOptions& options,
                              int64_t initial_text_offset) {
  Json text_offset = Json::array(), token_logprobs = Json::array(), tokens = Json::array(),
       top_logprobs = Json::array();
  int64_t last_length = 0;
  for (const LogprobEntry& entry : entries) {
    const std::string shown = logprob_token_text(entry.token, options.style);
    tokens.push_back(shown);
    if (!entry.logprob) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
    } else {
      token_logprobs.push_back(clamp_logprob(*entry.logprob));
      // The chosen token and up to `top` more: OpenAI's "logprobs + 1" entries at most.
      Json top = Json::object();
      const std::vector<TopLogprob> list = candidates(entry);
      for (size_t i = 0; i < list.size() && i <= static_cast<size_t>(std::max(options.top, 0)); ++i) {
        top[logprob_token_text(list[i].token, options.style)] = clamp_logprob(list[i].logprob);
      }
      top_logprobs.push_back(std::move(top));
    }
    text_offset.push_back(text_offset.empty() ? initial_text_offset
                                              : text_offset.back().get<int64_t>() + last_length);
    last_length = code_points(shown);
  }
  Json out = Json::object();
  out["text_offset"] = std::move(text_offset);
  out["token_logprobs"] = std::move(token_logprobs);
  out["tokens"] = std::move(tokens);
  out["top_logprobs"] = std::move(top_logprobs);
  return out;
}

Json chat_logprobs_json(std::span<const LogprobEntry> entries, const LogprobOptions& options) {
  Json content = Json::array();
  for (const LogprobEntry& entry : entries) {
    const std::string shown = logprob_token_text(entry.token, options.style);
    Json item = Json::object();
    item["token"] = shown;
    item["logprob"] = entry.logprob ? clamp_logprob(*entry.logprob) : -9999.0;
    item["bytes"] = utf8_bytes(entry.token, shown, options.style);
    Json top = Json::array();
    if (entry.logprob) {
      const std::vector<TopLogprob> list = candidates(entry);
      for (size_t i = 0; i < list.size() && i < static_cast<size_t>(std::max(options.top, 0)); ++i) {
        top.push_back(chat_candidate(list[i], options.style));
      }
    }
    item["top_logprobs"] = std::move(top);
    content.push_back(std::move(item));
  }
  return Json{{"content", std::move(content)}};
}

// ---------------------------------------------------------------------------------------------
// Bodies and chunks

namespace {

Json usage_object(const Usage& usage, bool details_null) {
  Json out = Json::object();
  out["prompt_tokens"] = usage.prompt_tokens;
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  if (usage.cached_tokens) {
    out["prompt_tokens_details"] = Json{{"cached_tokens", *usage.cached_tokens}};
  } else if (details_null) {
    out["prompt_tokens_details"] = nullptr;
  }
  return out;
}

Json stop_reason_json(const StopReason& reason) {
  if (const auto* id = std::get_if<int64_t>(&reason)) return Json(*id);
  if (const auto* text = std::get_if<std::string>(&reason)) return Json(*text);
  return Json(nullptr);
}

Json header(const ResponseMeta& meta, std::string_view object) {
  Json out = Json::object();
  out["id"] = meta.id;
  out["object"] = object;
  out["created"] = meta.created;
  out["model"] = meta.model;
  return out;
}

void add_usage(Json& chunk, const ChunkUsage& usage) {
  if (!usage.present) return;
  chunk["usage"] = usage.value ? usage_object(*usage.value, false) : Json(nullptr);
}

Json optional_string(const std::optional<std::string>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json completion_choice_json(const CompletionChoice& choice, const LogprobOptions& options,
                            int64_t initial_text_offset) {
  Json out = Json::object();
  out["index"] = choice.index;
  out["text"] = choice.text;
  out["logprobs"] = choice.logprobs
                        ? completion_logprobs_json(*choice.logprobs, options, initial_text_offset)
                        : Json(nullptr);
  out["finish_reason"] = optional_string(choice.finish_reason);
  out["stop_reason"] = stop_reason_json(choice.stop_reason);
  return out;
}

}  // namespace

Json usage_json(const Usage& usage) { return usage_object(usage, true); }

Json completion_response(const ResponseMeta& meta, std::span<const CompletionChoice> choices,
                         const Usage& usage, const LogprobOptions& options) {
  Json out = header(meta, "text_completion");
  Json list = Json::array();
  for (const CompletionChoice& choice : choices) list.push_back(completion_choice_json(choice, options, 0));
  out["choices"] = std::move(list);
  out["service_tier"] = nullptr;
  out["system_fingerprint"] = nullptr;
  out["usage"] = usage_json(usage);
  return out;
}

Json chat_response(const ResponseMeta& meta, std::span<const ChatChoice> choices,
                   const Usage& usage, const LogprobOptions& options) {
  Json out = header(meta, "chat.completion");
  Json list = Json::array();
  for (const ChatChoice& choice : choices) {
    Json message = Json::object();
    message["role"] = choice.role;
    message["content"] = choice.content;
    message["refusal"] = nullptr;
    Json item = Json::object();
    item["index"] = choice.index;
    item["message"] = std::move(message);
    item["logprobs"] = choice.logprobs ? chat_logprobs_json(*choice.logprobs, options) : Json(nullptr);
    item["finish_reason"] = choice.finish_reason;
    item["stop_reason"] = stop_reason_json(choice.stop_reason);
    list.push_back(std::move(item));
  }
  out["choices"] = std::move(list);
  out["service_tier"] = nullptr;
  out["system_fingerprint"] = nullptr;
  out["usage"] = usage_json(usage);
  return out;
}

ChunkUsage chunk_usage(const ApiRequest& request, std::optional<Usage> running) {
  ChunkUsage out;
  out.present = request.include_usage;
  if (request.continuous_usage_stats) out.value = running;
  return out;
}

Json completion_chunk(const ResponseMeta& meta, const CompletionChoice& choice,
                      const LogprobOptions& options, int64_t initial_text_offset,
                      const ChunkUsage& usage) {
  Json out = header(meta, "text_completion");
  out["choices"] = Json::array({completion_choice_json(choice, options, initial_text_offset)});
  add_usage(out, usage);
  return out;
}

Json chat_role_chunk(const ResponseMeta& meta, int32_t index, std::string_view role,
                     const ChunkUsage& usage) {
  Json delta = Json::object();
  delta["role"] = role;
  delta["content"] = "";
  Json choice = Json::object();
  choice["index"] = index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  Json out = header(meta, "chat.completion.chunk");
  out["choices"] = Json::array({std::move(choice)});
  add_usage(out, usage);
  return out;
}

Json chat_content_chunk(const ResponseMeta& meta, int32_t index, std::string_view content,
                        const std::vector<LogprobEntry>* logprobs,
                        const std::optional<std::string>& finish_reason,
                        const StopReason& stop_reason, const LogprobOptions& options,
                        const ChunkUsage& usage) {
  Json choice = Json::object();
  choice["index"] = index;
  choice["delta"] = Json{{"content", content}};
  choice["logprobs"] = logprobs != nullptr ? chat_logprobs_json(*logprobs, options) : Json(nullptr);
  choice["finish_reason"] = optional_string(finish_reason);
  // vLLM sets stop_reason on the finishing chunk only.
  if (finish_reason) choice["stop_reason"] = stop_reason_json(stop_reason);
  Json out = header(meta, "chat.completion.chunk");
  out["choices"] = Json::array({std::move(choice)});
  add_usage(out, usage);
  return out;
}

Json usage_chunk(const ResponseMeta& meta, Endpoint endpoint, const Usage& usage) {
  Json out = header(meta, endpoint == Endpoint::CHAT ? "chat.completion.chunk" : "text_completion");
  out["choices"] = Json::array();
  out["usage"] = usage_object(usage, false);
  return out;
}

std::string sse_event(const Json& payload) { return "data: " + json_body(payload) + "\n\n"; }

// ---------------------------------------------------------------------------------------------
// Models and ids

Json models_list(std::span<const ModelCard> models) {
  Json data = Json::array();
  for (const ModelCard& card : models) {
    Json item = Json::object();
    item["id"] = card.id;
    item["object"] = "model";
    item["created"] = card.created;
    item["owned_by"] = "lowbit";
    item["root"] = card.root;
    item["parent"] = nullptr;
    item["max_model_len"] = card.max_model_len;
    data.push_back(std::move(item));
  }
  return Json{{"object", "list"}, {"data", std::move(data)}};
}

std::string models_list_body(const std::vector<std::string>& served_model_names,
                             int64_t max_model_len, int64_t created, std::string_view root) {
  std::vector<ModelCard> cards;
  for (const std::string& name : served_model_names) {
    const std::string model_root = root.empty() && !served_model_names.empty()
                                       ? served_model_names.front()
                                       : std::string(root);
    cards.push_back(ModelCard{name, model_root, created, max_model_len});
  }
  return json_body(models_list(cards));
}

std::string make_response_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id(prefix);
  id += '-';
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = rng();
    for (int i = 0; i < 16; ++i, bits >>= 4) id += kHex[bits & 0xF];
  }
  return id;
}

}  // namespace lowbit::serve
