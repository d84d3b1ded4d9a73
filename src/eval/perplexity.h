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
#include <span>
#include <vector>

#include "lowbit/tensor.h"

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

// The protocol's windows, in order: window w is [BOS] + text tokens [w * stride, (w + 1) * stride)
// with stride = context (- 1 with BOS). Exposed so that other evaluations (KL divergence against a
// baseline, `lowbit eval`) score exactly the tokens perplexity() scores.
std::vector<std::vector<int32_t>> perplexity_windows(const std::vector<int32_t>& tokens,
                                                     const PerplexityOptions& options);

// -log softmax(row)[target], in double: the per-token term perplexity() sums.
double negative_log_likelihood(const float* row, int64_t vocab, int32_t target);

// progress(window_index, window_count) after each window, for a progress line.
PerplexityResult perplexity(const models::Model& model, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t)>& progress = {});

// The fp32 logits [n, vocab] of every position of `tokens` run as a fresh sequence: how the
// evaluations reach a model on any backend (the CPU's below, the GPU's in apps/cli/device.cc).
using WindowLogits = std::function<Tensor(std::span<const int32_t> tokens)>;

// models::Model's window logits: one cache of `capacity` tokens, cleared for every window.
WindowLogits cpu_window_logits(const models::Model& model, int64_t capacity);

// The same perplexity through window logits of rows `vocab` wide.
PerplexityResult perplexity(const WindowLogits& logits, int64_t vocab,
                            const std::vector<int32_t>& tokens, const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lowbit::eval
