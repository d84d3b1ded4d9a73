// GpuModel::forward: one pass through the layers per chunk of at most max_step_tokens tokens, the
// CPU decoder's math (models/decoder.cc) on bf16 activations; decode steps (one token) replayed
// from a CUDA graph per context-length bucket. Under tensor parallelism every GPU runs the same
// passes on its own thread over its part of the weights (all-reduces where partial sums meet).
#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "gpu/gpu_impl.h"
#include "gpu/gpu_kernels.h"
#include "gpu/gpu_pass.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/rope_kv_write.h"
#include "kernels/cuda/small_ops.h"
#include "lowbit/error.h"
#include "models/model.h"

namespace lowbit::gpu {

namespace kc = kernels::cuda;

namespace {

constexpr int64_t kMinBucket = 256;

const __nv_bfloat16* as_bf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
__nv_bfloat16* as_bf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

// The decode attention's split plan depends on max_context_len: rounding it up to a power of two
// (>= kMinBucket, <= max_seq_len) gives few distinct plans, so few CUDA graphs.
int64_t context_bucket(int64_t context, int64_t max_seq_len) {
  int64_t b = kMinBucket;
  while (b < context) b *= 2;
  return std::min(b, max_seq_len);
}

// Sums a bf16 buffer over the tensor-parallel ranks (nothing on one GPU): small ones (decode
// steps) by the one-shot peer kernel, the rest by NCCL.
void all_reduce(Shard& im, uint16_t* data, int64_t count) {
  if (im.peer != nullptr && im.peer->accepts(count)) {
    im.peer->run(im.plan.rank, data, count, im.stream);
  } else if (im.nccl != nullptr) {
    im.nccl->all_reduce_bf16(im.plan.rank, data, count, im.stream);
  }
}

// Attention of one layer for the pass; q/k/v are views of the projection outputs.
void attention(Shard& im, const GpuLayer& g, const Pass& p, uint16_t* q,
               int64_t q_stride, uint16_t* k, uint16_t* v, int64_t kv_stride) {
  if (g.q_norm.size() > 0) {  // Qwen3: per-head RMSNorm of q and k (dense here) before RoPE
    kc::rmsnorm(q, g.q_norm.data(), im.eps, p.rows * im.heads, im.head_dim, q, im.stream);
    kc::rmsnorm(k, g.k_norm.data(), im.eps, p.rows * im.kv_heads, im.head_dim, k, im.stream);
  }
  if (gemv_kernels_enabled()) {  // one kernel, the bits of the two below
    kc::rope_neox_write_kv(q, q_stride, k, kv_stride, v, kv_stride, p.positions, p.slots, p.rows,
                           static_cast<int>(im.heads), static_cast<int>(im.rotary_dim), p.rope,
                           p.rope_rows, g.kv, im.stream);
  } else {
    kc::rope_neox(q, k, p.positions, p.rows, static_cast<int>(im.heads),
                  static_cast<int>(im.kv_heads), static_cast<int>(im.head_dim),
                  static_cast<int>(im.rotary_dim), p.rope, p.rope_rows, im.stream, q_stride,
                  kv_stride);
    kc::write_kv_paged(as_bf16(k), kv_stride, as_bf16(v), kv_stride, p.slots, p.rows, g.kv,
                       im.stream);
  }
  kernels::AttentionShape shape;
  shape.heads = static_cast<int>(im.heads);
  shape.kv_heads = static_cast<int>(im.kv_heads);
  shape.head_dim = static_cast<int>(im.head_dim);
  shape.window = g.window;
  shape.scale = im.attention_scale;
  kc::PagedBatch batch;
  batch.num_seqs = static_cast<int>(p.num_seqs);
  batch.context_lens = p.context_len;
  batch.block_tables = p.block_table;
  batch.max_blocks_per_seq = static_cast<int>(p.block_stride > 0 ? p.block_stride : im.max_blocks_per_seq);
  batch.max_context_len = static_cast<int>(p.max_context);
  batch.query_start = p.query_start;
  batch.max_query_len = static_cast<int>(p.max_query > 0 ? p.max_query : p.rows);
  if (p.rows == p.num_seqs) {  // one new token per sequence: decode
    void* ws = p.attn_workspace != nullptr ? p.attn_workspace : im.attn_workspace.data();
    const size_t ws_bytes = p.attn_workspace != nullptr ? p.attn_workspace_bytes : im.attn_workspace.bytes();
    kc::decode_attention(as_bf16(q), q_stride, g.kv, batch, shape, as_bf16(im.attn.data()), ws,
                         ws_bytes, im.stream);
  } else {
    kc::prefill_attention(as_bf16(q), q_stride, g.kv, batch, shape, as_bf16(im.attn.data()),
                          im.stream);
  }
}

// One decoder layer. On entry buf_a holds RMSNorm_in(x) and residual holds x; on exit buf_a holds
// the next norm (`next_norm`: the next layer's input norm or the final norm) of the new x.
void run_layer(Shard& im, const GpuLayer& g, const float* next_norm, const Pass& p) {
  const int64_t m = p.rows, t = im.options.max_step_tokens;
  void* ws = im.workspace.data();
  const size_t ws_bytes = im.workspace.bytes();
  uint16_t* normed = im.buf_a.data();
  uint16_t *q, *k, *v;
  int64_t q_stride = 0, kv_stride = 0;
  if (g.qkv.size() == 1) {  // fused: [q | k | v] columns of one output
    q = im.qkv.data();
    k = q + im.q_width;
    v = k + im.kv_width;
    q_stride = kv_stride = im.q_width + 2 * im.kv_width;
    g.qkv[0].run(*im.blas, normed, m, q, ws, ws_bytes, im.stream);
  } else {
    q = im.qkv.data();
    k = q + t * im.q_width;
    v = k + t * im.kv_width;
    g.qkv[0].run(*im.blas, normed, m, q, ws, ws_bytes, im.stream);
    g.qkv[1].run(*im.blas, normed, m, k, ws, ws_bytes, im.stream);
    g.qkv[2].run(*im.blas, normed, m, v, ws, ws_bytes, im.stream);
  }
  attention(im, g, p, q, q_stride, k, v, kv_stride);
  uint16_t* branch = im.buf_b.data();
  g.o.run(*im.blas, im.attn.data(), m, branch, ws, ws_bytes, im.stream);
  all_reduce(im, branch, m * im.hidden);  // row-parallel: the ranks' partial sums
  // residual += attention; branch = RMSNorm_post(residual)
  kc::fused_add_rmsnorm(branch, im.residual.data(), g.post_norm.data(), im.eps, m, im.hidden,
                        im.stream);
  // (A down GEMV reading silu(gate)·up straight from gate_up, and o / down GEMVs ending in the
  // residual add and the next norm, exist in kernels/cuda/gemv_bf16.h but measured slower than
  // these separate kernels on the H200: bench/NOTES.md "Decode GEMV".)
  if (g.gate_up.size() == 1) {
    g.gate_up[0].run(*im.blas, branch, m, im.gate_up.data(), ws, ws_bytes, im.stream);
    kc::silu_and_mul(im.gate_up.data(), m, im.intermediate, im.act.data(), im.stream);
  } else {
    uint16_t* gate = im.gate_up.data();
    uint16_t* up = gate + t * im.intermediate;
    g.gate_up[0].run(*im.blas, branch, m, gate, ws, ws_bytes, im.stream);
    g.gate_up[1].run(*im.blas, branch, m, up, ws, ws_bytes, im.stream);
    silu_mul_split(gate, up, m, im.intermediate, im.act.data(), im.stream);
  }
  g.down.run(*im.blas, im.act.data(), m, normed, ws, ws_bytes, im.stream);
  all_reduce(im, normed, m * im.hidden);
  // residual += mlp; normed = next norm of the residual
  kc::fused_add_rmsnorm(normed, im.residual.data(), next_norm, im.eps, m, im.hidden, im.stream);
}

}  // namespace

// Embedding through the last layer: buf_a ends as RMSNorm_final(x) of the pass's rows.
void run_layers(Shard& im, const Pass& p) {
  if (im.nccl == nullptr) {
    kc::embedding_gather(im.embed.data(), im.vocab, im.hidden, p.ids, p.rows, im.residual.data(),
                         nullptr, im.stream);
  } else {  // vocab-parallel: each id's row comes from the rank that holds it
    embedding_gather_part(im.embed.data(), im.vocab_begin, im.vocab_rows, im.hidden, p.ids, p.rows,
                          im.residual.data(), im.stream);
    all_reduce(im, im.residual.data(), p.rows * im.hidden);
  }
  if (im.embed_scale != 1.0f) scale_bf16(im.residual.data(), p.rows * im.hidden, im.embed_scale, im.stream);
  kc::rmsnorm(im.residual.data(), im.layers[0].input_norm.data(), im.eps, p.rows, im.hidden,
              im.buf_a.data(), im.stream);
  for (size_t l = 0; l < im.layers.size(); ++l) {
    const float* next = l + 1 < im.layers.size() ? im.layers[l + 1].input_norm.data()
                                                 : im.final_norm.data();
    run_layer(im, im.layers[l], next, p);
  }
}

namespace {

// Host side of one pass's metadata: ids, positions, slots, context length, query start and the
// block table, packed at fixed offsets for rows == 1 (the layout a decode graph reads).
Pass fill_meta(Shard& im, const GpuSequence::State& seq, std::span<const int32_t> ids,
               int64_t first, bool relative_positions) {
  const int64_t m = static_cast<int64_t>(ids.size());
  const int bs = im.options.block_size;
  int32_t* h = im.meta_host.data();
  const int64_t blocks = static_cast<int64_t>(seq.blocks.size());
  for (int64_t i = 0; i < m; ++i) {
    const int64_t pos = first + i;
    h[i] = ids[static_cast<size_t>(i)];
    h[m + i] = static_cast<int32_t>(relative_positions ? i : pos);
    h[2 * m + i] = seq.blocks[static_cast<size_t>(pos / bs)] * bs + static_cast<int32_t>(pos % bs);
  }
  h[3 * m] = static_cast<int32_t>(first + m);
  h[3 * m + 1] = 0;
  h[3 * m + 2] = static_cast<int32_t>(m);
  std::copy(seq.blocks.begin(), seq.blocks.end(), h + 3 * m + 3);
  const size_t count = static_cast<size_t>(3 * m + 3 + blocks);
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(im.meta.data(), h, count * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, im.stream));
  const int32_t* d = im.meta.data();
  Pass p;
  p.rows = m;
  p.ids = d;
  p.positions = d + m;
  p.slots = d + 2 * m;
  p.context_len = d + 3 * m;
  p.query_start = d + 3 * m + 1;
  p.block_table = d + 3 * m + 3;
  p.max_context = first + m;
  p.rope = im.rope_table.data();
  p.rope_rows = im.options.max_seq_len;
  return p;
}

// cos/sin rows for positions first..first+m-1 of call-specific frequencies.
void upload_call_rope(Shard& im, const models::RopeFrequencies& freq, int64_t first,
                      int64_t m, Pass& p) {
  const int64_t half = im.rotary_dim / 2;
  std::vector<float> cos(static_cast<size_t>(m * half)), sin(cos.size());
  models::RotaryEmbedding::cos_sin(freq, first, m, cos.data(), sin.data());
  float* h = im.rope_call_host.data();
  for (int64_t r = 0; r < m; ++r) {
    std::copy_n(cos.data() + r * half, half, h + r * im.rotary_dim);
    std::copy_n(sin.data() + r * half, half, h + r * im.rotary_dim + half);
  }
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(im.rope_call.data(), h,
                                    static_cast<size_t>(m * im.rotary_dim) * sizeof(float),
                                    cudaMemcpyHostToDevice, im.stream));
  p.rope = im.rope_call.data();
  p.rope_rows = m;
}

