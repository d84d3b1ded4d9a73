// The generic pre-norm decoder forward pass shared by every architecture:
//   x = embed(ids) · embed_scale
//   per layer: x += Attn(RMSNorm_in(x)); x += FFN(RMSNorm_post(x))   (FFN: gated MLP or MoE)
//   logits = lm_head(RMSNorm_final(x))
// Long inputs run in chunks of kChunkTokens (exact, since each chunk attends to the cached keys of
// the previous ones) so that scratch memory stays bounded; RoPE frequencies are chosen once per
// call from its last position, as transformers does for the whole call.
#include <algorithm>
#include <string>

#include "kernels/ops.h"
#include "lowbit/error.h"
#include "models/layers/attention.h"
#include "models/layers/mlp.h"
#include "models/model.h"

namespace lowbit::models {

namespace {

constexpr int64_t kChunkTokens = 512;

// Scratch of one forward call. Kept per thread and only ever grown, so that decode steps
// allocate nothing but the returned logits.
struct Workspace {
  std::vector<float> x;       // residual stream [m, hidden]
  std::vector<float> normed;  // [m, hidden]
  std::vector<float> branch;  // attention / FFN output [m, hidden]
  std::vector<float> cos;     // [m, rotary_dim / 2]
  std::vector<float> sin;
  AttentionScratch attention;
  MlpScratch mlp;
  MoeScratch moe;
  RopeFrequencies rope_scratch;
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

struct Chunk {
  const int32_t* ids;
  int64_t rows;
  int64_t first;  // position of ids[0]
};

// Runs all layers for one chunk; leaves the final-normed hidden states in ws.normed.
void run_chunk(const DecoderWeights& w, const ModelConfig& c, const RopeFrequencies& freq,
               const KvCacheQuantizer* kv_quant, const Chunk& chunk, KvCache& cache,
               Workspace& ws) {
  const int64_t m = chunk.rows;
  const int64_t hidden = c.hidden_size;
  const int64_t half = static_cast<int64_t>(freq.inv_freq.size());
  ws.x.resize(static_cast<size_t>(m * hidden));
  ws.normed.resize(static_cast<size_t>(m * hidden));
  ws.branch.resize(static_cast<size_t>(m * hidden));
  ws.cos.resize(static_cast<size_t>(m * half));
  ws.sin.resize(static_cast<size_t>(m * half));
  RotaryEmbedding::cos_sin(freq, chunk.first, m, ws.cos.data(), ws.sin.data());
  kernels::embedding_lookup(w.embed, chunk.ids, m, w.embed_scale, ws.x.data());

  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = ws.x.data();
  float* normed = ws.normed.data();
  float* branch = ws.branch.data();
  AttentionStep step;
  step.first = chunk.first;
  step.rows = m;
  step.rotary_dim = 2 * half;
  step.cos = ws.cos.data();
  step.sin = ws.sin.data();
  step.kv_quant = kv_quant;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& layer = w.layers[l];
    const int index = static_cast<int>(l);
    kernels::rmsnorm(x, layer.input_norm.data(), eps, m, hidden, normed);
    step.window = layer.sliding_window;
    step.layer = index;
    attention_forward(layer.attention, c, step, normed, cache.keys(index), cache.values(index),
                      ws.attention, branch);
    kernels::add_inplace(x, branch, m * hidden);
    kernels::rmsnorm(x, layer.post_attention_norm.data(), eps, m, hidden, normed);
    if (layer.is_moe()) {
      moe_forward(layer.moe, c, normed, m, ws.moe, branch);
    } else {
      mlp_forward(layer.mlp, c.activation, normed, m, ws.mlp, branch);
    }
    kernels::add_inplace(x, branch, m * hidden);
  }
  kernels::rmsnorm(x, w.final_norm.data(), eps, m, hidden, normed);
}

void check_inputs(std::span<const int32_t> tokens, const KvCache& cache, const ModelConfig& c) {
  if (tokens.empty()) throw InvalidArgument("forward: no tokens to process");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      throw InvalidArgument("forward: token id " + std::to_string(tokens[i]) + " at index " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(c.vocab_size) + ")");
    }
  }
  if (cache.num_layers() != c.num_layers || cache.row_size() != c.num_kv_heads * c.head_dim) {
    throw InvalidArgument("forward: the KV cache was not made by this model's new_cache()");
  }
}

}  // namespace

Tensor Model::forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const {
  check_inputs(tokens, cache, config_);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t past = cache.length();
  cache.reserve(past + n);
  Workspace& ws = thread_workspace();
  const RopeFrequencies& freq = rope_->frequencies(past + n, ws.rope_scratch);
  const int64_t vocab = config_.vocab_size;
  const int64_t hidden = config_.hidden_size;
  Tensor logits = Tensor::zeros(DType::F32, {all_logits ? n : 1, vocab});
  float* out = logits.data_as<float>();
  for (int64_t begin = 0; begin < n; begin += kChunkTokens) {
    const int64_t rows = std::min(kChunkTokens, n - begin);
    run_chunk(weights_, config_, freq, kv_quant_.get(), Chunk{tokens.data() + begin, rows, past + begin},
              cache, ws);
    if (all_logits) {
      weights_.lm_head.apply(ws.normed.data(), rows, out + begin * vocab);
    } else if (begin + rows == n) {
      weights_.lm_head.apply(ws.normed.data() + (rows - 1) * hidden, 1, out);
    }
  }
  cache.set_length(past + n);
  return logits;
}

}  // namespace lowbit::models
