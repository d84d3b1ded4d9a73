// SmoothQuantModifier (modifiers/transform/smoothquant/base.py) and AWQModifier
// (modifiers/transform/awq/base.py) of llm-compressor 0.14.0.1: statistics, scale formulas and the
// grid, with the dtypes torch's type promotion gives each op.
#include "quant/algos/smoothing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lowbit/error.h"
#include "quant/algos/torch_math.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {

using detail::rd;

namespace {

void check_balance(const std::vector<BalanceWeight>& ws, size_t channels, const char* what) {
  LOWBIT_CHECK(!ws.empty(), std::string(what) + ": no balance layers");
  for (size_t k = 0; k < ws.size(); ++k)
    LOWBIT_CHECK(ws[k].w != nullptr && ws[k].rows > 0 &&
                     ws[k].cols == static_cast<int64_t>(channels),
                 std::string(what) + ": balance layer " + std::to_string(k) + " has " +
                     std::to_string(ws[k].cols) + " input channels, the statistics have " +
                     std::to_string(channels));
}

}  // namespace

// ------------------------------------------------------------------------------- SmoothQuant
ChannelRange::ChannelRange(int64_t channels)
    : min_(static_cast<size_t>(channels), std::numeric_limits<float>::infinity()),
      max_(static_cast<size_t>(channels), -std::numeric_limits<float>::infinity()) {
  LOWBIT_CHECK(channels > 0, "ChannelRange: channels must be positive");
}

void ChannelRange::add(const float* x, int64_t tokens) {
  const size_t c = min_.size();
  for (int64_t t = 0; t < tokens; ++t)
    for (size_t j = 0; j < c; ++j) {
      min_[j] = std::min(min_[j], x[t * c + j]);
      max_[j] = std::max(max_[j], x[t * c + j]);
    }
  tokens_ += tokens;
}

std::vector<float> smoothquant_scales(const ChannelRange& act, const std::vector<BalanceWeight>& ws,
                                      double alpha, bool log_equalization, DType compute) {
  LOWBIT_CHECK(!act.empty(), "smoothquant: no activations were observed for this mapping");
  const size_t c = act.min().size();
  std::vector<float> s(c);
  for (size_t j = 0; j < c; ++j) s[j] = rd(act.max()[j] - act.min()[j], compute);
  if (log_equalization) {
    for (size_t j = 0; j < c; ++j)
      s[j] = rd(s[j] / rd(std::log2(rd(2.0f + s[j], compute)), compute), compute);
  } else {
    check_balance(ws, c, "smoothquant");
    std::vector<float> wmax(c, 0.0f);
    for (const BalanceWeight& b : ws)
      for (int64_t r = 0; r < b.rows; ++r)
        for (size_t j = 0; j < c; ++j) wmax[j] = std::max(wmax[j], std::fabs(b.w[r * b.cols + j]));
    for (size_t j = 0; j < c; ++j) {
      const float wr = rd(2.0f * wmax[j], compute);
      const float num = detail::torch_pow(s[j], alpha, compute);
      const float den = detail::torch_pow(wr, 1.0 - alpha, compute);
      if (wr > 0.0f) s[j] = rd(num / den, compute);  // else: the activation range itself
    }
  }
  // torch.maximum(scales, fp32 tensor [1e-5]) promotes to fp32 (NaN propagates).
  for (float& v : s) v = std::isnan(v) ? v : std::max(v, 1e-5f);
  return s;
}

// --------------------------------------------------------------------------------------- AWQ
ChannelAbsMean::ChannelAbsMean(int64_t channels) : sum_(static_cast<size_t>(channels), 0.0) {
  LOWBIT_CHECK(channels > 0, "ChannelAbsMean: channels must be positive");
}

void ChannelAbsMean::add(const float* x, int64_t tokens) {
  const size_t c = sum_.size();
  for (int64_t t = 0; t < tokens; ++t)
    for (size_t j = 0; j < c; ++j) sum_[j] += std::fabs(x[t * c + j]);
  tokens_ += tokens;
}

std::vector<float> ChannelAbsMean::mean() const {
  LOWBIT_CHECK(tokens_ > 0, "awq: no activations were observed for this mapping");
  std::vector<float> m(sum_.size());
  for (size_t j = 0; j < m.size(); ++j)
    m[j] = static_cast<float>(sum_[j] / static_cast<double>(tokens_));
  return m;
}