// The pass and the LM head of its last row (into logits row 0), as one unit a graph can hold.
void decode_step(Shard& im, const Pass& p) {
  run_layers(im, p);
  im.lm_head.run_f32(*im.blas, im.buf_a.data() + (p.rows - 1) * im.hidden, 1, im.logits.data(),
                     im.stream, im.workspace.data(), im.workspace.bytes());
}

// Replays (capturing first if needed) the decode graph of p's bucket; false when graphs are off
// or capture failed (then they stay off and the caller runs the step eagerly).
bool run_decode_graph(Shard& im, const Pass& p) {
  if (!im.graphs_enabled) return false;
  for (const DecodeGraph& g : im.graphs) {
    if (g.max_context == p.max_context) {
      LOWBIT_CUDA_CHECK(cudaGraphLaunch(g.exec, im.stream));
      return true;
    }
  }
  // Every kernel's plan for this shape exists after one eager step (cuBLASLt heuristics run on the
  // first call of a shape): run eagerly once, capture on the next step of the bucket.
  if (std::find(im.graph_warmed.begin(), im.graph_warmed.end(), p.max_context) ==
      im.graph_warmed.end()) {
    im.graph_warmed.push_back(p.max_context);
    return false;
  }
  cudaGraph_t graph = nullptr;
  LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(im.stream, cudaStreamCaptureModeThreadLocal));
  try {
    decode_step(im, p);
  } catch (const Error& e) {
    cudaStreamEndCapture(im.stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    im.graphs_enabled = false;
    log_warn(std::string("GPU decode graphs disabled (capture failed: ") + e.what() + ")");
    return false;
  }
  LOWBIT_CUDA_CHECK(cudaStreamEndCapture(im.stream, &graph));
  DecodeGraph g;
  g.max_context = p.max_context;
  const cudaError_t status = cudaGraphInstantiate(&g.exec, graph, 0);
  cudaGraphDestroy(graph);
  if (status != cudaSuccess) {
    cudaGetLastError();
    im.graphs_enabled = false;
    log_warn(std::string("GPU decode graphs disabled (instantiate: ") + cudaGetErrorName(status) + ")");
    return false;
  }
  im.graphs.push_back(g);
  LOWBIT_CUDA_CHECK(cudaGraphLaunch(g.exec, im.stream));
  return true;
}

}  // namespace

