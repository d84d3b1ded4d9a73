#include "eval/kl_divergence.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "eval/perplexity.h"
#include "lowbit/error.h"
#include "models/model.h"

namespace lowbit::eval {
namespace {

// log Σ exp(row) in double, and the index of the first maximum.
double log_sum_exp(const float* row, int64_t vocab, int64_t& argmax) {
  argmax = 0;
  for (int64_t i = 1; i < vocab; ++i) {
    if (row[i] > row[argmax]) argmax = i;
  }
  const double max_logit = row[argmax];
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - max_logit);
  return max_logit + std::log(sum);
}

}  // namespace

RowComparison compare_logit_rows(const float* model_row, const float* base_row, int64_t vocab) {
  int64_t top_model = 0, top_base = 0;
  const double lse_model = log_sum_exp(model_row, vocab, top_model);
  const double lse_base = log_sum_exp(base_row, vocab, top_base);
  double kld = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double log_p_base = static_cast<double>(base_row[i]) - lse_base;
    const double log_p_model = static_cast<double>(model_row[i]) - lse_model;
    // p_base = 0 (an -inf logit) contributes nothing, by the convention 0 · log 0 = 0.
    if (std::isfinite(log_p_base)) kld += std::exp(log_p_base) * (log_p_base - log_p_model);
  }
  return {kld, top_model == top_base};
}

double sorted_percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  double p = fraction * static_cast<double>(sorted.size() - 1);
  const auto ip = static_cast<size_t>(p);
  p -= static_cast<double>(ip);
  return (1 - p) * sorted[ip] + p * sorted[std::min(ip + 1, sorted.size() - 1)];
}

KldStatistics kld_statistics(std::vector<double> kld, int64_t same_top_count) {
  KldStatistics s;
  s.count = static_cast<int64_t>(kld.size());
  if (kld.empty()) return s;
  const auto n = static_cast<double>(s.count);
  double sum = 0, sum2 = 0;
  for (double x : kld) {
    sum += x;
    sum2 += x * x;
  }
  s.mean = sum / n;
  const double variance = sum2 / n - s.mean * s.mean;
  s.mean_stderr = variance > 0 && s.count > 10 ? std::sqrt(variance / (n - 1)) : 0;
  std::sort(kld.begin(), kld.end());
  const size_t half = kld.size() / 2;
  s.median = kld.size() % 2 == 0 ? 0.5 * (kld[half] + kld[half - 1]) : kld[half];
  s.p90 = sorted_percentile(kld, 0.90);
  s.p99 = sorted_percentile(kld, 0.99);
  s.min = kld.front();
  s.max = kld.back();
  s.same_top = static_cast<double>(same_top_count) / n;
  s.same_top_stderr = s.count > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / (n - 1)) : 0;
  return s;
}

double WindowScores::perplexity() const {
  return scored_tokens > 0 ? std::exp(total_nll / static_cast<double>(scored_tokens)) : 0;
}

double WindowScores::base_perplexity() const {
  return scored_tokens > 0 ? std::exp(base_total_nll / static_cast<double>(scored_tokens)) : 0;
}

WindowScores score_windows(const models::Model& model, const models::Model* baseline,
                           const std::vector<ScoredWindow>& windows,
                           const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t vocab = model.config().vocab_size;
  if (baseline != nullptr && baseline->config().vocab_size != vocab) {
    throw InvalidArgument(baseline->directory() + "/config.json: vocab_size " +
                          std::to_string(baseline->config().vocab_size) + " differs from " +
                          model.directory() + "'s " + std::to_string(vocab) +
                          ": the baseline must use the same tokenizer");
  }
  size_t longest = 0;
  for (const ScoredWindow& w : windows) longest = std::max(longest, w.input.size());
  const auto capacity = static_cast<int64_t>(longest);
  const WindowLogits model_logits = cpu_window_logits(model, capacity);
  const WindowLogits base_logits = baseline ? cpu_window_logits(*baseline, capacity) : WindowLogits();
  return score_windows(model_logits, baseline ? &base_logits : nullptr, vocab, windows, progress);
}

WindowScores score_windows(const WindowLogits& model, const WindowLogits* baseline, int64_t vocab,
                           const std::vector<ScoredWindow>& windows,
                           const std::function<void(int64_t, int64_t)>& progress) {
  WindowScores scores;
  scores.has_baseline = baseline != nullptr;
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> nll, base_nll, kld;
  std::vector<char> same_top;
  for (size_t w = 0; w < windows.size(); ++w) {
    const ScoredWindow& window = windows[w];
    const auto rows = static_cast<int64_t>(window.targets.size());
    LOWBIT_CHECK(window.first_scored + rows <= static_cast<int64_t>(window.input.size()),
                 "score_windows: window " + std::to_string(w) + " scores rows past its input");
    const Tensor logits = model(window.input);
    Tensor base_logits;
    if (baseline) base_logits = (*baseline)(window.input);
    LOWBIT_CHECK_AS(Internal, logits.dim(1) == vocab && (!baseline || base_logits.dim(1) == vocab),
                    "score_windows: logits rows are not vocab_size wide");
    nll.assign(static_cast<size_t>(rows), 0);
    base_nll.assign(static_cast<size_t>(rows), 0);
    kld.assign(static_cast<size_t>(rows), 0);
    same_top.assign(static_cast<size_t>(rows), 0);
    const float* data = logits.data_as<const float>();
    const float* base_data = baseline ? base_logits.data_as<const float>() : nullptr;
    // Rows are independent: computed in parallel, summed below in order so that the total is
    // bit-for-bit what perplexity() sums.
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t row = (window.first_scored + j) * vocab;
      const int32_t target = window.targets[static_cast<size_t>(j)];
      nll[static_cast<size_t>(j)] = negative_log_likelihood(data + row, vocab, target);
      if (base_data == nullptr) continue;
      base_nll[static_cast<size_t>(j)] = negative_log_likelihood(base_data + row, vocab, target);
      const RowComparison c = compare_logit_rows(data + row, base_data + row, vocab);
      kld[static_cast<size_t>(j)] = c.kld;
      same_top[static_cast<size_t>(j)] = c.same_top ? 1 : 0;
    }
    const auto n = static_cast<int64_t>(window.input.size());
    for (int64_t j = 0; j < rows; ++j) {
      const auto k = static_cast<size_t>(j);
      scores.total_nll += nll[k];
      ++scores.scored_tokens;
      if (!baseline) continue;
      scores.base_total_nll += base_nll[k];
      scores.kld.push_back(kld[k]);
      scores.same_top += same_top[k];
      const int64_t position = window.first_scored + j;
      if (position < n / 4) {
        scores.kld_first_quarter += kld[k];
        ++scores.first_quarter_tokens;
      } else if (position >= n - n / 4) {
        scores.kld_last_quarter += kld[k];
        ++scores.last_quarter_tokens;
      }
    }
    ++scores.windows;
    if (progress) progress(static_cast<int64_t>(w + 1), static_cast<int64_t>(windows.size()));
  }
  if (scores.first_quarter_tokens > 0) {
    scores.kld_first_quarter /= static_cast<double>(scores.first_quarter_tokens);
  }
  if (scores.last_quarter_tokens > 0) {
    scores.kld_last_quarter /= static_cast<double>(scores.last_quarter_tokens);
  }
  scores.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return scores;
}

}  // namespace lowbit::eval
