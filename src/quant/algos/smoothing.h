// SmoothQuant and AWQ scale searches (ALGORITHMS.md §4). Both compute per-input-channel scales s
// for a mapping "smooth layer → balance layers": the balance Linears' weight columns are multiplied
// by s and the smooth layer (an RMSNorm weight, or the rows of a previous Linear) divided by it,
// which leaves the floating-point function unchanged and moves outliers from activations to weights.
//
// `compute` is the model's dtype: llm-compressor 0.14.0.1 does this arithmetic on the bf16 tensors
// (rounding after every op), so DType::BF16 reproduces its numbers on a bf16 model bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lowbit/dtype.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// A balance layer's weight [rows, cols] (cols = the smoothed channels), fp32.
struct BalanceWeight {
  const float* w;
  int64_t rows, cols;
};

// Running per-channel min / max of the smooth layer's output over all calibration tokens.
class ChannelRange {
 public:
  explicit ChannelRange(int64_t channels);
  void add(const float* x, int64_t tokens);  // x: [tokens, channels]
  const std::vector<float>& min() const { return min_; }
  const std::vector<float>& max() const { return max_; }
  bool empty() const { return tokens_ == 0; }

 private:
  std::vector<float> min_, max_;
  int64_t tokens_ = 0;
};

// SmoothQuant: s_j = act_range_j^α / w_range_j^(1-α) with act_range = max - min and w_range = 2·max
// |W[:, j]| over the balance layers (act_range_j when w_range_j = 0), clamped to >= 1e-5.
// log_equalization: act/log2(2+act). Each op rounded to `compute` as torch does (the clamp's
// result is fp32).
std::vector<float> smoothquant_scales(const ChannelRange& act, const std::vector<BalanceWeight>& ws,
                                      double alpha, bool log_equalization = false,
                                      DType compute = DType::F32);

// Running per-channel mean of |x| (AWQ's x_mean).
class ChannelAbsMean {
 public:
  explicit ChannelAbsMean(int64_t channels);
  void add(const float* x, int64_t tokens);
  std::vector<float> mean() const;  // throws InvalidArgument when nothing was added
  int64_t tokens() const { return tokens_; }

 private:
  std::vector<double> sum_;
  int64_t tokens_ = 0;
};

struct AwqOptions {
  int n_grid = 20;
  enum class Duo { Off, On, Both } duo_scaling = Duo::On;
};

// One grid point: llm-compressor's (ratio, use_duo_scaling).
struct AwqCandidate {
  double ratio;
  bool duo;
};

// The grid in llm-compressor's order. On: (0, no duo), then k/(n-2) with duo for k = 0..n-2.
// Off: k/(n-1) for k = 0..n-1. Both: for k = 0..n/2-1, ratio k/(n/2-1) without then with duo.
std::vector<AwqCandidate> awq_grid(const AwqOptions& options);

// Candidate scales: duo: x_mean^r / (w_mean^(1-r) + 1e-4) (fp32 pow over f64 → f64); no duo:
// x_mean^r (fp32); clamped >= 1e-4, divided by sqrt(max·min), inf/NaN → 1. The values are those
// llm-compressor applies (f64 with duo, fp32 values without).
std::vector<double> awq_candidate_scales(const std::vector<float>& x_mean,
                                         const std::vector<double>& w_mean,
                                         const AwqCandidate& candidate);

struct AwqResult {
  std::vector<double> scales;  // the winner, at llm-compressor's precision
  double best_loss = 0.0;
  double best_ratio = 0.0;
  bool best_duo = false;
  std::vector<double> losses;  // one per candidate, in grid order (awq_grid)
};

// AWQ's grid search. For each candidate `loss(scales)` must return the parent module's output MSE
// with the balance weights replaced by Q(W·s)/s (the caller runs the module; quantize_scaled below
// builds those weights). The first strictly smallest loss wins; throws Internal if no candidate has
// a finite loss, InvalidArgument for duo scaling with strategy tensor (as llm-compressor does).
AwqResult awq_search(const std::vector<float>& x_mean, const std::vector<BalanceWeight>& ws,
                     const QuantArgs& weight_args, const AwqOptions& options,
                     const std::function<double(const std::vector<double>&)>& loss,
                     DType compute = DType::F32);

// AWQ's duo-scaling weight statistic (_compute_layer_means): |W| per quantization chunk (tensor /
// row / group / block) divided by the chunk max (+1e-6) in `compute`, summed over the rows of all
// balance layers in f64 and divided by their total row count.
std::vector<double> awq_weight_mean(const std::vector<BalanceWeight>& ws, const QuantArgs& args,
                                    DType compute = DType::F32);

// W' = Q(W·s)/s with fresh memoryless min-max qparams on W·s (as the grid search computes them;
// fp32 out, values in `compute`). global_scale (tensor_group): 0 = from this layer alone; pass
// awq_fused_global_scale(...) to share one across fused layers as llm-compressor does.
std::vector<float> quantize_scaled(const BalanceWeight& w, const std::vector<double>& scales,
                                   const QuantArgs& args, DType compute, float global_scale = 0.0f);

// The NVFP4 global scale llm-compressor's fused observers give every layer in `ws` (q/k/v,
// gate/up) for candidate `scales`: from the absmax of all W·s.
float awq_fused_global_scale(const std::vector<BalanceWeight>& ws,
                             const std::vector<double>& scales, DType compute);

}  // namespace lowbit::quant
