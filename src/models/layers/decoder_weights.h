// The weights of the generic pre-norm decoder every supported architecture maps onto. Family files
// only decide names and per-architecture flags (arch_registry.h); weight_loader.cc fills these
// structs, and the layers in this directory run them.
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/tensor.h"
#include "models/layers/linear.h"

namespace lowbit::models {

struct AttentionWeights {
  Linear q, k, v, o;
  std::vector<float> q_norm;  // [head_dim] fp32, empty unless the model has q/k norms
  std::vector<float> k_norm;
};

struct MlpWeights {
  Linear gate, up, down;
};

struct MoeWeights {
  Linear router;  // [num_experts, hidden], no bias
  std::vector<MlpWeights> experts;
};

struct LayerWeights {
  std::vector<float> input_norm;  // fp32, norm offset (Gemma's +1) already added
  std::vector<float> post_attention_norm;
  AttentionWeights attention;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // sparse layers (experts non-empty)
  int64_t sliding_window = 0;
  bool is_moe() const { return !moe.experts.empty(); }
};

struct DecoderWeights {
  Tensor embed;  // [vocab, hidden], stored dtype
  float embed_scale = 1.0f;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  Linear lm_head;  // the embedding matrix itself when tied
};

}  // namespace lowbit::models
