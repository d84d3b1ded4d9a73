// Sampler: turns one position's logits into the next token id, with the knobs vLLM and transformers
// expose. Processing order (as vLLM does it): repetition penalty → frequency penalty → presence
// penalty → temperature → top-k → top-p → min-p → draw. temperature 0 means greedy (argmax, first
// maximal index like torch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace lowbit::runtime {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  int32_t top_k = 0;                // 0 or negative: disabled
  float top_p = 1.0f;               // 1: disabled
  float min_p = 0.0f;               // 0: disabled
  float repetition_penalty = 1.0f;  // 1: disabled; >1 discourages tokens already in the context
  // OpenAI's penalties, over the generated tokens only (vLLM): a token's logit loses
  // frequency_penalty per earlier occurrence and presence_penalty once if it occurred at all.
  float presence_penalty = 0.0f;   // in [-2, 2]; 0: disabled
  float frequency_penalty = 0.0f;  // in [-2, 2]; 0: disabled
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f; }
  // Throws InvalidArgument naming the field when a value is out of range.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // `context` is every token id seen so far (prompt + generated): the repetition penalty looks at
  // all of it, the presence and frequency penalties at context[output_begin..] (the generated
  // part). `logits` is modified in place (penalties, temperature, filtering).
  int32_t sample(std::span<float> logits, std::span<const int32_t> context, size_t output_begin);
  // The same with output_begin = 0: the whole context counts as generated output. Callers whose
  // context includes the prompt should pass output_begin for vLLM's presence/frequency semantics.
  int32_t sample(std::span<float> logits, std::span<const int32_t> context) {
    return sample(logits, context, 0);
  }

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch: candidate ids sorted by logit
};

// transformers' RepetitionPenaltyLogitsProcessor: for each distinct id in context, a positive
// logit is divided by the penalty and a negative one multiplied by it.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> context,
                              float penalty);

// OpenAI's presence and frequency penalties as vLLM applies them (after the repetition penalty,
// before temperature): logit[t] -= frequency * count(t in output) + presence * (count > 0).
// Ids outside the vocabulary are ignored.
void apply_presence_frequency_penalties(std::span<float> logits, std::span<const int32_t> output,
                                        float presence_penalty, float frequency_penalty);

// Index of the largest value; the first one on ties (torch.argmax).
int32_t argmax(std::span<const float> values);

// log(softmax(logits)), numerically stable (max subtracted, the sum of exponentials accumulated
// in double). out.size() must equal logits.size(). -inf logits give -inf. The serving layer
// reports log-probabilities of the raw model output, before penalties and temperature, which is
// vLLM's default (logprobs_mode "raw_logprobs") and what OpenAI documents.
void log_softmax(std::span<const float> logits, std::span<float> out);

// The k largest entries of `logprobs` as (id, logprob), largest first; ties keep the lower id
// first. k is clamped to the vocabulary size; k <= 0 gives an empty list.
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logprobs, int k);

}  // namespace lowbit::runtime
