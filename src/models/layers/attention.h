// Self-attention of one decoder layer: q/k/v projections, optional per-head q/k RMSNorm (Qwen3),
// RoPE, causal (optionally sliding-window) attention against the KV cache, output projection.
#pragma once

#include <cstdint>
#include <vector>

#include "models/layers/decoder_weights.h"
#include "models/kv_cache_quant.h"
#include "models/model_config.h"

namespace lowbit::models {

struct AttentionScratch {
  std::vector<float> q;        // [m, heads * head_dim]
  std::vector<float> context;  // [m, heads * head_dim]
};

struct AttentionStep {
  int64_t first = 0;   // position of the first of the m rows (tokens already cached before it)
  int64_t rows = 0;    // m
  int64_t window = 0;  // sliding window of this layer, 0: none
  int64_t rotary_dim = 0;
  const float* cos = nullptr;  // [m, rotary_dim / 2]
  const float* sin = nullptr;
  int64_t layer = 0;                           // index, for the KV-cache quantizer
  const KvCacheQuantizer* kv_quant = nullptr;  // --kv-cache-dtype fp8; null: full precision
};

// The softmax scale of q·k: transformers' scaling = head_dim ** -0.5 (a Python float), applied in
// fp32. Shared with the batched forward (batch_decoder.cc), which must match bit for bit.
float attention_scale(int64_t head_dim);

// x: the normed input [m, hidden]. Writes this step's keys and values into cache rows
// first..first+m-1 of `k_cache` / `v_cache` ([capacity, kv_heads * head_dim]) and the layer output
// [m, hidden] into `out`.
void attention_forward(const AttentionWeights& w, const ModelConfig& config,
                       const AttentionStep& step, const float* x, float* k_cache, float* v_cache,
                       AttentionScratch& scratch, float* out);

}  // namespace lowbit::models
