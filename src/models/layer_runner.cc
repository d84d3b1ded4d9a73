#include "models/layer_runner.h"

#include "kernels/ops.h"
#include "lowbit/error.h"

namespace lowbit::models {

void LayerRunner::embed(std::span<const int32_t> ids, float* x) const {
  const ModelConfig& c = model_.config();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= c.vocab_size) {
      throw InvalidArgument("calibration token id " + std::to_string(ids[i]) +
                            " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  const DecoderWeights& w = model_.weights();
  kernels::embedding_lookup(w.embed, ids.data(), static_cast<int64_t>(ids.size()), w.embed_scale, x);
}

void LayerRunner::prepare_positions(int64_t n) {
  if (n == positions_) return;
  // RoPE frequencies depend on the call's length for dynamic variants, as in Model::forward.
  const RopeFrequencies& freq = model_.rotary().frequencies(n, rope_scratch_);
  const size_t half = freq.inv_freq.size();
  cos_.resize(static_cast<size_t>(n) * half);
  sin_.resize(static_cast<size_t>(n) * half);
  RotaryEmbedding::cos_sin(freq, 0, n, cos_.data(), sin_.data());
  positions_ = n;
}

void LayerRunner::run_attention(const AttentionWeights& w, int64_t window, int64_t n,
                                const float* normed, float* out) {
  const ModelConfig& c = model_.config();
  prepare_positions(n);
  const size_t kv = static_cast<size_t>(n * c.num_kv_heads * c.head_dim);
  k_.resize(kv);
  v_.resize(kv);
  AttentionStep step;
  step.first = 0;
  step.rows = n;
  step.window = window;
  step.rotary_dim = 2 * static_cast<int64_t>(cos_.size() / static_cast<size_t>(n));
  step.cos = cos_.data();
  step.sin = sin_.data();
  attention_forward(w, c, step, normed, k_.data(), v_.data(), attention_, out);
}

void LayerRunner::run_layer(const LayerWeights& layer, int64_t n, float* x) {
  const ModelConfig& c = model_.config();
  const int64_t hidden = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  normed_.resize(static_cast<size_t>(n * hidden));
  branch_.resize(static_cast<size_t>(n * hidden));
  kernels::rmsnorm(x, layer.input_norm.data(), eps, n, hidden, normed_.data());
  run_attention(layer.attention, layer.sliding_window, n, normed_.data(), branch_.data());
  kernels::add_inplace(x, branch_.data(), n * hidden);
  kernels::rmsnorm(x, layer.post_attention_norm.data(), eps, n, hidden, normed_.data());
  if (layer.is_moe()) {
    moe_forward(layer.moe, c, normed_.data(), n, moe_, branch_.data());
  } else {
    mlp_forward(layer.mlp, c.activation, normed_.data(), n, mlp_, branch_.data());
  }
  kernels::add_inplace(x, branch_.data(), n * hidden);
}

void LayerRunner::logits(const float* x, int64_t n, float* out) {
  const ModelConfig& c = model_.config();
  const DecoderWeights& w = model_.weights();
  normed_.resize(static_cast<size_t>(n * c.hidden_size));
  kernels::rmsnorm(x, w.final_norm.data(), static_cast<float>(c.rms_norm_eps), n, c.hidden_size,
                   normed_.data());
  w.lm_head.apply(normed_.data(), n, out);
}

}  // namespace lowbit::models