std::vector<AwqCandidate> awq_grid(const AwqOptions& o) {
  std::vector<AwqCandidate> g;
  const int n = o.n_grid;
  switch (o.duo_scaling) {
    case AwqOptions::Duo::Both: {
      const int half = n / 2;
      LOWBIT_CHECK(half >= 2, "awq: n_grid must be at least 4 with duo_scaling both");
      for (int k = 0; k < half; ++k)
        for (bool duo : {false, true}) g.push_back({static_cast<double>(k) / (half - 1), duo});
      break;
    }
    case AwqOptions::Duo::Off:
      LOWBIT_CHECK(n >= 2, "awq: n_grid must be at least 2");
      for (int k = 0; k < n; ++k) g.push_back({static_cast<double>(k) / (n - 1), false});
      break;
    case AwqOptions::Duo::On:
      LOWBIT_CHECK(n >= 3, "awq: n_grid must be at least 3 with duo scaling");
      g.push_back({0.0, false});
      for (int k = 0; k < n - 1; ++k) g.push_back({static_cast<double>(k) / (n - 2), true});
      break;
  }
  return g;
}

namespace {

// scales / sqrt(max·min) with torch's NaN propagation in max/min, then inf/NaN → 1.
template <typename T>
std::vector<double> normalize_scales(std::vector<T> s) {
  T mx = s[0], mn = s[0];
  for (T v : s) {
    if (std::isnan(v) || std::isnan(mx)) mx = std::numeric_limits<T>::quiet_NaN();
    else mx = std::max(mx, v);
    if (std::isnan(v) || std::isnan(mn)) mn = std::numeric_limits<T>::quiet_NaN();
    else mn = std::min(mn, v);
  }
  const T denom = std::sqrt(mx * mn);
  std::vector<double> out(s.size());
  for (size_t j = 0; j < s.size(); ++j) {
    const T v = s[j] / denom;
    out[j] = std::isfinite(v) ? static_cast<double>(v) : 1.0;
  }
  return out;
}

}  // namespace

std::vector<double> awq_candidate_scales(const std::vector<float>& x_mean,
                                         const std::vector<double>& w_mean,
                                         const AwqCandidate& cand) {
  LOWBIT_CHECK(!x_mean.empty(), "awq: empty activation statistics");
  const size_t c = x_mean.size();
  if (!cand.duo) {
    std::vector<float> s(c);
    for (size_t j = 0; j < c; ++j) {
      const float v = detail::torch_pow(x_mean[j], cand.ratio, DType::F32);
      s[j] = std::isnan(v) ? v : std::max(v, 1e-4f);
    }
    return normalize_scales(std::move(s));
  }
  LOWBIT_CHECK(w_mean.size() == c, "awq: weight mean has " + std::to_string(w_mean.size()) +
                                       " channels, activation mean " + std::to_string(c));
  std::vector<double> s(c);
  for (size_t j = 0; j < c; ++j) {
    const double num = detail::torch_pow(x_mean[j], cand.ratio, DType::F32);
    const double v = num / (detail::torch_pow_f64(w_mean[j], 1.0 - cand.ratio) + 1e-4);
    s[j] = std::isnan(v) ? v : std::max(v, 1e-4);
  }
  return normalize_scales(std::move(s));
}

