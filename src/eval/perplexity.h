// Perplexity over a token stream, with the protocol of the reference numbers
// (tests/golden/ref-llama-19m/reference.json "ppl_protocol"): the text is tokenized without special
// tokens and cut into non-overlapping windows of `context` tokens (the remainder is dropped); each
// window is scored on its own, every token but the first given its prefix; PPL = exp(total NLL /
// scored tokens). With a BOS id, each window becomes BOS + (context - 1) text tokens and every
// text token is scored.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace lowbit::models {
class Model;
}

namespace lowbit::eval {

struct PerplexityOptions {
  int64_t context = 512;
  std::optional<int32_t> bos_id;
  int64_t max_windows = 0;  // 0: all
};

struct PerplexityResult {
  double perplexity = 0;
  double total_nll = 0;
  int64_t scored_tokens = 0;
  int64_t windows = 0;
  double seconds = 0;
};

// progress(window_index, window_count) after each window, for a progress line.
PerplexityResult perplexity(const models::Model& model, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lowbit::eval
