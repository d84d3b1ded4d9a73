// libFuzzer target: arbitrary bytes as the body of /v1/completions and /v1/chat/completions.
// Both parsers may only refuse with ApiError (a 4xx the server sends back); anything else escapes
// and, like a crash, a sanitizer report or a hang, is reported by libFuzzer. Accepted requests go
// on through what the server does next with them (length check, sampler parameters, the JSON
// and SSE it answers with), and every error body must serialize.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "serve/protocol.h"

namespace {

using namespace lowbit::serve;

void follow_up(const ApiRequest& request, const ProtocolLimits& limits, std::string_view bytes) {
  try {
    (void)effective_max_tokens(request, bytes.size() % 64, limits);
  } catch (const ApiError& e) {
    (void)error_body(e);
  }
  lowbit::runtime::SamplingParams params = to_sampling_params(request, request.n - 1, 1);
  params.validate();  // whatever the parser accepts, the sampler must accept too
  // The bytes as a token's decoded text, in both styles, through the response builders.
  LogprobEntry entry{1, std::string(bytes.substr(0, 16)), -0.5f, {{2, std::string(bytes), -1.0f}}};
  const std::vector<LogprobEntry> entries = {entry};
  const LogprobOptions options{request.logprobs.value_or(0), TokenTextStyle::REPLACEMENT_CHARACTER};
  const ResponseMeta meta{"cmpl-0", 0, request.model.value_or("m")};
  CompletionChoice choice{0, std::string(bytes), entries, "stop", std::string(bytes)};
  (void)sse_event(completion_chunk(meta, choice, options, 0, chunk_usage(request)));
  (void)json_body(chat_logprobs_json(entries, {options.top, TokenTextStyle::BYTES_ESCAPE}));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ProtocolLimits limits;
  limits.max_model_len = 64;
  limits.max_prompts = 8;
  for (const bool chat : {false, true}) {
    try {
      const ApiRequest request =
          chat ? parse_chat_request(bytes, limits) : parse_completion_request(bytes, limits);
      follow_up(request, limits, bytes);
    } catch (const ApiError& e) {
      if (e.status() != 400) __builtin_trap();  // parsing refuses with 400 only
      (void)error_body(e);
    }
  }
  return 0;
}
