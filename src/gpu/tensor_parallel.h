// Tensor parallelism (Megatron-style, as vLLM runs it): which part of every weight each of N GPUs
// holds, and the slicing of dense and quantized weights into those parts. Host code only (no CUDA):
// tested on the CPU (tests/unit/gpu/tensor_parallel_test.cc).
//
//   q/k/v, gate/up   column-parallel: rank r holds a contiguous range of output rows (its heads;
//                    its slice of the intermediate features); no communication after them
//   o, down          row-parallel: rank r holds the matching range of input columns; each rank's
//                    product is a partial sum, all-reduced (NCCL) before the residual add; the bias
//                    is added by rank 0 only
//   embedding        vocab-parallel: rank r holds vocabulary rows [vocab_begin, +vocab_rows); rows
//                    of other ranks gather as zeros, and an all-reduce completes the lookup
//   LM head          vocab-parallel: rank r computes the logits of its vocabulary range, gathered
//                    on the host
//
// KV heads: with kv_heads >= N each rank holds kv_heads / N of them; with fewer (N a multiple of
// kv_heads) each KV head is replicated on N / kv_heads ranks, as vLLM does, so every rank's query
// heads find their group's KV head locally.
//
// Quantized weights keep their own scales: rows take their scale / zero rows; columns take the
// groups they cover, which must start and end on a group boundary (an int group or an fp8 block
// split across two GPUs has no single owner: Unsupported, naming the layer, as vLLM refuses it).
// Activation order (GPTQ g_idx that is not c / group_size) on a row-parallel layer is refused too:
// a rank's columns would reference groups of the whole layer (vLLM keeps the full scales there;
// we do not yet). Per-channel and per-tensor scales need no boundary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/quant_weights.h"

namespace lowbit::models {
struct ModelConfig;
}

namespace lowbit::gpu {

// A range of a 2-D weight's output rows or input columns; `whole` = no split (one GPU).
struct Split {
  enum class Dim : uint8_t { WHOLE, ROWS, COLS };
  Dim dim = Dim::WHOLE;
  int64_t begin = 0, end = 0;

  static Split whole() { return {}; }
  static Split rows(int64_t b, int64_t e) { return {Dim::ROWS, b, e}; }
  static Split cols(int64_t b, int64_t e) { return {Dim::COLS, b, e}; }
  bool is_whole() const { return dim == Dim::WHOLE; }
};

// What rank `rank` of `world` holds. Dimensions are in features (heads · head_dim for attention).
struct TpPlan {
  int rank = 0, world = 1;
  int64_t heads = 0, head_begin = 0;        // query heads of this rank
  int64_t kv_heads = 0, kv_head_begin = 0;  // KV heads (replicated when world > kv_heads)
  int64_t intermediate = 0, intermediate_begin = 0;
  int64_t vocab_rows = 0, vocab_begin = 0;  // the last rank may hold fewer rows

  Split q_rows(int64_t head_dim) const {
    return split_or_whole(Split::rows(head_begin * head_dim, (head_begin + heads) * head_dim));
  }
  Split kv_rows(int64_t head_dim) const {
    return split_or_whole(Split::rows(kv_head_begin * head_dim, (kv_head_begin + kv_heads) * head_dim));
  }
  Split o_cols(int64_t head_dim) const {
    return split_or_whole(Split::cols(head_begin * head_dim, (head_begin + heads) * head_dim));
  }
  Split mlp_rows() const {
    return split_or_whole(Split::rows(intermediate_begin, intermediate_begin + intermediate));
  }
  Split mlp_cols() const {
    return split_or_whole(Split::cols(intermediate_begin, intermediate_begin + intermediate));
  }
  Split vocab() const { return split_or_whole(Split::rows(vocab_begin, vocab_begin + vocab_rows)); }

 private:
  Split split_or_whole(Split s) const { return world == 1 ? Split::whole() : s; }
};

// The plan of `rank`; InvalidArgument naming the field when the model does not divide over
// `world` GPUs (attention heads, KV heads, intermediate size), or world < 1.
TpPlan plan_tensor_parallel(const models::ModelConfig& config, int64_t intermediate, int rank,
                            int world);

// The part of a row-major [rows, cols] matrix (bf16 bits or any element type).
template <typename T>
std::vector<T> slice_matrix(const std::vector<T>& m, int64_t rows, int64_t cols, const Split& s) {
  if (s.is_whole()) return m;
  std::vector<T> out;
  if (s.dim == Split::Dim::ROWS) {
    out.assign(m.begin() + s.begin * cols, m.begin() + s.end * cols);
    return out;
  }
  const int64_t width = s.end - s.begin;
  out.resize(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(m.begin() + r * cols + s.begin, width, out.begin() + r * width);
  }
  return out;
}

// A bias of a split layer: its rows' values (ROWS), all of it on rank 0 and none elsewhere (COLS:
// the partial sums are added up, so the bias must be counted once), or all of it (WHOLE).
std::vector<float> slice_bias(const std::vector<float>& bias, const Split& s, int rank);

// The part of quantized weights; `name` ("model.layers.3.mlp.down_proj") in Unsupported messages.
kernels::IntWeights slice_int_weights(const kernels::IntWeights& w, const Split& s,
                                      const std::string& name);
kernels::Fp8Weights slice_fp8_weights(const kernels::Fp8Weights& w, const Split& s,
                                      const std::string& name);

}  // namespace lowbit::gpu
