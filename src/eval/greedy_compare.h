// Same-prompt greedy generation of a model and its baseline: how long their outputs agree, how long
// and how repetitive each is, and how fast each decodes. The prompts are fixed slices of the
// evaluation text's tokens, so two runs of `lowbit eval` on the same text use the same prompts.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace lowbit::models {
class Model;
}

namespace lowbit::eval {

struct GreedyOptions {
  int prompts = 8;         // P prompts
  int prompt_tokens = 32;  // tokens each
  int new_tokens = 64;     // G tokens generated at most (EOS ends an output earlier)
};

// P slices of `prompt_tokens` tokens, evenly spaced over `tokens` (slice p starts at
// p * (size - prompt_tokens) / P). Fewer tokens than one prompt: InvalidArgument.
std::vector<std::vector<int32_t>> greedy_prompts(const std::vector<int32_t>& tokens,
                                                 const GreedyOptions& options);

struct GreedyRun {
  std::vector<std::vector<int32_t>> outputs;  // generated ids per prompt (an ending EOS included)
  std::vector<int64_t> lengths;               // tokens before EOS (all of them when none)
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t decode_tokens = 0;  // tokens produced by decode steps (all but each output's first)

  double mean_length() const;
  double decode_tokens_per_second() const;
  // Repeated n-grams over all outputs (each output's ids before EOS): (n-grams - distinct n-grams
  // within the same output) / n-grams, 0 when no output has n ids.
  double repeated_ngram_fraction(int n) const;
};

// Greedy decoding (temperature 0, first maximum on ties) of every prompt with `model`.
GreedyRun greedy_run(const models::Model& model, const std::vector<std::vector<int32_t>>& prompts,
                     int new_tokens, const std::vector<int32_t>& eos_ids);

// Both models' runs on the same prompts, alternating prompt by prompt (model, then baseline) so that
// load on the machine that changes over time weighs on both decode speeds alike.
std::pair<GreedyRun, GreedyRun> greedy_run_pair(const models::Model& model,
                                                const models::Model& baseline,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int new_tokens);

// Mean over prompts of the length of the common prefix of the two runs' generated ids.
double mean_common_prefix(const GreedyRun& a, const GreedyRun& b);

}  // namespace lowbit::eval
