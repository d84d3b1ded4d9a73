// The request's limits once the prompt is tokenized (context length, completion length), the
// runtime sampler's parameters, and the model's sampling defaults from generation_config.json.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "serve/protocol.h"

namespace lowbit::serve {

void check_length(const ApiRequest& request, size_t prompt_tokens, const ProtocolLimits& limits) {
  if (limits.max_model_len <= 0) throw Internal("check_length: max_model_len is not set");
  const int64_t limit = limits.max_model_len;
  const auto prompt = static_cast<int64_t>(prompt_tokens);
  const std::string head =
      "This model's maximum context length is " + std::to_string(limit) + " tokens. ";
  // The wording is vLLM's up to 0.10 (and OpenAI's); newer vLLM phrases the same check
  // differently, but clients match on "maximum context length".
  if (!request.max_tokens) {
    if (prompt >= limit) {
      throw ApiError(400, head + "However, you requested " + std::to_string(prompt) +
                              " tokens in the messages, Please reduce the length of the messages.",
                     request.endpoint == Endpoint::CHAT ? "messages" : "prompt");
    }
    return;
  }
  // An echo with max_tokens 0 still runs one step (vLLM generates one token and drops it).
  const int64_t completion = std::max<int64_t>(*request.max_tokens, 1);
  if (prompt + completion > limit) {
    throw ApiError(400, head + "However, you requested " + std::to_string(prompt + completion) +
                            " tokens (" + std::to_string(prompt) + " in the messages, " +
                            std::to_string(completion) +
                            " in the completion). Please reduce the length of the messages or "
                            "completion.",
                   "max_tokens");
  }
}

int64_t effective_max_tokens(const ApiRequest& request, size_t prompt_tokens,
                             const ProtocolLimits& limits) {
  check_length(request, prompt_tokens, limits);
  int64_t tokens = request.max_tokens ? *request.max_tokens
                                      : limits.max_model_len - static_cast<int64_t>(prompt_tokens);
  // vLLM takes the smallest of the request's value, the room left and generation_config's
  // max_new_tokens.
  if (limits.defaults.max_tokens) tokens = std::min(tokens, *limits.defaults.max_tokens);
  return tokens;
}

std::string response_role(const ApiRequest& request) {
  if (request.add_generation_prompt || request.messages.empty()) return "assistant";
  return request.messages.back().value("role", "assistant");
}

namespace {

// The sampler works in float: a positive double below float's range (top_p 1e-300) must not
// become 0, nor a huge one infinity, or the sampler would refuse what the parser accepted.
float positive_float(double value) {
  return static_cast<float>(std::clamp(value, static_cast<double>(std::numeric_limits<float>::min()),
                                       static_cast<double>(std::numeric_limits<float>::max())));
}

}  // namespace

runtime::SamplingParams to_sampling_params(const ApiRequest& request, int32_t choice_index,
                                           uint64_t random_seed) {
  runtime::SamplingParams p;
  p.temperature = static_cast<float>(request.temperature);
  p.top_k = request.top_k;
  p.top_p = positive_float(request.top_p);
  p.min_p = static_cast<float>(request.min_p);
  p.repetition_penalty = positive_float(request.repetition_penalty);
  p.presence_penalty = static_cast<float>(request.presence_penalty);
  p.frequency_penalty = static_cast<float>(request.frequency_penalty);
  // Unsigned arithmetic: a seed near the int64 limit wraps instead of overflowing.
  p.seed = request.seed ? static_cast<uint64_t>(*request.seed) + static_cast<uint64_t>(choice_index)
                        : random_seed;
  return p;
}

namespace {

std::optional<double> config_number(const nlohmann::json& config, const char* key,
                                    const std::string& name) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) {
    throw InvalidArgument(name + ": field '" + key + "' must be a number, got " + it->dump());
  }
  return it->get<double>();
}

std::optional<int64_t> config_integer(const nlohmann::json& config, const char* key,
                                      const std::string& name) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    throw InvalidArgument(name + ": field '" + key + "' must be an integer, got " + it->dump());
  }
  return it->get<int64_t>();
}

}  // namespace

SamplingDefaults parse_sampling_defaults(std::string_view json_text,
                                         const std::string& name_for_errors) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidArgument(name_for_errors + ": malformed JSON at byte " + std::to_string(e.byte));
  }
  if (!config.is_object()) throw InvalidArgument(name_for_errors + ": expected a JSON object");
  // The keys vLLM's ModelConfig.get_diff_sampling_param reads. With transformers 5 every value
  // present counts (GenerationConfig defaults are None); transformers 4 dropped values equal to
  // its own defaults (top_k 50, ...), which this does not imitate.
  SamplingDefaults d;
  d.temperature = config_number(config, "temperature", name_for_errors);
  d.top_p = config_number(config, "top_p", name_for_errors);
  d.top_k = config_integer(config, "top_k", name_for_errors);
  d.min_p = config_number(config, "min_p", name_for_errors);
  d.repetition_penalty = config_number(config, "repetition_penalty", name_for_errors);
  d.max_tokens = config_integer(config, "max_new_tokens", name_for_errors);
  return d;
}

SamplingDefaults sampling_defaults_from_dir(const std::string& model_dir) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / "generation_config.json";
  if (!std::filesystem::exists(path)) return {};
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_sampling_defaults(text.str(), path.string());
}

}  // namespace lowbit::serve
