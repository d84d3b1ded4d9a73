#include "eval/scored_windows.h"

#include <algorithm>
#include <string>

#include "lowbit/error.h"

namespace lowbit::eval {

std::vector<ScoredWindow> reference_windows(const std::vector<int32_t>& tokens,
                                            const PerplexityOptions& options) {
  std::vector<ScoredWindow> result;
  for (std::vector<int32_t>& window : perplexity_windows(tokens, options)) {
    ScoredWindow scored;
    scored.targets.assign(window.begin() + 1, window.end());
    scored.input = std::move(window);
    result.push_back(std::move(scored));
  }
  return result;
}

std::vector<ScoredWindow> lm_eval_rolling_windows(const std::vector<int32_t>& tokens,
                                                  int32_t prefix_token, int64_t max_length,
                                                  int64_t max_windows) {
  LOWBIT_CHECK(max_length >= 2, "lm-eval perplexity: --ctx must be at least 2");
  LOWBIT_CHECK(!tokens.empty(), "lm-eval perplexity: the text has no tokens");
  const auto n = static_cast<int64_t>(tokens.size());
  auto slice = [&](int64_t begin, int64_t end) {
    return std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end);
  };
  std::vector<ScoredWindow> result;
  // First window: the prefix token stands in for the missing context of token 0.
  const int64_t first = std::min(max_length, n);
  ScoredWindow head;
  head.input.push_back(prefix_token);
  const std::vector<int32_t> head_text = slice(0, first - 1);
  head.input.insert(head.input.end(), head_text.begin(), head_text.end());
  head.targets = slice(0, first);
  result.push_back(std::move(head));
  // Later windows: pred_len = max_seq_len - context_len + 1 = max_length tokens each; the input is
  // the max_length tokens before the window's end, of which the last `pred` rows are scored.
  for (int64_t predicted = first; predicted < n;) {
    if (max_windows > 0 && static_cast<int64_t>(result.size()) >= max_windows) break;
    const int64_t pred = std::min(n - predicted, max_length);
    const int64_t end = predicted + pred;
    ScoredWindow window;
    window.input = slice(end - max_length - 1, end - 1);
    window.first_scored = max_length - pred;
    window.targets = slice(end - pred, end);
    result.push_back(std::move(window));
    predicted = end;
  }
  return result;
}

}  // namespace lowbit::eval
