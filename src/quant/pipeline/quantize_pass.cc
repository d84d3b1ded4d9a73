#include "quant/pipeline/quantize_pass.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <memory>

#include "core/log.h"
#include "lowbit/error.h"
#include "quant/algos/observers.h"
#include "quant/pipeline/calibration_backend.h"

namespace lowbit::quant {

namespace {

const QuantScheme& scheme_of(const QuantizeContext& ctx, const PlannedLinear& p) {
  return ctx.step->groups[static_cast<size_t>(p.group)].second;
}

// Per-head absmax of post-RoPE keys or values [tokens, heads * head_dim].
void track_heads(std::vector<float>& absmax, const float* x, int64_t tokens, int64_t heads,
                 int64_t head_dim) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* row = x + (t * heads + h) * head_dim;
      float m = absmax[static_cast<size_t>(h)];
      for (int64_t d = 0; d < head_dim; ++d) m = std::max(m, std::fabs(row[d]));
      absmax[static_cast<size_t>(h)] = m;
    }
  }
}

std::vector<float> kv_scale(const std::vector<float>& absmax, const QuantArgs& args, DType compute) {
  std::vector<float> mins, maxs;
  if (args.strategy == Strategy::AttnHead) {
    for (float a : absmax) {
      mins.push_back(-a);
      maxs.push_back(a);
    }
  } else {
    const float a = *std::max_element(absmax.begin(), absmax.end());
    mins.push_back(-a);
    maxs.push_back(a);
  }
  const QParams qp = qparams_from_minmax(mins, maxs, static_cast<int64_t>(mins.size()), 1, args,
                                         compute);
  return qp.scale;
}

// Where a Linear gets its Hessian: q/k/v share one input, gate/up another.
LinearRole hessian_source(LinearRole role) {
  if (role == LinearRole::K || role == LinearRole::V) return LinearRole::Q;
  if (role == LinearRole::Up) return LinearRole::Gate;
  return role;
}

// NVFP4: vLLM needs one global scale for the projections it fuses (q/k/v, gate/up), so
// llm-compressor takes it from the absmax over all of them.
float fused_global_scale(const QuantizeContext& ctx, const PlannedLinear& p) {
  const QuantArgs& args = *scheme_of(ctx, p).weights;
  if (args.strategy != Strategy::TensorGroup) return 0.0f;
  const bool attn = p.role == LinearRole::Q || p.role == LinearRole::K || p.role == LinearRole::V;
  const bool mlp = p.role == LinearRole::Gate || p.role == LinearRole::Up;
  float absmax = 0.0f;
  for (const PlannedLinear& other : ctx.plan->linears) {
    const bool same_set =
        other.layer == p.layer &&
        (&other == &p ||
         (attn && (other.role == LinearRole::Q || other.role == LinearRole::K ||
                   other.role == LinearRole::V)) ||
         (mlp && (other.role == LinearRole::Gate || other.role == LinearRole::Up)));
    if (!same_set || other.group < 0) continue;
    for (float v : weight_to_f32(*other.linear)) absmax = std::max(absmax, std::fabs(v));
  }
  return nvfp4_global_scale(absmax, ctx.compute);
}

// Global scales of every module of `layer`, taken before any of them is quantized.
std::map<int, float> global_scales(const QuantizeContext& ctx, int layer) {
  std::map<int, float> out;
  for (size_t i = 0; i < ctx.plan->linears.size(); ++i) {
    const PlannedLinear& p = ctx.plan->linears[i];
    if (p.layer == layer && p.group >= 0) out[static_cast<int>(i)] = fused_global_scale(ctx, p);
  }
  return out;
}

// GPTQ of one Linear in place (its weight replaced by the fake-quantized one, rounded to the
// compute dtype) given its Hessian's source input: on the CPU accumulators or the backend.
using GptqFn = std::function<GptqResult(models::Linear& linear, LinearRole source,
                                        const QuantArgs& args, const GptqOptions& options)>;

