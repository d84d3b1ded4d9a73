#include "quant/algos/gptq_setup.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/log.h"
#include "lowbit/error.h"
#include "quant/algos/observers.h"

namespace lowbit::quant {

void check_gptq_inputs(const std::vector<float>& w, int64_t rows, int64_t cols, size_t h_size,
                       const std::function<bool()>& h_finite, const QuantArgs& args,
                       const GptqOptions& o) {
  LOWBIT_CHECK(rows > 0 && cols > 0, "gptq: weight shape must be positive");
  LOWBIT_CHECK(w.size() == static_cast<size_t>(rows * cols),
               "gptq: weight has " + std::to_string(w.size()) + " values, expected " +
                   std::to_string(rows) + "x" + std::to_string(cols));
  LOWBIT_CHECK(h_size == static_cast<size_t>(cols * cols),
               "gptq: Hessian has " + std::to_string(h_size) + " values, expected " +
                   std::to_string(cols) + "x" + std::to_string(cols));
  LOWBIT_CHECK(h_finite(),
               "gptq: the Hessian holds NaN or Inf (calibration activations overflowed?)");
  LOWBIT_CHECK(o.block_size > 0, "gptq: block_size must be positive");
  LOWBIT_CHECK(std::isfinite(o.dampening_frac) && o.dampening_frac >= 0.0,
               "gptq: dampening_frac must be a non-negative number");
  LOWBIT_CHECK(o.max_damping_retries >= 0, "gptq: max_damping_retries must be >= 0");
  LOWBIT_CHECK(!args.is_dynamic(), "gptq: weights cannot use dynamic quantization");
  const Strategy s = args.strategy;
  LOWBIT_CHECK(s == Strategy::Tensor || s == Strategy::Channel || s == Strategy::Group ||
                   s == Strategy::TensorGroup || s == Strategy::Block,
               "gptq: strategy " + to_string(s) + " is not supported for weights");
}

ActOrder gptq_actorder(const QuantArgs& args) {
  if (args.actorder == ActOrder::Group && args.strategy != Strategy::Group &&
      args.strategy != Strategy::TensorGroup) {
    log_warn("gptq: actorder=group needs strategy group or tensor_group, got " +
             to_string(args.strategy) + "; quantizing without activation ordering");
    return ActOrder::None;
  }
  return args.actorder;
}

std::vector<float> hessian_diagonal(const std::vector<float>& h, int64_t n) {
  std::vector<float> d(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) d[k] = h[k * n + k];
  return d;
}

std::vector<int64_t> activation_order(const std::vector<float>& diag) {
  std::vector<int64_t> perm(diag.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return diag[a] > diag[b]; });
  return perm;
}

std::vector<float> permute_columns(const std::vector<float>& w, int64_t rows, int64_t cols,
                                   const std::vector<int64_t>& perm) {
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) out[r * cols + k] = w[r * cols + perm[k]];
  return out;
}

void fit_gptq_qparams(const float* observed, int64_t rows, int64_t cols, ActOrder act,
                      const std::vector<int64_t>& perm, const QuantArgs& args, DType compute,
                      float global_scale, GptqResult* result, std::vector<int32_t>* col_group) {
  col_group->assign(static_cast<size_t>(cols), 0);
  result->qparams = observe_weight(observed, rows, cols, args, compute, global_scale);
  if (act == ActOrder::Group) {
    result->g_idx.resize(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k) {
      (*col_group)[k] = static_cast<int32_t>(group_of_column(args, k));
      result->g_idx[perm[k]] = (*col_group)[k];
    }
  } else {
    for (int64_t k = 0; k < cols; ++k)
      (*col_group)[k] = static_cast<int32_t>(group_of_column(args, perm.empty() ? k : perm[k]));
  }
}

float mean_diagonal(const float* h, int64_t n, int64_t stride) {
  double diag_sum = 0.0;
  for (int64_t k = 0; k < n; ++k) diag_sum += h[k * stride];
  return static_cast<float>(diag_sum / static_cast<double>(n));
}

void warn_damping_retry(double frac) {
  log_warn("gptq: Hessian not positive definite with dampening_frac " + std::to_string(frac) +
           ", retrying with " + std::to_string(frac * 10.0));
}

void throw_factorization_failed(double last_frac, int retries) {
  throw Internal("gptq: Cholesky factorization failed even with dampening_frac " +
                 std::to_string(last_frac) + " after " + std::to_string(retries) +
                 " retries; the Hessian is far from positive definite (increase dampening_frac, "
                 "use more or more varied calibration samples)");
}

}  // namespace lowbit::quant
