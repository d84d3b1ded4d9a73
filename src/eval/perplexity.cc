#include "eval/perplexity.h"

#include <chrono>
#include <memory>
#include <cmath>
#include <string>

#include "lowbit/error.h"
#include "models/model.h"

namespace lowbit::eval {

// In double so that 700k summed terms keep their digits.
double negative_log_likelihood(const float* row, int64_t vocab, int32_t target) {
  double max_logit = row[0];
  for (int64_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(row[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max_logit);
  return std::log(sum) + max_logit - static_cast<double>(row[target]);
}

std::vector<std::vector<int32_t>> perplexity_windows(const std::vector<int32_t>& tokens,
                                                     const PerplexityOptions& options) {
  LOWBIT_CHECK(options.context >= 2, "perplexity: --ctx must be at least 2");
  const int64_t text_per_window = options.bos_id ? options.context - 1 : options.context;
  int64_t windows = static_cast<int64_t>(tokens.size()) / text_per_window;
  if (options.max_windows > 0) windows = std::min(windows, options.max_windows);
  LOWBIT_CHECK(windows > 0, "perplexity: the text has " + std::to_string(tokens.size()) +
                                " tokens, fewer than one window of " +
                                std::to_string(text_per_window));
  std::vector<std::vector<int32_t>> result(static_cast<size_t>(windows));
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t>& window = result[static_cast<size_t>(w)];
    if (options.bos_id) window.push_back(*options.bos_id);
    auto begin = tokens.begin() + w * text_per_window;
    window.insert(window.end(), begin, begin + text_per_window);
  }
  return result;
}

WindowLogits cpu_window_logits(const models::Model& model, int64_t capacity) {
  auto cache = std::make_shared<models::KvCache>(model.new_cache(capacity));
  return [&model, cache](std::span<const int32_t> tokens) {
    cache->clear();
    return model.forward(tokens, *cache, /*all_logits=*/true);
  };
}

PerplexityResult perplexity(const models::Model& model, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t)>& progress) {
  return perplexity(cpu_window_logits(model, options.context), model.config().vocab_size, tokens,
                    options, progress);
}

PerplexityResult perplexity(const WindowLogits& logits, int64_t vocab,
                            const std::vector<int32_t>& tokens, const PerplexityOptions& options,
                            const std::function<void(int64_t, int64_t)>& progress) {
  const std::vector<std::vector<int32_t>> all_windows = perplexity_windows(tokens, options);
  const auto windows = static_cast<int64_t>(all_windows.size());
  PerplexityResult result;
  auto start = std::chrono::steady_clock::now();
  for (int64_t w = 0; w < windows; ++w) {
    const std::vector<int32_t>& window = all_windows[static_cast<size_t>(w)];
    const Tensor scores = logits(window);
    const float* data = scores.data_as<const float>();
    for (size_t t = 0; t + 1 < window.size(); ++t) {
      result.total_nll += negative_log_likelihood(data + static_cast<int64_t>(t) * vocab, vocab,
                                                  window[t + 1]);
      ++result.scored_tokens;
    }
    ++result.windows;
    if (progress) progress(w + 1, windows);
  }
  result.perplexity = std::exp(result.total_nll / static_cast<double>(result.scored_tokens));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace lowbit::eval
