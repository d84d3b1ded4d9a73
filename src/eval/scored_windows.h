// The token windows a perplexity protocol scores, as forward passes: the model reads `input` and
// row first_scored + j of its logits is scored against targets[j]. Both protocols of `lowbit eval`
// (and the KL divergence against a baseline, which scores the same rows) are expressed this way.
//
// reference: perplexity.h's protocol (non-overlapping windows of --ctx tokens, optional BOS, every
//   token but a window's first scored; what `lowbit ppl` reports).
// lm-eval: lm-eval's loglikelihood_rolling as its HF model runs it (get_rolling_token_windows with
//   max_seq_len = max_length, context_len = 1, then make_disjoint_window): the text is one
//   document; the first window is [prefix token] + the first max_length - 1 tokens and predicts the
//   first max_length tokens; each later window predicts the next max_length tokens (fewer at the
//   end) from the max_length tokens before each, so every token is scored exactly once and the last
//   window re-reads earlier tokens as context.
#pragma once

#include <cstdint>
#include <vector>

#include "eval/perplexity.h"

namespace lowbit::eval {

struct ScoredWindow {
  std::vector<int32_t> input;
  int64_t first_scored = 0;      // logits row of targets[0]
  std::vector<int32_t> targets;  // the tokens scored, in order
};

std::vector<ScoredWindow> reference_windows(const std::vector<int32_t>& tokens,
                                            const PerplexityOptions& options);

// max_windows > 0 keeps the first max_windows windows.
std::vector<ScoredWindow> lm_eval_rolling_windows(const std::vector<int32_t>& tokens,
                                                  int32_t prefix_token, int64_t max_length,
                                                  int64_t max_windows = 0);

}  // namespace lowbit::eval