void check_tokens(std::span<const int32_t> tokens, int64_t vocab) {
  if (tokens.empty()) throw InvalidArgument("forward: no tokens to process");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw InvalidArgument("forward: token id " + std::to_string(tokens[i]) + " at index " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
    }
  }
}

// Gives the sequence blocks for `tokens` positions, all or none.
void reserve_blocks(GpuSequence::State& seq, int64_t tokens) {
  BlockPool& pool = *seq.pool;
  const int64_t need = (tokens + pool.block_size - 1) / pool.block_size -
                       static_cast<int64_t>(seq.blocks.size());
  if (need <= 0) return;
  if (need > static_cast<int64_t>(pool.free.size())) {
    throw OutOfMemory("--device cuda: the KV cache pool is full (" +
                      std::to_string(pool.num_blocks * pool.block_size) + " tokens for all "
                      "sequences): free other sequences or raise kv_cache_tokens");
  }
  for (int64_t i = 0; i < need; ++i) {
    seq.blocks.push_back(pool.free.back());
    pool.free.pop_back();
  }
}

// Copies this rank's logits [rows, vocab_rows] (device) into columns [vocab_begin, +vocab_rows) of
// rows of the call's host logits [.., vocab].
void copy_logits(Shard& im, const float* device, int64_t rows, float* out_row) {
  const size_t row_bytes = static_cast<size_t>(im.vocab_rows) * sizeof(float);
  LOWBIT_CUDA_CHECK(cudaMemcpy2DAsync(out_row + im.vocab_begin,
                                      static_cast<size_t>(im.vocab) * sizeof(float), device,
                                      row_bytes, row_bytes, static_cast<size_t>(rows),
                                      cudaMemcpyDeviceToHost, im.stream));
}


