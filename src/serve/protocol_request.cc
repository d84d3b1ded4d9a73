// Request parsing for /v1/completions and /v1/chat/completions, following vLLM's
// CompletionRequest / ChatCompletionRequest (vllm/entrypoints/openai/*/protocol.py) and
// SamplingParams._verify_args (vllm/sampling_params.py): same defaults, same ranges, the same
// messages where vLLM has one. Deviations, each deliberate:
//  - Features lowbit does not implement (tools, structured output, logit_bias, beam search,
//    min_tokens, prompt_logprobs, ...) are refused with 400 naming the field; vLLM implements them
//    and OpenAI clients expect them to act, so ignoring them would return wrong output silently.
//  - Chat roles are limited to OpenAI's (system, user, assistant, tool, developer) and content to
//    text parts; vLLM also takes custom roles and multimodal parts.
//  - best_of is ignored, as in current vLLM (which dropped the field).
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "serve/protocol.h"
#include "serve/protocol_fields.h"

namespace lowbit::serve {

using detail::Fields;
using detail::Json;
using detail::python_float;

namespace {

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

[[noreturn]] void refuse(const std::string& param) {
  throw ApiError(400, "`" + param + "` is not supported by lowbit serve.", param);
}

[[noreturn]] void invalid(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

void refuse_response_format(const Fields& f) {
  const Json* format = f.object("response_format");
  if (format == nullptr) return;
  Fields inner(*format, "response_format.");
  const std::string type = inner.string("type").value_or("");
  if (type == "text") return;
  if (type == "json_object" || type == "json_schema" || type == "structural_tag") {
    throw ApiError(400, "response_format of type '" + type +
                            "' is not supported by lowbit serve (no structured output).",
                   "response_format");
  }
  invalid("response_format.type", "Invalid value for 'response_format.type': '" + type +
                                      "'. Supported values are: 'text', 'json_object', "
                                      "'json_schema' and 'structural_tag'.");
}

// Features vLLM implements and lowbit does not: refused, never silently ignored.
void refuse_unsupported(const Fields& f, Endpoint endpoint) {
  if (const Json* bias = f.object("logit_bias"); bias != nullptr && !bias->empty()) {
    refuse("logit_bias");
  }
  if (f.boolean("use_beam_search").value_or(false)) refuse("use_beam_search");
  for (const char* key : {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                          "structural_tag", "structured_outputs", "prompt_logprobs",
                          "allowed_token_ids", "logits_processors", "truncate_prompt_tokens",
                          "logprob_token_ids", "functions", "function_call"}) {
    if (f.get(key) != nullptr) refuse(key);
  }
  if (const Json* words = f.array("bad_words"); words != nullptr && !words->empty()) {
    refuse("bad_words");
  }
  if (const auto min_tokens = f.integer("min_tokens")) {
    if (*min_tokens < 0) {
      invalid("min_tokens",
              "min_tokens must be greater than or equal to 0, got " + std::to_string(*min_tokens) + ".");
    }
    if (*min_tokens > 0) refuse("min_tokens");
  }
  refuse_response_format(f);
  if (endpoint == Endpoint::COMPLETIONS) {
    // vLLM's own message for suffix.
    if (f.get("suffix") != nullptr) throw ApiError(400, "suffix is not currently supported", "suffix");
    if (f.get("prompt_embeds") != nullptr) refuse("prompt_embeds");
    return;
  }
  if (const Json* tools = f.array("tools")) {
    if (tools->empty()) {
      invalid("tools", "`tools` must not be an empty array. Either provide at least one tool or "
                       "omit the field entirely.");
    }
    refuse("tools");
  }
  if (const Json* choice = f.get("tool_choice"); choice != nullptr && *choice != "none") {
    invalid("tool_choice", "When using `tool_choice`, `tools` must be set.");
  }
  if (f.boolean("echo").value_or(false)) refuse("echo");
  if (f.get("chat_template") != nullptr) {
    invalid("chat_template",
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template.");
  }
}

// Request value, else the model's generation_config default, else OpenAI's.
double pick(std::optional<double> request, std::optional<double> model, double openai) {
  return request ? *request : model ? *model : openai;
}

void read_penalties_and_filters(const Fields& f, const ProtocolLimits& limits, ApiRequest& r) {
  const SamplingDefaults& d = limits.defaults;
  r.top_p = pick(f.number("top_p"), d.top_p, 1.0);
  if (!(r.top_p > 0.0 && r.top_p <= 1.0)) {
    invalid("top_p", "top_p must be in (0, 1], got " + python_float(r.top_p) + ".");
  }
  const int64_t top_k = f.integer("top_k").value_or(d.top_k.value_or(0));
  if (top_k < -1) {
    invalid("top_k", "top_k must be 0 (disable), or at least 1, got " + std::to_string(top_k) + ".");
  }
  r.top_k = top_k == -1 ? 0 : static_cast<int32_t>(std::min<int64_t>(top_k, kMaxTokenId));
  r.min_p = pick(f.number("min_p"), d.min_p, 0.0);
  if (!(r.min_p >= 0.0 && r.min_p <= 1.0)) {
    invalid("min_p", "min_p must be in [0, 1], got " + python_float(r.min_p) + ".");
  }
  r.presence_penalty = f.number("presence_penalty").value_or(0.0);
  r.frequency_penalty = f.number("frequency_penalty").value_or(0.0);
  for (auto [name, value] : {std::pair{"presence_penalty", r.presence_penalty},
                             std::pair{"frequency_penalty", r.frequency_penalty}}) {
    if (!(value >= -2.0 && value <= 2.0)) {
      invalid(name, std::string(name) + " must be in [-2, 2], got " + python_float(value) + ".");
    }
  }
  r.repetition_penalty = pick(f.number("repetition_penalty"), d.repetition_penalty, 1.0);
  if (!std::isfinite(r.repetition_penalty)) {
    invalid("repetition_penalty", "repetition_penalty must be a finite number, got " +
                                      python_float(r.repetition_penalty) + ".");
  }
  if (r.repetition_penalty <= 0.0) {
    invalid("repetition_penalty", "repetition_penalty must be greater than zero, got " +
                                      python_float(r.repetition_penalty) + ".");
  }
}

void read_sampling(const Fields& f, const ProtocolLimits& limits, ApiRequest& r) {
  r.temperature = pick(f.number("temperature"), limits.defaults.temperature, 1.0);
  if (!std::isfinite(r.temperature)) {
    invalid("temperature",
            "temperature must be a finite number, got " + python_float(r.temperature) + ".");
  }
  if (r.temperature < 0.0) {
    invalid("temperature",
            "temperature must be non-negative, got " + python_float(r.temperature) + ".");
  }
  if (r.temperature > 2.0) {
    invalid("temperature", "temperature must be in [0, 2], got " + python_float(r.temperature) + ".");
  }
  // vLLM raises temperatures below 0.01 (but not 0) to 0.01: smaller ones overflow its kernels.
  if (r.temperature > 0.0 && r.temperature < 0.01) r.temperature = 0.01;
  read_penalties_and_filters(f, limits, r);

  const int64_t n = f.integer("n").value_or(1);
  if (n < 1) invalid("n", "n must be at least 1, got " + std::to_string(n) + ".");
  if (n > limits.max_n) {
    invalid("n", "n must be at most " + std::to_string(limits.max_n) + ", got " +
                     std::to_string(n) + ".");
  }
  r.n = static_cast<int32_t>(n);
  // vLLM samples greedily below 1e-5 and refuses n > 1 there (every choice would be the same).
  if (r.temperature < 1e-5 && r.n > 1) {
    invalid("n", "n must be 1 when using greedy sampling, got " + std::to_string(n) + ".");
  }
  if (const auto seed = f.integer("seed"); seed && *seed != -1) r.seed = *seed;
}

void read_stops(const Fields& f, const ProtocolLimits& limits, ApiRequest& r) {
  if (const Json* stop = f.get("stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) {
          detail::throw_type_error("stop[" + std::to_string(i) + "]", "a string", (*stop)[i]);
        }
        r.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      detail::throw_type_error("stop", "a string or an array of strings", *stop);
    }
  }
  if (std::any_of(r.stop.begin(), r.stop.end(), [](const std::string& s) { return s.empty(); })) {
    invalid("stop", "stop cannot contain an empty string.");
  }
  if (r.stop.size() > static_cast<size_t>(limits.max_stop)) {
    invalid("stop", "stop may hold at most " + std::to_string(limits.max_stop) +
                        " strings, got " + std::to_string(r.stop.size()) + ".");
  }
  if (const Json* ids = f.array("stop_token_ids")) {
    std::set<int32_t> seen;
    for (size_t i = 0; i < ids->size(); ++i) {
      const std::string param = "stop_token_ids[" + std::to_string(i) + "]";
      const int64_t id = detail::integer_value((*ids)[i], param);
      if (id < 0 || id > kMaxTokenId) {
        invalid(param, "Invalid token id in 'stop_token_ids': " + std::to_string(id) + ".");
      }
      if (seen.insert(static_cast<int32_t>(id)).second) r.stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
}

void read_stream(const Fields& f, ApiRequest& r) {
  r.stream = f.boolean("stream").value_or(false);
  const Json* options = f.object("stream_options");
  if (options == nullptr) return;
  // vLLM validates the raw dict's truthiness ({} passes) but then treats any StreamOptions
  // object, {} included, as given.
  if (!r.stream) {
    if (!options->empty()) {
      invalid("stream_options", "Stream options can only be defined when `stream=True`.");
    }
    return;
  }
  Fields inner(*options, "stream_options.");
  // vLLM's StreamOptions default include_usage to true when the object is given.
  r.include_usage = inner.boolean("include_usage").value_or(true);
  r.continuous_usage_stats = r.include_usage && inner.boolean("continuous_usage_stats").value_or(false);
}

void check_logprob_count(int64_t count, const std::string& param, const ProtocolLimits& limits) {
  if (count == -1) {
    invalid(param, "Requested sample logprobs of -1 (the whole vocabulary), which is greater than "
                   "max allowed: " + std::to_string(limits.max_logprobs));
  }
  if (count < 0) invalid(param, "`" + param + "` must be a positive value or -1.");
  if (count > limits.max_logprobs) {
    invalid(param, "Requested sample logprobs of " + std::to_string(count) +
                       ", which is greater than max allowed: " + std::to_string(limits.max_logprobs));
  }
}

// Fields both endpoints share.
void read_common(const Fields& f, const ProtocolLimits& limits, Endpoint endpoint, ApiRequest& r) {
  r.endpoint = endpoint;
  refuse_unsupported(f, endpoint);
  if (auto model = f.string("model"); model && !model->empty()) r.model = std::move(*model);
  read_sampling(f, limits, r);
  read_stops(f, limits, r);
  read_stream(f, r);
  r.ignore_eos = f.boolean("ignore_eos").value_or(false);
  r.include_stop_str_in_output = f.boolean("include_stop_str_in_output").value_or(false);
  r.skip_special_tokens = f.boolean("skip_special_tokens").value_or(true);
  r.spaces_between_special_tokens = f.boolean("spaces_between_special_tokens").value_or(true);
  r.user = f.string("user").value_or("");
}

void check_max_tokens(int64_t value, const std::string& param) {
  if (value < 1) {
    invalid(param, "max_tokens must be at least 1, got " + std::to_string(value) + ".");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// /v1/completions

namespace {

[[noreturn]] void empty_prompt() {
  invalid("prompt", "Either prompt or prompt_embeds must be provided and non-empty.");
}

std::vector<int32_t> read_ids(const Json& array, const std::string& param) {
  if (array.empty()) empty_prompt();
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string where = param + "[" + std::to_string(i) + "]";
    const int64_t id = detail::integer_value(array[i], where);
    if (id < 0 || id > kMaxTokenId) {
      invalid(where, "Invalid token id in 'prompt': " + std::to_string(id) +
                         " (token ids are in [0, 2147483647]).");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<Prompt> read_prompts(const Fields& f, const ProtocolLimits& limits) {
  const Json* prompt = f.get("prompt");
  if (prompt == nullptr) empty_prompt();
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) empty_prompt();
    return {Prompt{prompt->get<std::string>(), {}}};
  }
  const char* expected =
      "a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (!prompt->is_array()) detail::throw_type_error("prompt", expected, *prompt);
  if (prompt->empty()) empty_prompt();
  const Json& first = prompt->front();
  if (first.is_number()) return {Prompt{std::nullopt, read_ids(*prompt, "prompt")}};
  if (prompt->size() > static_cast<size_t>(limits.max_prompts)) {
    invalid("prompt", "prompt list length " + std::to_string(prompt->size()) +
                          " exceeds the maximum allowed count of " +
                          std::to_string(limits.max_prompts) + ".");
  }
  std::vector<Prompt> prompts;
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& item = (*prompt)[i];
    const std::string param = "prompt[" + std::to_string(i) + "]";
    if (first.is_string() && item.is_string()) {
      if (item.get_ref<const std::string&>().empty()) empty_prompt();
      prompts.push_back(Prompt{item.get<std::string>(), {}});
    } else if (first.is_array() && item.is_array()) {
      prompts.push_back(Prompt{std::nullopt, read_ids(item, param)});
    } else {
      detail::throw_type_error("prompt", expected, *prompt);
    }
  }
  return prompts;
}

}  // namespace

ApiRequest parse_completion_request(std::string_view body, const ProtocolLimits& limits) {
  const Json parsed = detail::parse_body(body);
  const Fields f(parsed, "");
  ApiRequest r;
  read_common(f, limits, Endpoint::COMPLETIONS, r);
  r.prompts = read_prompts(f, limits);
  r.echo = f.boolean("echo").value_or(false);
  r.add_special_tokens = f.boolean("add_special_tokens").value_or(true);
  r.max_tokens = f.integer("max_tokens").value_or(16);  // null too: vLLM normalizes it to 16
  // vLLM: echo with max_tokens 0 returns the prompt alone.
  if (!(r.echo && *r.max_tokens == 0)) check_max_tokens(*r.max_tokens, "max_tokens");
  if (const Json* logprobs = f.get("logprobs")) {
    // pydantic reads a boolean as 0 or 1 for this integer field; vLLM then honours it.
    const int64_t count = logprobs->is_boolean() ? static_cast<int64_t>(logprobs->get<bool>())
                                                 : detail::integer_value(*logprobs, "logprobs");
    check_logprob_count(count, "logprobs", limits);
    r.logprobs = static_cast<int32_t>(count);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// /v1/chat/completions

namespace {

const std::set<std::string, std::less<>> kRoles = {"system", "user", "assistant", "tool",
                                                   "developer"};

// Text parts joined by "\n", as vLLM renders content in its "string" content format.
std::string flatten_parts(const Json& parts, const std::string& param) {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (!parts[i].is_object()) detail::throw_type_error(where, "an object", parts[i]);
    const Fields part(parts[i], where + ".");
    const std::string type = part.string("type").value_or("");
    if (type != "text") {
      invalid(where + ".type", "Unsupported content part type '" + type + "' in '" + where +
                                   "': lowbit serve only accepts text parts.");
    }
    const auto piece = part.string("text");
    if (!piece) invalid(where + ".text", "Missing required parameter: '" + where + ".text'.");
    if (i > 0) text += '\n';
    text += *piece;
  }
  return text;
}

Json read_message(const Json& message, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!message.is_object()) detail::throw_type_error(where, "an object", message);
  const Fields f(message, where + ".");
  const auto role = f.string("role");
  if (!role) invalid(where + ".role", "Missing required parameter: '" + where + ".role'.");
  if (!kRoles.contains(*role)) {
    invalid(where + ".role", "Invalid value: '" + *role + "'. Supported values are: 'system', "
                             "'user', 'assistant', 'tool' and 'developer'.");
  }
  Json out = message;
  const Json* content = f.get("content");
  if (content == nullptr) {
    // Only an assistant turn may come without content (e.g. one that called tools).
    if (*role != "assistant") {
      invalid(where + ".content", "Missing required parameter: '" + where + ".content'.");
    }
    out["content"] = "";
  } else if (content->is_array()) {
    out["content"] = flatten_parts(*content, where + ".content");
  } else if (!content->is_string()) {
    detail::throw_type_error(where + ".content", "a string or an array of text parts", *content);
  }
  return out;
}

}  // namespace

ApiRequest parse_chat_request(std::string_view body, const ProtocolLimits& limits) {
  const Json parsed = detail::parse_body(body);
  const Fields f(parsed, "");
  ApiRequest r;
  read_common(f, limits, Endpoint::CHAT, r);

  const Json* messages = f.array("messages");
  if (messages == nullptr) invalid("messages", "Missing required parameter: 'messages'.");
  if (messages->empty()) {
    invalid("messages", "Invalid 'messages': empty array. Expected an array with minimum length "
                        "1, but got an empty array instead.");
  }
  for (size_t i = 0; i < messages->size(); ++i) r.messages.push_back(read_message((*messages)[i], i));

  const auto add_generation_prompt = f.boolean("add_generation_prompt");
  r.continue_final_message = f.boolean("continue_final_message").value_or(false);
  if (r.continue_final_message && add_generation_prompt.value_or(false)) {
    invalid("continue_final_message", "Cannot set both `continue_final_message` and "
                                      "`add_generation_prompt` to True.");
  }
  // Continuing the last message implies no new generation prompt (vLLM checks only that both
  // were not sent as true; its default true would then reach the template).
  r.add_generation_prompt = add_generation_prompt.value_or(!r.continue_final_message);
  r.add_special_tokens = f.boolean("add_special_tokens").value_or(false);
  if (const Json* kwargs = f.object("chat_template_kwargs")) {
    if (kwargs->contains("chat_template")) {
      invalid("chat_template_kwargs",
              "Chat template is passed with request, but --trust-request-chat-template is not "
              "set. Refused request with untrusted chat template.");
    }
    r.chat_template_kwargs = *kwargs;
  }

  // max_completion_tokens replaces the deprecated max_tokens; either may be sent.
  if (const auto value = f.integer("max_completion_tokens")) {
    check_max_tokens(*value, "max_completion_tokens");
    r.max_tokens = *value;
  } else if (const auto legacy = f.integer("max_tokens")) {
    check_max_tokens(*legacy, "max_tokens");
    r.max_tokens = *legacy;
  }

  const bool logprobs = f.boolean("logprobs").value_or(false);
  const int64_t top = f.integer("top_logprobs").value_or(0);
  if (top < 0 && top != -1) invalid("top_logprobs", "`top_logprobs` must be a positive value or -1.");
  if ((top > 0 || top == -1) && !logprobs) {
    invalid("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
  }
  if (logprobs) {
    check_logprob_count(top, "top_logprobs", limits);
    r.logprobs = static_cast<int32_t>(top);
  }
  return r;
}

}  // namespace lowbit::serve
