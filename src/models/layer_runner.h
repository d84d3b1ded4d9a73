// Runs the decoder one layer at a time over whole sequences (positions 0..n-1, nothing cached
// between calls): what the layer-by-layer calibration pipeline needs. The math is the decoder's
// (decoder.cc): the same kernels, so a layer run here gives bit-identical hidden states.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/layers/attention.h"
#include "models/layers/mlp.h"
#include "models/model.h"

namespace lowbit::models {

class LayerRunner {
 public:
  explicit LayerRunner(const Model& model) : model_(model) {}

  // x: [n, hidden] = embedding(ids) · embed_scale.
  void embed(std::span<const int32_t> ids, float* x) const;

  // In place on x [n, hidden]: x += Attn(norm_in(x)); x += FFN(norm_post(x)).
  void run_layer(const LayerWeights& layer, int64_t n, float* x);

  // The attention block alone on the already-normed input: what AWQ re-runs for its loss.
  // Returns the attention output [n, hidden] in `out`.
  void run_attention(const AttentionWeights& w, int64_t window, int64_t n, const float* normed,
                     float* out);

  // Post-RoPE keys and values of the last run: [n, kv_heads * head_dim].
  const float* keys() const { return k_.data(); }
  const float* values() const { return v_.data(); }

  // The final norm and LM head on x [n, hidden]: logits [n, vocab].
  void logits(const float* x, int64_t n, float* out);

 private:
  void prepare_positions(int64_t n);

  const Model& model_;
  int64_t positions_ = -1;  // cos/sin computed for this many positions
  std::vector<float> cos_, sin_, normed_, branch_, k_, v_;
  RopeFrequencies rope_scratch_;
  AttentionScratch attention_;
  MlpScratch mlp_;
  MoeScratch moe_;
};

}  // namespace lowbit::models
