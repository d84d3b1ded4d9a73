// The sparse MoE block against a double-precision definition (docs MODELS.md §2.6): softmax over
// all experts, top-k, weights renormalised only with norm_topk_prob (Qwen3-MoE's default is
// false, a case no transformers fixture covers), SwiGLU experts, weighted sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "models/layers/mlp.h"

namespace lowbit::models {
namespace {

constexpr int64_t kExperts = 4, kHidden = 6, kInter = 5, kTokens = 5;

struct Owned {
  std::vector<std::vector<float>> buffers;
  Tensor matrix(int64_t rows, int64_t cols, std::mt19937& gen) {
    std::normal_distribution<float> dist(0.0f, 0.7f);
    buffers.emplace_back(static_cast<size_t>(rows * cols));
    for (float& v : buffers.back()) v = dist(gen);
    return Tensor::view(DType::F32, {rows, cols}, buffers.back().data(), nullptr);
  }
};

double silu(double z) { return z / (1 + std::exp(-z)); }

// y = W x for W [rows, cols] stored as a view.
std::vector<double> matvec(const Tensor& w, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(w.dim(0)), 0.0);
  const float* data = w.data_as<const float>();
  for (int64_t r = 0; r < w.dim(0); ++r) {
    for (int64_t c = 0; c < w.dim(1); ++c) y[r] += double(data[r * w.dim(1) + c]) * x[c];
  }
  return y;
}

std::vector<double> reference(const MoeWeights& w, const std::vector<double>& x, int top_k,
                              bool renormalize) {
  std::vector<double> logits = matvec(w.router.weight, x);
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t e = 0; e < p.size(); ++e) sum += (p[e] = std::exp(logits[e] - max_logit));
  for (double& v : p) v /= sum;
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  double chosen_sum = 0;
  for (int j = 0; j < top_k; ++j) chosen_sum += p[order[j]];
  std::vector<double> out(x.size(), 0.0);
  for (int j = 0; j < top_k; ++j) {
    const MlpWeights& expert = w.experts[order[j]];
    const std::vector<double> g = matvec(expert.gate.weight, x), u = matvec(expert.up.weight, x);
    std::vector<double> h(g.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = silu(g[i]) * u[i];
    const std::vector<double> y = matvec(expert.down.weight, h);
    const double weight = renormalize ? p[order[j]] / chosen_sum : p[order[j]];
    for (size_t i = 0; i < out.size(); ++i) out[i] += weight * y[i];
  }
  return out;
}

class MoeTest : public ::testing::TestWithParam<bool> {};

TEST_P(MoeTest, MatchesDefinition) {
  const bool renormalize = GetParam();
  std::mt19937 gen(11);
  Owned owned;
  MoeWeights w;
  w.router.weight = owned.matrix(kExperts, kHidden, gen);
  for (int64_t e = 0; e < kExperts; ++e) {
    MlpWeights m;
    m.gate.weight = owned.matrix(kInter, kHidden, gen);
    m.up.weight = owned.matrix(kInter, kHidden, gen);
    m.down.weight = owned.matrix(kHidden, kInter, gen);
    w.experts.push_back(m);
  }
  ModelConfig config;
  config.hidden_size = kHidden;
  config.num_experts = kExperts;
  config.num_experts_per_tok = 2;
  config.norm_topk_prob = renormalize;
  config.activation = kernels::Activation::SILU;

  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(kTokens * kHidden);
  for (float& v : x) v = dist(gen);
  std::vector<float> out(x.size(), -1.0f);
  MoeScratch scratch;
  moe_forward(w, config, x.data(), kTokens, scratch, out.data());
  for (int64_t t = 0; t < kTokens; ++t) {
    const std::vector<double> xt(x.begin() + t * kHidden, x.begin() + (t + 1) * kHidden);
    const std::vector<double> expected = reference(w, xt, 2, renormalize);
    for (int64_t i = 0; i < kHidden; ++i) {
      EXPECT_NEAR(out[t * kHidden + i], expected[i], 1e-5) << "token " << t << " dim " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(NormTopkProb, MoeTest, ::testing::Bool());

}  // namespace
}  // namespace lowbit::models
