#include "serve/request_state.h"

#include <algorithm>
#include <cmath>

#include "lowbit/error.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {

namespace {

// Log-probability of every id under softmax(logits) (the raw model distribution, before
// penalties and temperature: vLLM's default logprobs mode), and the k most likely ids.
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int32_t top,
                           std::vector<float>& scratch) {
  scratch.resize(logits.size());
  runtime::log_softmax(logits, scratch);
  TokenLogprob out;
  out.id = id;
  out.logprob = scratch[static_cast<size_t>(id)];
  if (top > 0) out.top = runtime::top_logprobs(scratch, top);
  return out;
}

}  // namespace

Engine::Request::Request(GenerateParams p, const Tokenizer* tokenizer)
    : params(std::move(p)), sampler(params.sampling), stops(params.stop) {
  context = params.prompt_ids;
  prompt_len = static_cast<int64_t>(context.size());
  if (tokenizer != nullptr) {
    detokenizer.emplace(*tokenizer, params.skip_special_tokens, params.prompt_ids);
  }
}

std::span<const int32_t> Engine::Request::step_tokens() const {
  if (needs_prefill) return std::span<const int32_t>(context).subspan(static_cast<size_t>(seq.length));
  return std::span<const int32_t>(&context.back(), 1);
}

std::vector<std::optional<TokenLogprob>> prompt_logprobs(std::span<const int32_t> prompt,
                                                         const float* logits, int64_t vocab,
                                                         int32_t top) {
  std::vector<std::optional<TokenLogprob>> out(prompt.size());
  std::vector<float> scratch;
  for (size_t i = 1; i < prompt.size(); ++i) {
    std::span<const float> row(logits + static_cast<int64_t>(i - 1) * vocab,
                               static_cast<size_t>(vocab));
    out[i] = token_logprob(row, prompt[i], top, scratch);
  }
  return out;
}

bool argmax_is_enough(const Engine::Request& r) {
  const runtime::SamplingParams& p = r.sampler.params();
  return p.greedy() && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && r.params.logprobs < 0;
}

FinishReason process_step_output(Engine::Request& r, const float* logits, int64_t rows,
                                 int64_t vocab, const StepLimits& limits) {
  std::span<const float> raw(logits + (rows - 1) * vocab, static_cast<size_t>(vocab));
  thread_local std::vector<float> row;
  row.assign(raw.begin(), raw.end());  // the sampler edits its row in place
  const int32_t id = r.sampler.sample(row, r.context, static_cast<size_t>(r.prompt_len));
  return process_step_token(r, id, raw, limits);
}

FinishReason process_step_token(Engine::Request& r, int32_t id, std::span<const float> raw,
                                const StepLimits& limits) {
  r.context.push_back(id);
  if (!r.first_token) r.first_token = Clock::now();

  StreamEvent event;
  event.token_ids.push_back(id);
  if (r.params.logprobs >= 0) {
    LOWBIT_CHECK_AS(Internal, !raw.empty(), "logprobs requested but the step returned no logits");
    thread_local std::vector<float> scratch;
    event.logprobs.push_back(token_logprob(raw, id, r.params.logprobs, scratch));
  }

  FinishReason finish = FinishReason::NONE;
  const bool eos = !r.params.ignore_eos &&
                   std::find(limits.eos_ids.begin(), limits.eos_ids.end(), id) != limits.eos_ids.end();
  const bool stop_token = std::find(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end(),
                                    id) != r.params.stop_token_ids.end();
  if (eos || stop_token) {
    finish = FinishReason::STOP;
    if (stop_token) {
      event.stop_reason = std::to_string(id);
      event.stop_reason_is_token = true;
      // vLLM keeps a stop token's text when asked to include the stop in the output (EOS never).
      if (r.params.include_stop_str_in_output && r.detokenizer) {
        event.text = r.stops.push(r.detokenizer->step(id));
      }
    }
  } else if (r.detokenizer) {
    event.text = r.stops.push(r.detokenizer->step(id));
    if (r.stops.stopped()) {
      finish = FinishReason::STOP;
      event.stop_reason = r.stops.matched();
      if (r.params.include_stop_str_in_output) event.text += r.stops.matched();
    }
  }
  if (finish == FinishReason::NONE &&
      (r.output_count() >= r.params.max_tokens ||
       static_cast<int64_t>(r.context.size()) >= limits.max_model_len)) {
    finish = FinishReason::LENGTH;
  }
  if (finish != FinishReason::NONE && r.detokenizer && !r.stops.stopped()) {
    // Whatever was held back (a partial character or a possible stop-string start) is output.
    event.text += r.stops.push(r.detokenizer->flush());
    event.text += r.stops.flush();
  }
  event.finish = finish;
  r.stream->push(std::move(event));
  return finish;
}

}  // namespace lowbit::serve