// gptq null: round-to-nearest.
void quantize_weight(const QuantizeContext& ctx, int index, const GptqFn* gptq, float global_scale,
                     QuantizedModule& out) {
  PlannedLinear& p = ctx.plan->linears[static_cast<size_t>(index)];
  const QuantArgs& args = *scheme_of(ctx, p).weights;
  const auto start = std::chrono::steady_clock::now();
  if (gptq != nullptr) {
    GptqOptions options = ctx.step->gptq_options;
    options.global_scale = global_scale;
    GptqResult r = (*gptq)(*p.linear, hessian_source(p.role), args, options);
    out.qparams = std::move(r.qparams);
    out.g_idx = std::move(r.g_idx);
    out.loss = r.loss;
    out.damping_retries = r.retries;
    if (r.retries > 0) {
      log_warn(p.name + ": Hessian not positive definite; GPTQ succeeded with dampening_frac " +
               std::to_string(r.dampening_used) + " after " + std::to_string(r.retries) +
               " retries");
    }
  } else {
    std::vector<float> w = weight_to_f32(*p.linear);
    const int64_t rows = p.linear->out_features();
    const int64_t cols = p.linear->in_features();
    out.original = p.linear->weight;
    out.qparams = observe_weight(w.data(), rows, cols, args, ctx.compute, global_scale);
    fake_quantize(w.data(), rows, cols, out.qparams, args, ctx.compute);
    set_weight(*p.linear, w, ctx.compute);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Quantizes every targeted module of `layer` (GPTQ through `gptq`, or round-to-nearest when it
// is null) and logs each. Input quantization goes on the Linears only once every layer is done
// (enable_input_quantization), as llm-compressor keeps quantization disabled while it calibrates.
void quantize_modules(const QuantizeContext& ctx, int layer, const GptqFn* gptq,
                      const std::map<int, InputRangeObserver>& ranges, QuantizeOutcome& outcome) {
  const std::vector<int> indices = ctx.plan->of_layer(layer);
  const models::ModelConfig& config = ctx.model->config();
  const std::map<int, float> scales = global_scales(ctx, layer);
  int done = 0;
  for (int index : indices) {
    const PlannedLinear& p = ctx.plan->linears[static_cast<size_t>(index)];
    if (p.group < 0) continue;
    QuantizedModule m;
    quantize_weight(ctx, index, gptq, scales.at(index), m);
    if (ranges.count(index) != 0) {
      const InputRangeObserver& r = ranges.at(index);
      const QuantArgs& in = *scheme_of(ctx, p).input_activations;
      // tensor_group: generate_gparam over the observed range, as for NVFP4 weights.
      if (in.strategy == Strategy::TensorGroup) {
        m.input_global_scale =
            nvfp4_global_scale(std::max(std::fabs(r.min()), std::fabs(r.max())), ctx.compute);
      } else {
        const QParams q = qparams_from_minmax({r.min()}, {r.max()}, 1, 1, in, ctx.compute);
        m.input_scale = q.scale[0];
        if (!q.zero_point.empty()) m.input_zero_point = q.zero_point[0];
      }
    }
    ++done;
    char line[96];
    std::snprintf(line, sizeof line, "[layer %d/%lld, module %d/%zu] ", layer + 1,
                  static_cast<long long>(config.num_layers), done, indices.size());
    log_info(line + p.name + ": " +
             (ctx.step->gptq ? "GPTQ error " + std::to_string(m.loss) : std::string("RTN")) + ", " +
             std::to_string(m.seconds) + " s");
    outcome.algorithm_seconds += m.seconds;
    outcome.modules[index] = std::move(m);
  }
}

}  // namespace

bool needs_calibration(const QuantizeStep& step) {
  if (step.gptq || step.kv_cache_scheme) return true;
  for (const auto& [name, scheme] : step.groups) {
    if (calibrated_inputs(scheme)) return true;
  }
  return false;
}

void enable_input_quantization(const QuantizeContext& ctx, int index, const QuantizedModule& m) {
  PlannedLinear& p = ctx.plan->linears[static_cast<size_t>(index)];
  const QuantScheme& s = scheme_of(ctx, p);
  if (!s.input_activations) return;
  p.linear->input_quant = InputQuant{.args = *s.input_activations,
                                     .static_scale = m.input_scale,
                                     .static_zero = m.input_zero_point,
                                     .global_scale = m.input_global_scale};
}

void quantize_layer(const QuantizeContext& ctx, int layer, models::LayerRunner& runner,
                    ActivationCache& cache, QuantizeOutcome& outcome) {
  const std::vector<int> indices = ctx.plan->of_layer(layer);
  models::LayerWeights& weights = ctx.model->mutable_weights().layers[static_cast<size_t>(layer)];
  const models::ModelConfig& config = ctx.model->config();

  // Hooks: one Hessian per distinct input (q/k/v and gate/up share theirs), static ranges.
  std::map<LinearRole, std::unique_ptr<HessianAccumulator>> hessians;
  std::map<int, InputRangeObserver> ranges;
  std::vector<std::unique_ptr<CallbackObserver>> observers;
  ScopedObservers scoped;
  for (int index : indices) {
    const PlannedLinear& p = ctx.plan->linears[static_cast<size_t>(index)];
    if (p.group < 0) continue;
    const bool needs_h = ctx.step->gptq && hessian_source(p.role) == p.role;
    const bool needs_range = calibrated_inputs(scheme_of(ctx, p));
    if (!needs_h && !needs_range) continue;
    HessianAccumulator* h = nullptr;
    if (needs_h) {
      hessians[p.role] = std::make_unique<HessianAccumulator>(p.linear->in_features());
      h = hessians[p.role].get();
    }
    InputRangeObserver* range = nullptr;
    if (needs_range) {
      range = &ranges.try_emplace(index, *scheme_of(ctx, p).input_activations, ctx.compute, p.name)
                   .first->second;
    }
    double* hessian_seconds = &outcome.hessian_seconds;
    observers.push_back(std::make_unique<CallbackObserver>(
        [h, range, hessian_seconds](const float* x, int64_t rows, int64_t cols) {
          if (h != nullptr) {
            const auto t0 = std::chrono::steady_clock::now();
            h->add(x, rows, 1);  // one sequence per call (batch size 1)
            *hessian_seconds +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          }
          if (range != nullptr) range->observe(x, static_cast<size_t>(rows * cols));
        }));
    scoped.attach(*p.linear, observers.back().get());
  }
  // Inputs of ignored k/v (or up) still feed q's (gate's) Hessian: attach to the source Linear.
  if (ctx.step->gptq) {
    for (int index : indices) {
      const PlannedLinear& p = ctx.plan->linears[static_cast<size_t>(index)];
      const LinearRole source = hessian_source(p.role);
      if (p.group < 0 || hessians.count(source) != 0) continue;
      hessians[source] = std::make_unique<HessianAccumulator>(p.linear->in_features());
      HessianAccumulator* h = hessians[source].get();
      observers.push_back(std::make_unique<CallbackObserver>(
          [h](const float* x, int64_t rows, int64_t) { h->add(x, rows, 1); }));
      models::Linear& src = source == LinearRole::Q ? weights.attention.q : weights.mlp.gate;
      if (src.observer == nullptr) scoped.attach(src, observers.back().get());
    }
  }
  const std::optional<QuantArgs>& kv_args = ctx.step->kv_cache_scheme;
  std::vector<float> k_absmax(static_cast<size_t>(config.num_kv_heads), 0.0f);
  std::vector<float> v_absmax(static_cast<size_t>(config.num_kv_heads), 0.0f);
  std::function<void(const models::LayerRunner&, int64_t)> after_sample;
  if (kv_args) {
    after_sample = [&](const models::LayerRunner& r, int64_t n) {
      track_heads(k_absmax, r.keys(), n, config.num_kv_heads, config.head_dim);
      track_heads(v_absmax, r.values(), n, config.num_kv_heads, config.head_dim);
    };
  }
  auto t0 = std::chrono::steady_clock::now();
  if (needs_calibration(*ctx.step)) {
    run_layer_over_cache(runner, weights, cache, false, after_sample);
  }
  outcome.forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const GptqFn on_cpu = [&](models::Linear& linear, LinearRole source, const QuantArgs& args,
                           const GptqOptions& options) {
    std::vector<float> w = weight_to_f32(linear);
    GptqResult r = gptq_quantize(w, linear.out_features(), linear.in_features(),
                                 hessians.at(source)->hessian(), args, options, ctx.compute);
    set_weight(linear, w, ctx.compute);
    return r;
  };
  quantize_modules(ctx, layer, ctx.step->gptq ? &on_cpu : nullptr, ranges, outcome);
  if (kv_args) {
    outcome.kv[layer] = KvScales{kv_scale(k_absmax, *kv_args, ctx.compute),
                                 kv_scale(v_absmax, *kv_args, ctx.compute)};
  }
  scoped.detach_all();  // the hooks calibrate; propagation only feeds the next layer
  t0 = std::chrono::steady_clock::now();
  propagate_layer(ctx, layer, runner, cache, outcome);
  outcome.forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void propagate_layer(const QuantizeContext& ctx, int layer, models::LayerRunner& runner,
                     ActivationCache& cache, const QuantizeOutcome& outcome) {
  // Round-to-nearest weights propagate unquantized: llm-compressor's RTN leaves module.weight as it
  // is (the fake quantization runs in the forward, disabled while calibrating), while GPTQ writes
  // its quantized weight into it. The fake-quantized weights come back after the pass.
  std::vector<std::pair<models::Linear*, Tensor>> swapped;
  for (int index : ctx.plan->of_layer(layer)) {
    const auto it = outcome.modules.find(index);
    if (it == outcome.modules.end() || it->second.original.data() == nullptr) continue;
    models::Linear* linear = ctx.plan->linears[static_cast<size_t>(index)].linear;
    swapped.emplace_back(linear, linear->weight);
    linear->weight = it->second.original;
  }
  run_layer_over_cache(runner, ctx.model->weights().layers[static_cast<size_t>(layer)], cache, true);
  for (auto& [linear, quantized] : swapped) linear->weight = quantized;
}

void quantize_layer_on(const QuantizeContext& ctx, int layer, QuantizeOutcome& outcome) {
  CalibrationBackend& backend = *ctx.backend;
  LOWBIT_CHECK_AS(Internal, ctx.step->gptq && !ctx.step->kv_cache_scheme,
                  "quantize_layer_on: the backend runs GPTQ steps without KV-cache scales only");
  std::vector<LinearRole> inputs;  // the Hessians this layer's modules need, in model order
  for (int index : ctx.plan->of_layer(layer)) {
    const PlannedLinear& p = ctx.plan->linears[static_cast<size_t>(index)];
    LOWBIT_CHECK_AS(Internal, p.group < 0 || !calibrated_inputs(scheme_of(ctx, p)),
                    "quantize_layer_on: " + p.name + " has calibrated input activations");
    const LinearRole source = hessian_source(p.role);
    if (p.group >= 0 && std::find(inputs.begin(), inputs.end(), source) == inputs.end()) {
      inputs.push_back(source);
    }
  }
  if (!inputs.empty()) backend.calibrate(layer, inputs);  // else nothing of this layer is quantized
  const GptqFn on_backend = [&](models::Linear& linear, LinearRole source, const QuantArgs& args,
                                const GptqOptions& options) {
    return backend.gptq_linear(linear, source, args, options, ctx.compute);
  };
  quantize_modules(ctx, layer, &on_backend, {}, outcome);
  backend.propagate(layer);
}

void quantize_layer_rtn(const QuantizeContext& ctx, int layer, QuantizeOutcome& outcome) {
  const std::map<int, float> scales = global_scales(ctx, layer);
  for (size_t i = 0; i < ctx.plan->linears.size(); ++i) {
    const PlannedLinear& p = ctx.plan->linears[i];
    if (p.layer != layer || p.group < 0) continue;
    QuantizedModule m;
    quantize_weight(ctx, static_cast<int>(i), nullptr, scales.at(static_cast<int>(i)), m);
    outcome.algorithm_seconds += m.seconds;
    outcome.modules[static_cast<int>(i)] = std::move(m);
  }
}

}  // namespace lowbit::quant
