// fp32 re-statements of transformers' modeling_rope_utils.py. Python scalars combine with fp32
// tensors in fp32 (torch converts the scalar to the tensor's dtype), so each step below casts the
// scalar to float before the operation, and math done on Python floats stays in double.
#include "models/rope.h"

#include <algorithm>
#include <cmath>

namespace lowbit::models {

namespace {

constexpr double kPi = 3.14159265358979323846;

// base ** (arange(0, dim, 2) / dim), element-wise in fp32.
std::vector<float> base_powers(double base, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[static_cast<size_t>(i)] = std::pow(static_cast<float>(base), exponent);
  }
  return out;
}

std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> out = base_powers(base, dim);
  for (float& v : out) v = 1.0f / v;
  return out;
}

void apply_llama3(const RopeConfig& r, std::vector<float>& inv_freq) {
  const float factor = static_cast<float>(*r.factor);
  const float low = static_cast<float>(r.low_freq_factor);
  const float high = static_cast<float>(r.high_freq_factor);
  const double old_context = static_cast<double>(r.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(old_context / r.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context / r.high_freq_factor);
  for (float& inv : inv_freq) {
    const float wavelen = static_cast<float>(2 * kPi) / inv;
    if (wavelen > low_freq_wavelen) {
      inv = inv / factor;
    } else if (!(wavelen < high_freq_wavelen)) {
      const float smooth = (static_cast<float>(old_context) / wavelen - low) / (high - low);
      inv = (1.0f - smooth) * inv / factor + smooth * inv;
    }
  }
}

// YaRN's correction dimension for a number of rotations (Python float arithmetic).
double correction_dim(double rotations, int64_t dim, double base, double original_max) {
  return (static_cast<double>(dim) * std::log(original_max / (rotations * 2 * kPi))) /
         (2 * std::log(base));
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

RopeFrequencies yarn(const RopeConfig& r, int64_t dim, int64_t max_positions) {
  const double original = static_cast<double>(r.original_max_position_embeddings);
  const double factor = r.factor ? *r.factor : static_cast<double>(max_positions) / original;
  RopeFrequencies out;
  if (r.attention_factor) {
    out.attention_scaling = static_cast<float>(*r.attention_factor);
  } else if (r.mscale && r.mscale_all_dim && *r.mscale != 0.0 && *r.mscale_all_dim != 0.0) {
    out.attention_scaling =
        static_cast<float>(yarn_mscale(factor, *r.mscale) / yarn_mscale(factor, *r.mscale_all_dim));
  } else {
    out.attention_scaling = static_cast<float>(yarn_mscale(factor, 1.0));
  }
  double low = correction_dim(r.beta_fast, dim, r.theta, original);
  double high = correction_dim(r.beta_slow, dim, r.theta, original);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const std::vector<float> pos_freqs = base_powers(r.theta, dim);
  out.inv_freq.resize(pos_freqs.size());
  for (size_t i = 0; i < pos_freqs.size(); ++i) {
    const float extrapolation = 1.0f / pos_freqs[i];
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrapolation_weight = 1.0f - ramp;
    out.inv_freq[i] =
        interpolation * (1.0f - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  return out;
}

RopeFrequencies longrope(const RopeConfig& r, int64_t dim, int64_t max_positions, int64_t seq_len) {
  const double original = static_cast<double>(r.original_max_position_embeddings);
  const double factor = r.factor ? *r.factor : static_cast<double>(max_positions) / original;
  RopeFrequencies out;
  if (r.attention_factor) {
    out.attention_scaling = static_cast<float>(*r.attention_factor);
  } else {
    out.attention_scaling =
        factor <= 1.0 ? 1.0f
                      : static_cast<float>(std::sqrt(1.0 + std::log(factor) / std::log(original)));
  }
  const std::vector<double>& ext =
      seq_len > r.original_max_position_embeddings ? r.long_factor : r.short_factor;
  const std::vector<float> powers = base_powers(r.theta, dim);
  out.inv_freq.resize(powers.size());
  for (size_t i = 0; i < powers.size(); ++i) {
    out.inv_freq[i] = 1.0f / (static_cast<float>(ext[i]) * powers[i]);
  }
  return out;
}

RopeFrequencies dynamic(const RopeConfig& r, int64_t dim, int64_t max_positions, int64_t seq_len) {
  RopeFrequencies out;
  const int64_t length = std::max(seq_len, max_positions);
  // transformers computes this with seq_len as an int64 tensor: fp32 arithmetic.
  const float factor = static_cast<float>(*r.factor);
  const float ratio = factor * static_cast<float>(length) / static_cast<float>(max_positions) -
                      static_cast<float>(*r.factor - 1.0);
  const float exponent =
      static_cast<float>(static_cast<double>(dim) / static_cast<double>(dim - 2));
  const float base = static_cast<float>(r.theta) * std::pow(ratio, exponent);
  out.inv_freq.resize(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    out.inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  return out;
}

RopeFrequencies compute(const RopeConfig& r, int64_t dim, int64_t max_positions, int64_t seq_len) {
  switch (r.type) {
    case RopeType::DEFAULT:
      return {default_inv_freq(r.theta, dim), 1.0f};
    case RopeType::LINEAR: {
      RopeFrequencies out{default_inv_freq(r.theta, dim), 1.0f};
      for (float& v : out.inv_freq) v /= static_cast<float>(*r.factor);
      return out;
    }
    case RopeType::DYNAMIC:
      // At init (and while L <= M) the dynamic formula reduces to base · 1^x: the default.
      if (seq_len <= max_positions) return {default_inv_freq(r.theta, dim), 1.0f};
      return dynamic(r, dim, max_positions, seq_len);
    case RopeType::YARN:
      return yarn(r, dim, max_positions);
    case RopeType::LONGROPE:
      return longrope(r, dim, max_positions, seq_len);
    case RopeType::LLAMA3: {
      RopeFrequencies out{default_inv_freq(r.theta, dim), 1.0f};
      apply_llama3(r, out.inv_freq);
      return out;
    }
  }
  return {};
}

}  // namespace

RopeFrequencies compute_rope_frequencies(const ModelConfig& config, int64_t seq_len) {
  return compute(config.rope, config.rotary_dim(), config.max_position_embeddings, seq_len);
}

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config)
    : rope_(config.rope),
      rotary_dim_(config.rotary_dim()),
      max_position_embeddings_(config.max_position_embeddings) {
  initial_ = compute(rope_, rotary_dim_, max_position_embeddings_, 0);
  if (rope_.type == RopeType::LONGROPE) {
    long_ = compute(rope_, rotary_dim_, max_position_embeddings_,
                    rope_.original_max_position_embeddings + 1);
  }
}

const RopeFrequencies& RotaryEmbedding::frequencies(int64_t seq_len,
                                                    RopeFrequencies& scratch) const {
  if (rope_.type == RopeType::LONGROPE && seq_len > rope_.original_max_position_embeddings) {
    return long_;
  }
  if (rope_.type == RopeType::DYNAMIC && seq_len > max_position_embeddings_) {
    scratch = compute(rope_, rotary_dim_, max_position_embeddings_, seq_len);
    return scratch;
  }
  return initial_;
}

void RotaryEmbedding::cos_sin(const RopeFrequencies& freq, int64_t first, int64_t n, float* cos,
                              float* sin) {
  const int64_t half = static_cast<int64_t>(freq.inv_freq.size());
  for (int64_t t = 0; t < n; ++t) {
    const float position = static_cast<float>(first + t);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = freq.inv_freq[static_cast<size_t>(i)] * position;
      cos[t * half + i] = std::cos(angle) * freq.attention_scaling;
      sin[t * half + i] = std::sin(angle) * freq.attention_scaling;
    }
  }
}

}  // namespace lowbit::models
