// Rotary embedding frequencies for every RoPE variant transformers implements for our
// architectures (default, linear, dynamic NTK, yarn, longrope, llama3), computed in fp32 the way
// modeling_rope_utils.py does, so that angles match to the last bit or two.
//
// Variants that depend on the sequence length (dynamic, longrope) are evaluated per forward call
// from L = (largest position in the call) + 1, like transformers' dynamic_rope_update: dynamic uses
// the default frequencies while L <= max_position_embeddings and rescales the base beyond; longrope
// uses short_factor while L <= original_max_position_embeddings and long_factor beyond. Keys
// already in a KV cache keep the rotation they were given, as in transformers. (transformers also
// keeps the largest dynamic base seen across calls until L drops below max_position_embeddings;
// lowbit does not carry that state between calls: each call uses the base for its own L.)
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_config.h"

namespace lowbit::models {

struct RopeFrequencies {
  std::vector<float> inv_freq;     // rotary_dim / 2 values
  float attention_scaling = 1.0f;  // multiplies cos and sin
};

// inv_freq and attention scaling for a call covering positions [0, seq_len); seq_len 0 means
// "at initialisation" (no length: dynamic → default, longrope → short factors).
RopeFrequencies compute_rope_frequencies(const ModelConfig& config, int64_t seq_len);

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);

  // The frequencies for a call whose positions end at seq_len (exclusive). Returns a reference to
  // a table computed at construction, or to `scratch` filled for this length (dynamic only).
  const RopeFrequencies& frequencies(int64_t seq_len, RopeFrequencies& scratch) const;

  // cos/sin [n, rotary_dim/2] for positions first..first+n-1, times attention_scaling.
  static void cos_sin(const RopeFrequencies& freq, int64_t first, int64_t n, float* cos,
                      float* sin);

  int64_t rotary_dim() const { return rotary_dim_; }
  // Whether the frequencies depend on the call's length (dynamic NTK, longrope): keys cached by
  // one sequence then need not be those another sequence would compute for the same prefix.
  bool length_dependent() const {
    return rope_.type == RopeType::DYNAMIC || rope_.type == RopeType::LONGROPE;
  }

 private:
  RopeConfig rope_;
  int64_t rotary_dim_;
  int64_t max_position_embeddings_;
  RopeFrequencies initial_;  // default / static variants, longrope short
  RopeFrequencies long_;     // longrope long factors
};

}  // namespace lowbit::models
