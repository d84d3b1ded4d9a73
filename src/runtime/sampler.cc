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
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    fail("presence_penalty", "must be in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    fail("frequency_penalty", "must be in [-2, 2]");
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

void apply_presence_frequency_penalties(std::span<float> logits, std::span<const int32_t> output,
                                        float presence_penalty, float frequency_penalty) {
  if (presence_penalty == 0.0f && frequency_penalty == 0.0f) return;
  std::vector<int32_t> ids;
  ids.reserve(output.size());
  for (int32_t id : output) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  // vLLM subtracts frequency * count and then presence * 1 as two float32 operations; doing the
  // same keeps the result bit-identical to its formula.
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    float& v = logits[static_cast<size_t>(ids[i])];
    v -= frequency_penalty * static_cast<float>(j - i);
    v -= presence_penalty;
    i = j;
  }
}

void log_softmax(std::span<const float> logits, std::span<float> out) {
  if (logits.empty()) throw Internal("log_softmax of an empty vector");
  if (out.size() != logits.size()) throw Internal("log_softmax: output size differs from input");
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  if (std::isinf(max_logit) && max_logit < 0) {
    // Every logit is -inf: no distribution; report -inf everywhere rather than NaN.
    std::fill(out.begin(), out.end(), -std::numeric_limits<float>::infinity());
    return;
  }
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  for (size_t i = 0; i < logits.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_sum);
  }
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logprobs, int k) {
  const size_t keep = k <= 0 ? 0 : std::min(logprobs.size(), static_cast<size_t>(k));
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    const float va = logprobs[static_cast<size_t>(a)];
    const float vb = logprobs[static_cast<size_t>(b)];
    return va > vb || (va == vb && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(), better);
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(keep);
  for (size_t i = 0; i < keep; ++i) out.emplace_back(ids[i], logprobs[static_cast<size_t>(ids[i])]);
  return out;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> context,
                        size_t output_begin) {
  if (output_begin > context.size()) {
    throw InvalidArgument("Sampler::sample: output_begin " + std::to_string(output_begin) +
                          " is past the context (" + std::to_string(context.size()) + " ids)");
  }
  apply_repetition_penalty(logits, context, params_.repetition_penalty);
  apply_presence_frequency_penalties(logits, context.subspan(output_begin),
                                     params_.presence_penalty, params_.frequency_penalty);
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
