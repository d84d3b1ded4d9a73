// Sampler: turns one position's logits into the next token id, with the knobs vLLM and transformers
// expose. Processing order (as both engines do it): repetition penalty → temperature → top-k →
// top-p → min-p → draw. temperature 0 means greedy (argmax, first maximal index like torch).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace lowbit::runtime {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  int32_t top_k = 0;                // 0 or negative: disabled
  float top_p = 1.0f;               // 1: disabled
  float min_p = 0.0f;               // 0: disabled
  float repetition_penalty = 1.0f;  // 1: disabled; >1 discourages tokens already in the context
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f; }
  // Throws InvalidArgument naming the field when a value is out of range.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);

  // `context` is every token id seen so far (prompt + generated), for the repetition penalty.
  // `logits` is modified in place (penalties, temperature, filtering).
  int32_t sample(std::span<float> logits, std::span<const int32_t> context);

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

// Index of the largest value; the first one on ties (torch.argmax).
int32_t argmax(std::span<const float> values);

}  // namespace lowbit::runtime
