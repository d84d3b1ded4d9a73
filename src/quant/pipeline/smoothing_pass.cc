#include "quant/pipeline/smoothing_pass.h"

#include <cmath>

#include "core/log.h"
#include "lowbit/error.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {

namespace {

// balance W[:, j] *= s_j, rounded to the stored dtype.
void scale_columns(models::Linear& linear, const std::vector<double>& s, DType dtype) {
  std::vector<float> w = weight_to_f32(linear);
  const int64_t rows = linear.out_features();
  const int64_t cols = linear.in_features();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& v = w[static_cast<size_t>(r * cols + c)];
      v = static_cast<float>(static_cast<double>(v) * s[static_cast<size_t>(c)]);
    }
  }
  set_weight(linear, w, dtype);
}

// The smooth layer: norm weight /= s (a stored tensor, so rounded to its dtype).
void divide_norm(std::vector<float>& norm, const std::vector<double>& s, DType dtype) {
  for (size_t j = 0; j < norm.size(); ++j) {
    norm[j] = round_to_dtype(static_cast<float>(static_cast<double>(norm[j]) / s[j]), dtype);
  }
}

// The previous Linear as smooth layer: its output rows (and bias) /= s.
void divide_rows(models::Linear& linear, const std::vector<double>& s, DType dtype) {
  std::vector<float> w = weight_to_f32(linear);
  const int64_t cols = linear.in_features();
  for (int64_t r = 0; r < linear.out_features(); ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& v = w[static_cast<size_t>(r * cols + c)];
      v = static_cast<float>(static_cast<double>(v) / s[static_cast<size_t>(r)]);
    }
  }
  set_weight(linear, w, dtype);
  for (size_t r = 0; r < linear.bias.size(); ++r) {
    linear.bias[r] = round_to_dtype(static_cast<float>(static_cast<double>(linear.bias[r]) / s[r]), dtype);
  }
}

BalanceWeight view(const std::vector<float>& w, const models::Linear& l) {
  return BalanceWeight{w.data(), l.out_features(), l.in_features()};
}

}  // namespace

void check_smoothable(const models::Model& model) {
  if (model.spec().norm_weight_offset != 0.0f) {
    throw Unsupported(model.config().architecture +
                      ": SmoothQuant / AWQ need norms of the form x·w; this architecture uses "
                      "x·(1 + w)");
  }
}

void smoothquant_layer(const SmoothingContext& ctx, const SmoothQuantStep& step, int layer,
                       models::LayerRunner& runner, ActivationCache& cache) {
  models::LayerWeights& w = ctx.model->mutable_weights().layers[static_cast<size_t>(layer)];
  const int64_t hidden = ctx.model->config().hidden_size;
  ChannelRange attn_range(hidden), mlp_range(hidden);
  {
    CallbackObserver attn([&](const float* x, int64_t rows, int64_t) { attn_range.add(x, rows); });
    CallbackObserver mlp([&](const float* x, int64_t rows, int64_t) { mlp_range.add(x, rows); });
    ScopedObservers scoped;
    scoped.attach(w.attention.q, &attn);
    scoped.attach(w.mlp.gate, &mlp);
    run_layer_over_cache(runner, w, cache, false);
  }
  auto smooth = [&](const ChannelRange& range, std::vector<models::Linear*> balance,
                    std::vector<float>& norm) {
    std::vector<std::vector<float>> weights;
    std::vector<BalanceWeight> views;
    for (models::Linear* l : balance) weights.push_back(weight_to_f32(*l));
    for (size_t i = 0; i < balance.size(); ++i) views.push_back(view(weights[i], *balance[i]));
    const std::vector<float> f =
        smoothquant_scales(range, views, step.smoothing_strength, step.log_equalization, ctx.compute);
    const std::vector<double> s(f.begin(), f.end());
    for (models::Linear* l : balance) scale_columns(*l, s, ctx.compute);
    divide_norm(norm, s, ctx.compute);
  };
  smooth(attn_range, {&w.attention.q, &w.attention.k, &w.attention.v}, w.input_norm);
  smooth(mlp_range, {&w.mlp.gate, &w.mlp.up}, w.post_attention_norm);
  run_layer_over_cache(runner, w, cache, true);
}

namespace {

// Inputs of one Linear over all samples, concatenated [tokens, cols].
struct CapturedInputs {
  std::vector<float> x;
  std::vector<int64_t> lengths;
  int64_t cols = 0;
};

double mse(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += d * d;
  }
  return a.empty() ? 0.0 : sum / static_cast<double>(a.size());
}

// Runs the parent module of a mapping over all captured inputs into `out` ([tokens, out]; resized
// by the callee). The search calls it once per grid point with the same `out`, so its hundreds of
// megabytes are allocated (and page-faulted in) once per mapping, not per candidate.
using ParentForward =
    std::function<void(const std::vector<models::Linear*>&, std::vector<float>& out)>;

