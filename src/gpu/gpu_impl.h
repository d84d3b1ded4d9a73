// The inside of GpuModel and GpuSequence (internal to src/gpu): per GPU (a Shard: the whole model on
// one GPU, or one rank's part of it under tensor parallelism) the uploaded weights of each layer,
// its KV cache, the scratch buffers of one forward pass and the decode CUDA graphs; the KV block
// pool shared by every rank (all ranks hold the same blocks of their own KV heads).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/gpu_linear.h"
#include "gpu/gpu_model.h"
#include "gpu/nccl_group.h"
#include "gpu/peer_all_reduce.h"
#include "gpu/tensor_parallel.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm_bf16.h"

namespace lowbit::models {
class Model;
}

namespace lowbit::gpu {

// Page-locked host memory (async copies from and to it really are asynchronous). Move-only.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t count);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  T* data() { return data_; }
  size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

struct GpuLayer {
  kernels::cuda::DeviceBuffer<float> input_norm;  // fp32 [hidden]
  kernels::cuda::DeviceBuffer<float> post_norm;
  kernels::cuda::DeviceBuffer<float> q_norm;  // fp32 [head_dim], empty unless qk_norm
  kernels::cuda::DeviceBuffer<float> k_norm;
  std::vector<GpuLinear> qkv;      // one fused [q; k; v] GEMM, or q, k, v
  GpuLinear o;
  std::vector<GpuLinear> gate_up;  // one fused [gate; up] GEMM, or gate, up
  GpuLinear down;
  int64_t window = 0;
  // This layer's paged cache (pointers into kv_storage) and, for fp8, its scales.
  kernels::cuda::PagedKvCache kv;
  kernels::cuda::DeviceBuffer<uint8_t> k_storage, v_storage;
  kernels::cuda::DeviceBuffer<float> k_scale, v_scale;
};

// Host bookkeeping of the KV pool: which blocks are free. Shared with the sequences, so a sequence
// that outlives its model can still return its blocks.
struct BlockPool {
  int block_size = 16;
  int64_t num_blocks = 0;
  std::vector<int32_t> free;  // a stack of free block ids
};

}  // namespace lowbit::gpu

namespace lowbit::gpu {

struct GpuSequence::State {
  std::shared_ptr<BlockPool> pool;
  std::vector<int32_t> blocks;  // the block of positions [i·block_size, (i+1)·block_size)
  int64_t length = 0;
  void release_blocks_after(int64_t tokens);  // keeps the blocks that hold positions < tokens
};

// A captured decode step (one token) for context lengths up to `max_context`.
struct DecodeGraph {
  cudaGraphExec_t exec = nullptr;
  int64_t max_context = 0;
};

// One GPU's part of the model.
struct Shard {
  const models::Model* cpu = nullptr;
  GpuModelOptions options;
  int device = 0;
  TpPlan plan;                          // what this rank holds (world 1: everything)
  const NcclGroup* nccl = nullptr;      // null on one GPU
  const PeerAllReduce* peer = nullptr;  // small all-reduces, when peer access works
  std::string device_name;
  cudaStream_t stream = nullptr;
  std::unique_ptr<kernels::cuda::BlasLt> blas;

  // Model dimensions: heads, kv_heads, q_width, kv_width and intermediate are this rank's; vocab
  // is the whole vocabulary, of which the rank holds rows [vocab_begin, vocab_begin + vocab_rows).
  int64_t hidden = 0, vocab = 0, heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  int64_t q_width = 0, kv_width = 0, intermediate = 0;
  int64_t vocab_begin = 0, vocab_rows = 0;
  float eps = 1e-6f, embed_scale = 1.0f, attention_scale = 1.0f;

  // Weights.
  kernels::cuda::DeviceBuffer<uint16_t> embed;  // bf16 [vocab_rows, hidden]
  std::vector<GpuLayer> layers;
  kernels::cuda::DeviceBuffer<float> final_norm;
  GpuLinear lm_head;
  size_t weight_bytes = 0;
  double bytes_per_token = 0;
  std::string kernels_summary;

