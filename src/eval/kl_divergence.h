// KL divergence of a model against a baseline on the same token windows, with the statistics
// llama.cpp's `perplexity --kl-divergence` reports (tools/perplexity/perplexity.cpp):
//   per token  KL(baseline ‖ model) = Σ_i p_base(i) · (log p_base(i) - log p_model(i)) over the full
//              vocabulary (here in double from the two fp32 logit rows, no cut-off of small p_base);
//   mean       with uncertainty sqrt((E[x²] - E[x]²) / (n - 1)) (0 for n <= 10);
//   median     the middle value, or the mean of the two middle values for even n;
//   percentile linear interpolation at fraction · (n - 1) in the sorted values;
//   same top   the fraction of tokens whose most likely id (first maximum) is the same in both,
//              with uncertainty sqrt(p (1 - p) / (n - 1)).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "eval/perplexity.h"
#include "eval/scored_windows.h"
#include "lowbit/tensor.h"

namespace lowbit::models {
class Model;
}

namespace lowbit::eval {

struct RowComparison {
  double kld = 0;         // KL(baseline ‖ model), nats
  bool same_top = false;  // argmax of both rows equal
};
RowComparison compare_logit_rows(const float* model_row, const float* base_row, int64_t vocab);

struct KldStatistics {
  int64_t count = 0;
  double mean = 0, mean_stderr = 0;
  double median = 0, p90 = 0, p99 = 0, max = 0, min = 0;
  double same_top = 0, same_top_stderr = 0;  // fractions in [0, 1]
};
// `kld`: one value per token; `same_top_count`: tokens whose top ids agree. Empty input: all 0.
KldStatistics kld_statistics(std::vector<double> kld, int64_t same_top_count);
// llama.cpp's percentile of sorted values (fraction in [0, 1]).
double sorted_percentile(const std::vector<double>& sorted, double fraction);

struct WindowScores {
  int64_t windows = 0;
  int64_t scored_tokens = 0;
  double total_nll = 0;  // the model's, summed in window and row order (as perplexity() does)
  double seconds = 0;
  // With a baseline: its NLL over the same tokens, and per token KLD and top-1 agreement.
  bool has_baseline = false;
  double base_total_nll = 0;
  std::vector<double> kld;
  int64_t same_top = 0;
  // Mean KLD over scored rows in the first and the last quarter of each window's positions (rows
  // r < n/4 and r >= n - n/4 of an n-token input): how the error grows with the context length.
  double kld_first_quarter = 0, kld_last_quarter = 0;
  int64_t first_quarter_tokens = 0, last_quarter_tokens = 0;

  double perplexity() const;
  double base_perplexity() const;
};

// Runs every window through `model` (and `baseline` when not null, which must have the same
// vocabulary size) and scores the target rows. progress(done, total) after each window.
WindowScores score_windows(const models::Model& model, const models::Model* baseline,
                           const std::vector<ScoredWindow>& windows,
                           const std::function<void(int64_t, int64_t)>& progress = {});

// The same scores from logits functions; `baseline` may be null. Both return rows of `vocab`.
WindowScores score_windows(const WindowLogits& model, const WindowLogits* baseline, int64_t vocab,
                           const std::vector<ScoredWindow>& windows,
                           const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lowbit::eval
