#include "models/layers/mlp.h"

#include <algorithm>

namespace lowbit::models {

void mlp_forward(const MlpWeights& w, kernels::Activation act, const float* x, int64_t m,
                 MlpScratch& scratch, float* out) {
  const int64_t inter = w.gate.out_features();
  scratch.gate.resize(static_cast<size_t>(m * inter));
  scratch.up.resize(static_cast<size_t>(m * inter));
  w.gate.apply(x, m, scratch.gate.data());
  w.up.apply(x, m, scratch.up.data());
  kernels::gated_activation(scratch.gate.data(), inter, scratch.up.data(), inter, m, inter, act,
                            scratch.gate.data());
  w.down.apply(scratch.gate.data(), m, out);
}

namespace {

// Router: softmax over all experts in fp32, then the top_k largest probabilities (first index
// wins a tie), renormalised to sum 1 when `renormalize`.
void route(const ModelConfig& config, int64_t m, int64_t experts, MoeScratch& s) {
  const int64_t top_k = config.num_experts_per_tok;
  s.chosen.resize(static_cast<size_t>(m * top_k));
  s.chosen_weight.resize(static_cast<size_t>(m * top_k));
  for (int64_t t = 0; t < m; ++t) {
    float* p = s.probabilities.data() + t * experts;
    kernels::softmax_inplace(p, experts);
    int32_t* chosen = s.chosen.data() + t * top_k;
    float* weight = s.chosen_weight.data() + t * top_k;
    float sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      int32_t best = -1;
      for (int32_t e = 0; e < experts; ++e) {
        if (std::find(chosen, chosen + j, e) != chosen + j) continue;
        if (best < 0 || p[e] > p[best]) best = e;
      }
      chosen[j] = best;
      weight[j] = p[best];
      sum += p[best];
    }
    if (config.norm_topk_prob) {
      for (int64_t j = 0; j < top_k; ++j) weight[j] /= sum;
    }
  }
}

// Groups (token, weight) pairs by expert, experts ascending and tokens ascending within one, the
// order transformers' expert loop accumulates in.
void group_by_expert(int64_t m, int64_t top_k, int64_t experts, MoeScratch& s) {
  s.offsets.assign(static_cast<size_t>(experts + 1), 0);
  for (int32_t e : s.chosen) ++s.offsets[static_cast<size_t>(e) + 1];
  for (int64_t e = 0; e < experts; ++e) s.offsets[e + 1] += s.offsets[e];
  s.rows_of.resize(static_cast<size_t>(m * top_k));
  s.weight_of.resize(static_cast<size_t>(m * top_k));
  s.cursor.assign(s.offsets.begin(), s.offsets.end() - 1);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = s.chosen[static_cast<size_t>(t * top_k + j)];
      const int64_t slot = s.cursor[static_cast<size_t>(e)]++;
      s.rows_of[static_cast<size_t>(slot)] = static_cast<int32_t>(t);
      s.weight_of[static_cast<size_t>(slot)] = s.chosen_weight[static_cast<size_t>(t * top_k + j)];
    }
  }
}

}  // namespace

void moe_forward(const MoeWeights& w, const ModelConfig& config, const float* x, int64_t m,
                 MoeScratch& s, float* out) {
  const int64_t experts = static_cast<int64_t>(w.experts.size());
  const int64_t hidden = config.hidden_size;
  s.probabilities.resize(static_cast<size_t>(m * experts));
  w.router.apply(x, m, s.probabilities.data());
  route(config, m, experts, s);
  group_by_expert(m, config.num_experts_per_tok, experts, s);
  std::fill(out, out + m * hidden, 0.0f);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t begin = s.offsets[static_cast<size_t>(e)];
    const int64_t count = s.offsets[static_cast<size_t>(e) + 1] - begin;
    if (count == 0) continue;
    s.expert_in.resize(static_cast<size_t>(count * hidden));
    s.expert_out.resize(static_cast<size_t>(count * hidden));
    for (int64_t r = 0; r < count; ++r) {
      const float* src = x + int64_t{s.rows_of[static_cast<size_t>(begin + r)]} * hidden;
      std::copy(src, src + hidden, s.expert_in.data() + r * hidden);
    }
    mlp_forward(w.experts[static_cast<size_t>(e)], config.activation, s.expert_in.data(), count,
                s.mlp, s.expert_out.data());
    for (int64_t r = 0; r < count; ++r) {
      const float weight = s.weight_of[static_cast<size_t>(begin + r)];
      float* dst = out + int64_t{s.rows_of[static_cast<size_t>(begin + r)]} * hidden;
      const float* y = s.expert_out.data() + r * hidden;
      for (int64_t d = 0; d < hidden; ++d) dst[d] += y[d] * weight;
    }
  }
}

}  // namespace lowbit::models