void forward_shard(Shard& im, const GpuSequence::State& seq, std::span<const int32_t> tokens,
                   int64_t past, bool all_logits, float* out) {
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  const int64_t n = static_cast<int64_t>(tokens.size());
  // RoPE frequencies once per call from its last position, as the CPU decoder chooses them.
  models::RopeFrequencies scratch, initial_scratch;
  const models::RopeFrequencies& freq = im.cpu->rotary().frequencies(past + n, scratch);
  const bool call_rope = &freq != &im.cpu->rotary().frequencies(0, initial_scratch);
  const int64_t t = im.options.max_step_tokens;
  const size_t row_bytes = static_cast<size_t>(im.vocab_rows) * sizeof(float);
  for (int64_t begin = 0; begin < n; begin += t) {
    const int64_t rows = std::min(t, n - begin);
    // The pinned staging buffers are reused: the previous chunk's copies must be done.
    if (begin > 0) LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
    Pass p = fill_meta(im, seq, tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(rows)),
                       past + begin, call_rope);
    if (call_rope) upload_call_rope(im, freq, past + begin, rows, p);
    if (rows == 1) p.max_context = context_bucket(p.max_context, im.options.max_seq_len);
    const bool last = begin + rows == n;
    if (!all_logits && last && rows == 1) {
      if (call_rope || !run_decode_graph(im, p)) decode_step(im, p);
      LOWBIT_CUDA_CHECK(cudaMemcpyAsync(im.logits_host.data(), im.logits.data(), row_bytes,
                                        cudaMemcpyDeviceToHost, im.stream));
      LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
      std::memcpy(out + im.vocab_begin, im.logits_host.data(), row_bytes);
      continue;
    }
    run_layers(im, p);
    if (all_logits) {
      for (int64_t r = 0; r < rows; r += im.logit_rows) {
        const int64_t block = std::min(im.logit_rows, rows - r);
        im.lm_head.run_f32(*im.blas, im.buf_a.data() + r * im.hidden, block, im.logits.data(),
                           im.stream, im.workspace.data(), im.workspace.bytes());
        copy_logits(im, im.logits.data(), block, out + (begin + r) * im.vocab);
      }
    } else if (last) {
      im.lm_head.run_f32(*im.blas, im.buf_a.data() + (rows - 1) * im.hidden, 1, im.logits.data(),
                         im.stream, im.workspace.data(), im.workspace.bytes());
      copy_logits(im, im.logits.data(), 1, out);
    }
  }
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
}

