// Gated MLPs: out = down(act(gate(x)) * up(x)) (SwiGLU, GeGLU), and the sparse mixture of experts
// built from them (softmax router over all experts, top-k, optional renormalisation).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "models/layers/decoder_weights.h"
#include "models/model_config.h"

namespace lowbit::models {

struct MlpScratch {
  std::vector<float> gate;
  std::vector<float> up;
};

// x: [m, hidden] → out: [m, hidden].
void mlp_forward(const MlpWeights& w, kernels::Activation act, const float* x, int64_t m,
                 MlpScratch& scratch, float* out);

struct MoeScratch {
  std::vector<float> probabilities;  // [m, experts]
  std::vector<int32_t> chosen;       // [m, top_k] expert ids
  std::vector<float> chosen_weight;  // [m, top_k]
  std::vector<int64_t> offsets;      // experts + 1: start of each expert's rows in `rows_of`
  std::vector<int64_t> cursor;       // experts: next free slot while grouping
  std::vector<int32_t> rows_of;      // tokens grouped by expert (ascending expert, then token)
  std::vector<float> weight_of;
  std::vector<float> expert_in;  // gathered rows of one expert
  std::vector<float> expert_out;
  MlpScratch mlp;
};

// Mixtral / Qwen3-MoE block. `config` gives top_k, norm_topk_prob and the activation.
void moe_forward(const MoeWeights& w, const ModelConfig& config, const float* x, int64_t m,
                 MoeScratch& scratch, float* out);

}  // namespace lowbit::models
