#include "models/layers/attention.h"

#include <cmath>

#include "kernels/ops.h"

namespace lowbit::models {

float attention_scale(int64_t head_dim) {
  return static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5));
}

void attention_forward(const AttentionWeights& w, const ModelConfig& config,
                       const AttentionStep& step, const float* x, float* k_cache, float* v_cache,
                       AttentionScratch& scratch, float* out) {
  const int heads = static_cast<int>(config.num_heads);
  const int kv_heads = static_cast<int>(config.num_kv_heads);
  const int head_dim = static_cast<int>(config.head_dim);
  const int64_t m = step.rows;
  const int64_t q_width = int64_t{heads} * head_dim;
  const int64_t kv_width = int64_t{kv_heads} * head_dim;
  scratch.q.resize(static_cast<size_t>(m * q_width));
  scratch.context.resize(static_cast<size_t>(m * q_width));
  float* q = scratch.q.data();
  // The cache rows of this step are contiguous [m, kv_width]: project straight into them.
  float* k_rows = k_cache + step.first * kv_width;
  float* v_rows = v_cache + step.first * kv_width;
  w.q.apply(x, m, q);
  w.k.apply(x, m, k_rows);
  w.v.apply(x, m, v_rows);
  if (!w.q_norm.empty()) {
    const float eps = static_cast<float>(config.rms_norm_eps);
    kernels::rmsnorm(q, w.q_norm.data(), eps, m * heads, head_dim, q);
    kernels::rmsnorm(k_rows, w.k_norm.data(), eps, m * kv_heads, head_dim, k_rows);
  }
  const int rotary = static_cast<int>(step.rotary_dim);
  kernels::rope_apply(q, m, q_width, heads, head_dim, rotary, step.cos, step.sin);
  kernels::rope_apply(k_rows, m, kv_width, kv_heads, head_dim, rotary, step.cos, step.sin);
  // What an fp8 cache stores is what attention reads back, this step's rows included.
  if (step.kv_quant != nullptr) step.kv_quant->quantize(step.layer, k_rows, v_rows, m);

  kernels::AttentionShape shape;
  shape.queries = m;
  shape.past = step.first;
  shape.heads = heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = head_dim;
  shape.window = step.window;
  shape.scale = attention_scale(head_dim);
  kernels::attention(q, k_cache, v_cache, shape, scratch.context.data());
  w.o.apply(scratch.context.data(), m, out);
}

}  // namespace lowbit::models
