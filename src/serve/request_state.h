// The scheduler's record of one request, and what happens to it after each forward pass: sample
// the next token from its logits row, compute log-probabilities, detokenize, match stop strings
// and EOS ids, and push the result to its stream.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/paged_kv_cache.h"
#include "runtime/sampler.h"
#include "runtime/stop_strings.h"
#include "serve/engine.h"
#include "tokenizer/decode_stream.h"

namespace lowbit::serve {

using Clock = std::chrono::steady_clock;

struct Engine::Request {
  Request(GenerateParams p, const Tokenizer* tokenizer);

  GenerateParams params;
  std::shared_ptr<RequestStream> stream = std::make_shared<RequestStream>();
  runtime::Sampler sampler;
  std::optional<DecodeStream> detokenizer;
  runtime::StopStringMatcher stops;
  models::PagedSequence seq;
  std::vector<int32_t> context;  // prompt, then every generated id
  int64_t prompt_len = 0;
  int64_t admitted_order = 0;    // larger = admitted later (the first to be preempted)
  bool needs_prefill = true;     // the cache does not hold context[0 .. size-1) yet
  bool prompt_logprobs_done = false;
  int64_t preemptions = 0;
  int64_t cached_tokens = 0;     // prompt positions shared from the prefix cache (last admission)
  Clock::time_point submitted = Clock::now();
  Clock::time_point admitted;
  std::optional<Clock::time_point> first_token;

  int64_t output_count() const { return static_cast<int64_t>(context.size()) - prompt_len; }
  // Tokens this step feeds: the context past what the cache holds when (re)prefilling (all of it,
  // unless a prefix came from the prefix cache), else the last sampled id.
  std::span<const int32_t> step_tokens() const;
};

struct StepLimits {
  int64_t max_model_len = 0;
  std::span<const int32_t> eos_ids;
};

// After a forward pass: samples request's next token from the last row of `logits` ([rows,
// vocab]), pushes its output, and returns the finish reason (NONE while it continues).
FinishReason process_step_output(Engine::Request& request, const float* logits, int64_t rows,
                                 int64_t vocab, const StepLimits& limits);

// The same once the next token is chosen: `raw` is the logits row it came from (needed for
// logprobs; empty when the runner sampled on its device).
FinishReason process_step_token(Engine::Request& request, int32_t id, std::span<const float> raw,
                                const StepLimits& limits);

// True when the request's next token is the plain argmax of its logits (greedy, no penalties)
// and it wants no logprobs: a runner may then choose it on its device (BatchEntry::argmax_only).
bool argmax_is_enough(const Engine::Request& request);

// Log-probabilities of the prompt tokens from prefill logits of every prompt position.
std::vector<std::optional<TokenLogprob>> prompt_logprobs(std::span<const int32_t> prompt,
                                                         const float* logits, int64_t vocab,
                                                         int32_t top);

}  // namespace lowbit::serve