  // RoPE: cos/sin of the call-independent frequencies for positions [0, max_seq_len), and room
  // for the rows of one chunk when a call needs its own (dynamic / longrope past their limits).
  kernels::cuda::DeviceBuffer<float> rope_table;  // [max_seq_len, rotary_dim]
  kernels::cuda::DeviceBuffer<float> rope_call;   // [max_step_tokens, rotary_dim]
  PinnedBuffer<float> rope_call_host;

  // KV pool.
  std::shared_ptr<BlockPool> pool;
  size_t kv_bytes = 0;
  int max_blocks_per_seq = 0;

  // Scratch of one pass (T = max_step_tokens rows).
  kernels::cuda::DeviceBuffer<uint16_t> residual, buf_a, buf_b;  // [T, hidden]
  kernels::cuda::DeviceBuffer<uint16_t> qkv;                      // [T, q + 2 kv]
  kernels::cuda::DeviceBuffer<uint16_t> attn;                     // [T, q_width]
  kernels::cuda::DeviceBuffer<uint16_t> gate_up;                  // [T, 2 · intermediate]
  kernels::cuda::DeviceBuffer<uint16_t> act;                      // [T, intermediate]
  kernels::cuda::DeviceBuffer<uint8_t> workspace;                 // linear layers
  kernels::cuda::DeviceBuffer<uint8_t> attn_workspace;            // decode attention (1 sequence)
  kernels::cuda::DeviceBuffer<uint8_t> batch_attn_workspace;      // batched decode, grown on demand
  kernels::cuda::DeviceBuffer<float> logits;                      // [logit_rows, vocab_rows]
  int64_t logit_rows = 0;
  PinnedBuffer<float> logits_host;  // [vocab_rows]: the last row
  // Device argmax of forward_batch's argmax_only rows: {column, value bits} per row of a batch
  // (max_batch_size rows), and its host copy.
  kernels::cuda::DeviceBuffer<int32_t> argmax;
  PinnedBuffer<int32_t> argmax_host;
  // Step metadata, one upload per pass: ids, positions, slots [T each], then per sequence context
  // length, query start (+1), last row and block table [max_blocks_per_seq] (up to
  // options.max_batch_size sequences).
  kernels::cuda::DeviceBuffer<int32_t> meta;
  PinnedBuffer<int32_t> meta_host;

  std::vector<DecodeGraph> graphs;
  std::vector<int64_t> graph_warmed;  // buckets that ran one eager step (ready to capture)
  bool graphs_enabled = true;

  Shard() = default;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  ~Shard();
};

struct GpuModel::Impl {
  const models::Model* cpu = nullptr;
  GpuModelOptions options;            // with the 0 defaults resolved
  std::unique_ptr<NcclGroup> nccl;    // tensor parallelism only; destroyed after the shards
  std::unique_ptr<PeerAllReduce> peer;
  std::vector<std::unique_ptr<Shard>> shards;  // rank order
  std::shared_ptr<BlockPool> pool;
};

// Runs fn(rank) for ranks 0 .. world - 1, each on its own host thread (rank 0 on the caller's),
// and rethrows the first exception once all have returned (gpu_device.cc).
void run_per_rank(int world, const std::function<void(int)>& fn);

// Builds a shard's weights from the CPU model (gpu_model_load.cc).
void upload_weights(const models::Model& cpu, Shard& shard);

// Runs one call's chunks on one shard (gpu_forward.cc); `out` is the host logits [rows, vocab] of
// the whole call, of which the shard writes its vocabulary columns.
void forward_shard(Shard& shard, const GpuSequence::State& seq, std::span<const int32_t> tokens,
                   int64_t past, bool all_logits, float* out);

}  // namespace lowbit::gpu
