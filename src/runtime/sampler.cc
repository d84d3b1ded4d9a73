#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "lowbit/error.h"

namespace lowbit::runtime {

void SamplingParams::validate() const {
  auto fail = [](const std::string& field, const std::string& rule) {
    throw InvalidArgument("sampling parameter " + field + " " + rule);
  };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) fail("temperature", "must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p", "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    fail("repetition_penalty", "must be > 0");
  }
}

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) { params_.validate(); }

int32_t argmax(std::span<const float> values) {
  if (values.empty()) throw Internal("argmax of an empty vector");
  return static_cast<int32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> context,
                              float penalty) {
  if (penalty == 1.0f) return;
  std::vector<int32_t> seen(context.begin(), context.end());
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (int32_t id : seen) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    float& v = logits[static_cast<size_t>(id)];
    v = v > 0 ? v / penalty : v * penalty;
  }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> context) {
  apply_repetition_penalty(logits, context, params_.repetition_penalty);
  if (params_.greedy()) return argmax(logits);

  const size_t vocab = logits.size();
  for (float& v : logits) v /= params_.temperature;

  // Candidates sorted by logit, descending (stable, so ties keep the lower id first).
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  size_t keep = vocab;
  if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b]; };
  if (keep < vocab) {
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep),
                      order_.end(), by_logit);
  } else {
    std::stable_sort(order_.begin(), order_.end(), by_logit);
  }
  order_.resize(keep);

  // Softmax over the kept candidates (double, for the top-p prefix sums).
  double max_logit = logits[order_[0]];
  std::vector<double> probs(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[order_[i]]) - max_logit);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  // top-p: the smallest prefix whose mass reaches top_p (always at least one token).
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += probs[i];
      if (cumulative >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  // min-p: drop tokens whose probability is below min_p times the top probability.
  if (params_.min_p > 0.0f) {
    double threshold = params_.min_p * probs[0];
    size_t cut = 1;
    while (cut < keep && probs[cut] >= threshold) ++cut;
    keep = cut;
  }

  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += probs[i];
  double draw = std::uniform_real_distribution<double>(0.0, mass)(rng_);
  for (size_t i = 0; i < keep; ++i) {
    draw -= probs[i];
    if (draw < 0.0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace lowbit::runtime
