// The inside of GpuModel and GpuSequence (internal to src/gpu): the uploaded weights of each layer,
// the KV block pool, the scratch buffers of one forward pass and the decode CUDA graphs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_linear.h"
#include "gpu/gpu_model.h"
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

struct GpuModel::Impl {
  const models::Model* cpu = nullptr;
  GpuModelOptions options;
  int device = 0;
  std::string device_name;
  cudaStream_t stream = nullptr;
  std::unique_ptr<kernels::cuda::BlasLt> blas;

  // Model dimensions.
  int64_t hidden = 0, vocab = 0, heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  int64_t q_width = 0, kv_width = 0, intermediate = 0;
  float eps = 1e-6f, embed_scale = 1.0f, attention_scale = 1.0f;

  // Weights.
  kernels::cuda::DeviceBuffer<uint16_t> embed;  // bf16 [vocab, hidden]
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
  kernels::cuda::DeviceBuffer<uint8_t> attn_workspace;            // decode attention
  kernels::cuda::DeviceBuffer<float> logits;                      // [logit_rows, vocab]
  int64_t logit_rows = 0;
  PinnedBuffer<float> logits_host;  // [vocab]: the last row
  // Step metadata, one upload per pass: ids, positions, slots [T each], context length, query
  // start [2], block table [max_blocks_per_seq].
  kernels::cuda::DeviceBuffer<int32_t> meta;
  PinnedBuffer<int32_t> meta_host;

  std::vector<DecodeGraph> graphs;
  std::vector<int64_t> graph_warmed;  // buckets that ran one eager step (ready to capture)
  bool graphs_enabled = true;

  ~Impl();
};

// Builds Impl's weights from the CPU model (gpu_model_load.cc).
void upload_weights(const models::Model& cpu, GpuModel::Impl& impl);

}  // namespace lowbit::gpu