// One AWQ mapping: search the scales with the parent's output MSE, then fold them in.
void awq_mapping(const SmoothingContext& ctx, const AwqStep& step, const QuantArgs& args,
                 const CapturedInputs& in, std::vector<models::Linear*> balance,
                 const ParentForward& parent, const std::function<void(const std::vector<double>&)>& fold,
                 const std::string& name) {
  ChannelAbsMean mean(in.cols);
  mean.add(in.x.data(), static_cast<int64_t>(in.x.size()) / in.cols);
  std::vector<std::vector<float>> weights;
  std::vector<BalanceWeight> views;
  for (models::Linear* l : balance) weights.push_back(weight_to_f32(*l));
  for (size_t i = 0; i < balance.size(); ++i) views.push_back(view(weights[i], *balance[i]));
  std::vector<float> reference, candidate_out;
  parent(balance, reference);
  // Candidate weights live in copies of the balance Linears, so the model is untouched.
  std::vector<models::Linear> candidates;
  for (models::Linear* l : balance) candidates.push_back(*l);
  std::vector<models::Linear*> candidate_ptrs;
  for (models::Linear& c : candidates) candidate_ptrs.push_back(&c);
  auto loss = [&](const std::vector<double>& s) {
    for (size_t i = 0; i < balance.size(); ++i) {
      set_weight(candidates[i], quantize_scaled(views[i], s, args, ctx.compute), ctx.compute);
    }
    parent(candidate_ptrs, candidate_out);
    return mse(reference, candidate_out);
  };
  const AwqResult r = awq_search(mean.mean(), views, args, step.options, loss, ctx.compute);
  log_info(name + ": AWQ best ratio " + std::to_string(r.best_ratio) + ", loss " +
           std::to_string(r.best_loss));
  for (models::Linear* l : balance) scale_columns(*l, r.scales, ctx.compute);
  fold(r.scales);
}

// The parent of a mapping whose parent is the balanced Linear itself (v_proj → o_proj,
// up_proj → down_proj): that Linear over the captured inputs.
ParentForward linear_parent(const CapturedInputs& in) {
  return [&in](const std::vector<models::Linear*>& linear, std::vector<float>& out) {
    const int64_t tokens = static_cast<int64_t>(in.x.size()) / in.cols;
    out.resize(static_cast<size_t>(tokens * linear[0]->out_features()));
    linear[0]->apply(in.x.data(), tokens, out.data());
  };
}

}  // namespace

void awq_layer(const SmoothingContext& ctx, const AwqStep& step, const QuantArgs& args, int layer,
               models::LayerRunner& runner, ActivationCache& cache) {
  models::LayerWeights& w = ctx.model->mutable_weights().layers[static_cast<size_t>(layer)];
  const std::string prefix = "layer " + std::to_string(layer) + " ";
  CapturedInputs attn_in, o_in, mlp_in, down_in;
  {
    auto capture = [](CapturedInputs& c) {
      return std::make_unique<CallbackObserver>([&c](const float* x, int64_t rows, int64_t cols) {
        c.x.insert(c.x.end(), x, x + rows * cols);
        c.lengths.push_back(rows);
        c.cols = cols;
      });
    };
    auto a = capture(attn_in), o = capture(o_in), m = capture(mlp_in), d = capture(down_in);
    ScopedObservers scoped;
    scoped.attach(w.attention.q, a.get());
    scoped.attach(w.attention.o, o.get());
    scoped.attach(w.mlp.gate, m.get());
    scoped.attach(w.mlp.down, d.get());
    run_layer_over_cache(runner, w, cache, false);
  }
  const int64_t hidden = ctx.model->config().hidden_size;
  // input_layernorm → q, k, v; parent: the attention block, sample by sample.
  awq_mapping(
      ctx, step, args, attn_in, {&w.attention.q, &w.attention.k, &w.attention.v},
      [&](const std::vector<models::Linear*>& qkv, std::vector<float>& out) {
        models::AttentionWeights a = w.attention;
        a.q = *qkv[0];
        a.k = *qkv[1];
        a.v = *qkv[2];
        out.resize(attn_in.x.size());
        int64_t offset = 0;
        for (int64_t n : attn_in.lengths) {
          runner.run_attention(a, w.sliding_window, n, attn_in.x.data() + offset * hidden,
                               out.data() + offset * hidden);
          offset += n;
        }
      },
      [&](const std::vector<double>& s) { divide_norm(w.input_norm, s, ctx.compute); },
      prefix + "input_layernorm");
  // v_proj → o_proj only when v's outputs are exactly o's inputs (no GQA).
  if (w.attention.v.out_features() == w.attention.o.in_features()) {
    awq_mapping(
        ctx, step, args, o_in, {&w.attention.o}, linear_parent(o_in),
        [&](const std::vector<double>& s) { divide_rows(w.attention.v, s, ctx.compute); },
        prefix + "v_proj");
  }
  // post_attention_layernorm → gate, up; parent: the MLP.
  models::MlpScratch mlp_scratch;  // kept across the grid points, like the outputs
  awq_mapping(
      ctx, step, args, mlp_in, {&w.mlp.gate, &w.mlp.up},
      [&](const std::vector<models::Linear*>& gu, std::vector<float>& out) {
        models::MlpWeights m = w.mlp;
        m.gate = *gu[0];
        m.up = *gu[1];
        const int64_t tokens = static_cast<int64_t>(mlp_in.x.size()) / hidden;
        out.resize(static_cast<size_t>(tokens * hidden));
        models::mlp_forward(m, ctx.model->config().activation, mlp_in.x.data(), tokens, mlp_scratch,
                            out.data());
      },
      [&](const std::vector<double>& s) { divide_norm(w.post_attention_norm, s, ctx.compute); },
      prefix + "post_attention_layernorm");
  // up_proj → down_proj; parent: down_proj itself.
  awq_mapping(
      ctx, step, args, down_in, {&w.mlp.down}, linear_parent(down_in),
      [&](const std::vector<double>& s) { divide_rows(w.mlp.up, s, ctx.compute); },
      prefix + "up_proj");
  run_layer_over_cache(runner, w, cache, true);
}

}  // namespace lowbit::quant