Tensor GpuModel::forward(std::span<const int32_t> tokens, GpuSequence& sequence, bool all_logits) {
  Impl& im = *impl_;
  const Shard& first = *im.shards.front();
  check_tokens(tokens, first.vocab);
  LOWBIT_CHECK(sequence.state_ && sequence.state_->pool == im.pool,
               "forward: the sequence was not made by this GpuModel's new_sequence()");
  GpuSequence::State& seq = *sequence.state_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t past = seq.length;
  LOWBIT_CHECK(past + n <= im.options.max_seq_len,
               "forward: " + std::to_string(past) + " cached + " + std::to_string(n) +
                   " new tokens exceed the GPU model's max_seq_len " +
                   std::to_string(im.options.max_seq_len));
  Tensor logits = Tensor::zeros(DType::F32, {all_logits ? n : 1, first.vocab});
  float* out = logits.data_as<float>();
  reserve_blocks(seq, past + n);
  try {
    run_per_rank(static_cast<int>(im.shards.size()), [&](int r) {
      forward_shard(*im.shards[static_cast<size_t>(r)], seq, tokens, past, all_logits, out);
    });
  } catch (...) {
    // The cache rows of this call may be half written: they are beyond length, so unused.
    seq.release_blocks_after(past);
    throw;
  }
  seq.length = past + n;
  return logits;
}

GpuSequence GpuModel::new_sequence() {
  GpuSequence s;
  s.state_ = std::make_unique<GpuSequence::State>();
  s.state_->pool = impl_->pool;
  return s;
}

void GpuSequence::State::release_blocks_after(int64_t tokens) {
  const int64_t keep = (tokens + pool->block_size - 1) / pool->block_size;
  while (static_cast<int64_t>(blocks.size()) > keep) {
    pool->free.push_back(blocks.back());
    blocks.pop_back();
  }
}

GpuSequence::GpuSequence() = default;
GpuSequence::~GpuSequence() {
  if (state_) state_->release_blocks_after(0);
}
GpuSequence::GpuSequence(GpuSequence&&) noexcept = default;
GpuSequence& GpuSequence::operator=(GpuSequence&& other) noexcept {
  if (this != &other) {
    if (state_) state_->release_blocks_after(0);
    state_ = std::move(other.state_);
  }
  return *this;
}

int64_t GpuSequence::length() const { return state_ ? state_->length : 0; }

void GpuSequence::clear() { truncate(0); }

void GpuSequence::truncate(int64_t n) {
  LOWBIT_CHECK(n >= 0 && n <= length(), "GpuSequence::truncate: " + std::to_string(n) +
                                            " is outside [0, " + std::to_string(length()) + "]");
  if (!state_) return;
  state_->length = n;
  state_->release_blocks_after(n);
}

}  // namespace lowbit::gpu
