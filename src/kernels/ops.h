// The fp32 operations of a decoder forward pass other than matmul: RMSNorm, rotary embedding,
// attention against a KV cache, gated activations, residual add, embedding lookup. Activations are
// fp32 row-major; weights arrive either as fp32 vectors (norms, converted once at load) or as
// Tensors in their stored dtype (embedding table). Implementations live in kernels/ref/ as plain
// loops written for the compiler to vectorize; the heavy part of prefill attention goes through
// matmul() so that it runs on the fastest matmul kernel of the machine.
// Threads: OpenMP inside each call where the work is large enough; callers call from one thread.
#pragma once

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::kernels {

// out[r] = x[r] / sqrt(mean(x[r]²) + eps) * weight, for `rows` rows of `dim` values. `out` may be
// `x` (in place). The mean square is accumulated in fp32, as torch does for fp32 inputs.
void rmsnorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim, float* out);

// y[i] += x[i] for n values (the residual connection).
void add_inplace(float* y, const float* x, int64_t n);

enum class Activation : uint8_t {
  SILU,       // z * sigmoid(z)
  GELU_TANH,  // torch gelu(approximate="tanh") ("gelu_pytorch_tanh", "gelu_new")
  GELU,       // exact erf GELU
  RELU,
};

// out[r][i] = act(gate[r][i]) * up[r][i] for `rows` rows of `n` values; gate and up rows are
// `gate_stride` / `up_stride` floats apart, out rows `n` apart. `out` may alias `gate` when the
// strides equal n.
void gated_activation(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                      int64_t rows, int64_t n, Activation act, float* out);

// Rotary embedding, half-split ("rotate_half") pairing, in place on x: [rows, heads, head_dim] with
// rows `row_stride` floats apart. For each head only the first rotary_dim values rotate (pairs j
// and j + rotary_dim/2); the rest pass through. cos/sin: [rows, rotary_dim/2], already multiplied
// by the attention scaling.
void rope_apply(float* x, int64_t rows, int64_t row_stride, int heads, int head_dim, int rotary_dim,
                const float* cos, const float* sin);

// Causal (optionally sliding-window) multi-head attention with grouped KV heads.
struct AttentionShape {
  int64_t queries = 0;  // new tokens n; query i sits at position past + i
  int64_t past = 0;     // positions before the first query (all present in k/v)
  int heads = 0;
  int kv_heads = 0;  // query head h reads KV head h / (heads / kv_heads)
  int head_dim = 0;
  int64_t window =
      0;  // 0: unlimited; else key j is visible to query position p iff p-window < j <= p
  float scale = 1.0f;  // multiplies q·k before the softmax
};
// q: [queries, heads*head_dim]; k, v: [past + queries, kv_heads*head_dim] (the cache rows);
// out: [queries, heads*head_dim].
void attention(const float* q, const float* k, const float* v, const AttentionShape& shape,
               float* out);

// A paged KV cache (the serving engine's block pool): cache position j lives at row
// j % block_size of block table[j / block_size]; block b starts b * block_size * kv_stride floats
// after k_blocks / v_blocks (kv_stride = kv_heads * head_dim). The table covers positions
// [0, past + queries).
struct KvPages {
  const float* k_blocks = nullptr;
  const float* v_blocks = nullptr;
  const int32_t* table = nullptr;
  int64_t block_size = 0;  // >= 1
  // An fp8 cache instead of k_blocks / v_blocks (when k_codes is set): one byte per value in the
  // same layout, value = fp8(code) · scale, the scale of the value's KV head (scale_count ==
  // kv_heads) or of all heads (scale_count == 1); e4m3 codes, or e5m2.
  const uint8_t* k_codes = nullptr;
  const uint8_t* v_codes = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  int scale_count = 1;
  bool e5m2 = false;
};
// attention() reading keys and values through `kv`. Bit-identical to attention() on the same
// values laid out contiguously (attention() is this with one block), for any block size; with
// fp8 codes, to attention() on the decoded values.
void attention_paged(const float* q, const KvPages& kv, const AttentionShape& shape, float* out);

// out[i] = table[ids[i]] * scale as fp32 (table [vocab, dim] in F32/F16/BF16). Ids must already be
// validated (0 <= id < vocab).
void embedding_lookup(const Tensor& table, const int32_t* ids, int64_t n, float scale, float* out);

// In-place softmax over n values (max-subtracted, fp32).
void softmax_inplace(float* x, int64_t n);

}  // namespace lowbit::kernels