std::vector<double> awq_weight_mean(const std::vector<BalanceWeight>& ws, const QuantArgs& args,
                                    DType compute) {
  LOWBIT_CHECK(!ws.empty(), "awq: no balance layers");
  const int64_t cols = ws[0].cols;
  check_balance(ws, static_cast<size_t>(cols), "awq");
  std::vector<double> sum(static_cast<size_t>(cols), 0.0);
  int64_t count = 0;
  for (const BalanceWeight& b : ws) {
    // The chunk (set of elements quantized together) of each element: id = chunk_of(r, c).
    int64_t bh = 1, bw = cols;
    switch (args.strategy) {
      case Strategy::Tensor: bh = b.rows, bw = cols; break;
      case Strategy::Channel: break;
      case Strategy::Group:
      case Strategy::TensorGroup:
        LOWBIT_CHECK(args.group_size > 0 && cols % args.group_size == 0,
                     "awq: group_size " + std::to_string(args.group_size) + " does not divide " +
                         std::to_string(cols) + " input channels");
        bw = args.group_size;
        break;
      case Strategy::Block:
        LOWBIT_CHECK(b.rows % args.block_rows == 0 && cols % args.block_cols == 0,
                     "awq: block_structure must divide the balance weight's shape");
        bh = args.block_rows, bw = args.block_cols;
        break;
      default:
        throw InvalidArgument("awq: strategy " + to_string(args.strategy) +
                              " cannot be applied to weights");
    }
    const int64_t gc = cols / bw;
    std::vector<float> amax(static_cast<size_t>((b.rows / bh) * gc), 0.0f);
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float& m = amax[static_cast<size_t>((r / bh) * gc + c / bw)];
        m = std::max(m, std::fabs(b.w[r * cols + c]));
      }
    for (float& m : amax) m = rd(m + 1e-6f, compute);
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float m = amax[static_cast<size_t>((r / bh) * gc + c / bw)];
        sum[c] += rd(std::fabs(b.w[r * cols + c]) / m, compute);
      }
    count += b.rows;
  }
  for (double& v : sum) v /= static_cast<double>(count);
  return sum;
}

AwqResult awq_search(const std::vector<float>& x_mean, const std::vector<BalanceWeight>& ws,
                     const QuantArgs& weight_args, const AwqOptions& options,
                     const std::function<double(const std::vector<double>&)>& loss,
                     DType compute) {
  check_balance(ws, x_mean.size(), "awq");
  const bool duo = options.duo_scaling != AwqOptions::Duo::Off;
  LOWBIT_CHECK(!duo || weight_args.strategy != Strategy::Tensor,
               "awq: duo_scaling is only supported with per-channel quantization strategies "
               "(group or channel), not tensor; set duo_scaling off");
  const std::vector<double> w_mean =
      duo ? awq_weight_mean(ws, weight_args, compute) : std::vector<double>{};
  AwqResult res;
  double best = std::numeric_limits<double>::infinity();
  bool found = false;
  for (const AwqCandidate& cand : awq_grid(options)) {
    std::vector<double> s = awq_candidate_scales(x_mean, w_mean, cand);
    const double l = loss(s);
    res.losses.push_back(l);
    if (l < best) {
      best = l;
      found = true;
      res.scales = std::move(s);
      res.best_loss = l;
      res.best_ratio = cand.ratio;
      res.best_duo = cand.duo;
    }
  }
  if (!found)
    throw Internal("awq: no finite loss in the scale grid search: the parent module produces NaN "
                   "or Inf for every candidate");
  return res;
}

namespace {

std::vector<float> scale_weight(const BalanceWeight& w, const std::vector<double>& scales,
                                DType compute) {
  LOWBIT_CHECK(scales.size() == static_cast<size_t>(w.cols),
               "awq: " + std::to_string(scales.size()) + " scales for a weight with " +
                   std::to_string(w.cols) + " input channels");
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  // W (model dtype) * s (f64 or fp32) is computed wide, then stored into the bf16 weight via fp32.
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c)
      out[r * w.cols + c] =
          rd(static_cast<float>(static_cast<double>(w.w[r * w.cols + c]) * scales[c]), compute);
  return out;
}

}  // namespace

std::vector<float> quantize_scaled(const BalanceWeight& w, const std::vector<double>& scales,
                                   const QuantArgs& args, DType compute, float global_scale) {
  std::vector<float> ws = scale_weight(w, scales, compute);
  const QParams qp = observe_weight_minmax(ws.data(), w.rows, w.cols, args, compute, global_scale);
  fake_quantize(ws.data(), w.rows, w.cols, qp, args, compute);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      float& v = ws[r * w.cols + c];
      v = rd(static_cast<float>(static_cast<double>(v) / scales[c]), compute);
    }
  return ws;
}

float awq_fused_global_scale(const std::vector<BalanceWeight>& ws,
                             const std::vector<double>& scales, DType compute) {
  float absmax = 0.0f;
  for (const BalanceWeight& b : ws) {
    const std::vector<float> s = scale_weight(b, scales, compute);
    for (float v : s) absmax = std::max(absmax, std::fabs(v));
  }
  return nvfp4_global_scale(absmax, compute);
}

}  // namespace lowbit::quant
