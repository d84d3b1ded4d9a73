// A whole decoder-only model on one CUDA GPU: the weights of a loaded CPU models::Model uploaded
// once, a paged KV cache (a block pool shared by the model's GpuSequences) and the forward pass of
// the CPU decoder (models/decoder.cc) on the kernels of src/kernels/cuda:
//
//   x = embed(ids) · embed_scale
//   per layer: h = RMSNorm_in(x); q, k, v = proj(h) (+ bias); [q/k per-head RMSNorm]; RoPE(q, k);
//              write k, v into the paged cache; attention (prefill kernel for several tokens,
//              decode kernel for one); x += o_proj(·); h = RMSNorm_post(x); x += down(silu(gate)·up)
//   logits = lm_head(RMSNorm_final(x)) in fp32
//
// Numerics: activations are bf16 between kernels (each kernel accumulates in fp32 and rounds its
// output once), the residual stream too, as transformers and vLLM run a bf16 model; logits are fp32
// from bf16 operands. Dense weights (F32 / F16 / BF16 checkpoints) become bf16. RoPE's cos/sin table
// comes from the CPU model's own RotaryEmbedding (every rope_type; dynamic / longrope frequencies
// that change with the call length are recomputed per call exactly as the CPU does).
//
// Kernels: dense q/k/v are fused into one GEMM and gate/up into another at load (vLLM's
// QKVParallelLinear / MergedColumnParallelLinear); quantized layers run the GPU kernel of their
// canonical weights (quant/methods/kernel_linear.h): int weights with bf16 inputs → wna16 (W4A16 /
// W8A16), int weights with int8 inputs → w8a8 int8, fp8 weights with fp8 inputs → w8a8 fp8;
// weight-only fp8, int widths wna16 cannot run and dequant-only schemes become bf16 dense weights
// (exact up to bf16 rounding of each weight). A scheme whose activation quantization no GPU kernel
// implements is Unsupported, naming the layer and the method. The quantized CPU model must be
// loaded with quant::KernelLinear::set_keep_canonical_weights(true) in effect (load_model_for_gpu
// below does that).
//
// Not supported (Unsupported at load, naming what): mixture-of-experts layers, activations other
// than SiLU, head_dim other than 64 / 128, quantized embeddings, fp8_e5m2 or --calculate-kv-scales
// KV caches, plugin quantization methods.
//
// Tensor parallelism (tensor_parallel_size N > 1, gpu/tensor_parallel.h says what each GPU holds):
// devices device .. device + N - 1, one host thread per GPU during a forward, NCCL all-reduces
// after the row-parallel layers and the vocab-parallel embedding, logits gathered on the host.
// Numerics differ from one GPU only where the partial sums of o_proj and down_proj are rounded to
// bf16 before they are added (as vLLM does), and where dynamic activation scales (fp8 / int8 per
// token) of those layers are taken over each GPU's slice of the input (as vLLM does).
//
// Threads: a GpuModel runs one forward at a time (one CUDA stream per GPU, one set of scratch
// buffers); use it from one thread. This header has no CUDA types.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::models {
class Model;
struct LoadOptions;
}  // namespace lowbit::models

namespace lowbit::gpu {

struct GpuModelOptions {
  int device = 0;  // CUDA device index (the first of tensor_parallel_size consecutive ones)
  int tensor_parallel_size = 1;
  // Benchmarks of shapes no disk holds: dense weights are filled on the device with random bf16
  // values (uniform, std 0.02; norms 1) instead of being read from the CPU model, whose tensors
  // are then never touched (a `lowbit synth --no-data` checkpoint of holes serves). Unquantized
  // checkpoints only.
  bool random_weights = false;
  // Tensor parallelism: all-reduces of up to 64 rows by a one-shot peer-to-peer kernel
  // (gpu/peer_all_reduce.h) where the GPUs have peer access; false: NCCL for every all-reduce.
  bool peer_all_reduce = true;
  // Longest sequence (cached + new tokens) a GpuSequence may reach; sizes the RoPE table, the block
  // tables and the decode-attention scratch. 0: max_position_embeddings, at most 32768.
  int64_t max_seq_len = 0;
  // Tokens per pass through the layers; longer calls run in chunks of this many (exact: each chunk
  // attends to the cached keys of the previous ones). Sizes the activation scratch.
  int64_t max_step_tokens = 1024;
  // KV-cache pool shared by the model's sequences, in tokens. 0: what gpu_memory_utilization
  // leaves after the weights and scratch (at most max_batch_size sequences of max_seq_len), or
  // with gpu_memory_utilization 0 two sequences of max_seq_len.
  int64_t kv_cache_tokens = 0;
  double gpu_memory_utilization = 0;  // fraction of each GPU's memory lowbit may fill (vLLM's flag)
  int block_size = 16;  // tokens per KV-cache block
  int64_t max_batch_size = 256;  // sequences in one forward_batch() call
  // Decode steps (one token) replayed from CUDA graphs captured per context-length bucket.
  bool cuda_graphs = true;
};

class GpuModel;

// The KV cache of one sequence: blocks of the model's pool, returned when the sequence is cleared
// or destroyed. Move-only; may outlive its model (its blocks then go nowhere).
class GpuSequence {
 public:
  GpuSequence();
  ~GpuSequence();
  GpuSequence(GpuSequence&&) noexcept;
  GpuSequence& operator=(GpuSequence&&) noexcept;
  GpuSequence(const GpuSequence&) = delete;
  GpuSequence& operator=(const GpuSequence&) = delete;

  int64_t length() const;  // tokens cached (the next position)
  void clear();            // forgets every token and returns the blocks
  void truncate(int64_t n);  // keeps the first n tokens (n <= length())

  struct State;

 private:
  friend class GpuModel;
  std::unique_ptr<State> state_;
};

class GpuModel {
 public:
  // Uploads `cpu_model`'s weights to the device and allocates the KV pool and scratch. The CPU
  // model must outlive the GpuModel (its config and RoPE are used at every step). Throws
  // Unsupported (no usable device, an unsupported layer: named), OutOfMemory (naming what did not
  // fit), InvalidArgument (bad options).
  static std::unique_ptr<GpuModel> load(const models::Model& cpu_model,
                                        const GpuModelOptions& options = {});
  ~GpuModel();
  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

  GpuSequence new_sequence();

  // Runs `tokens` at positions sequence.length() .. + n - 1 and returns fp32 logits on the host,
  // [n, vocab] (all_logits) or [1, vocab] (the last position), like models::Model::forward. Ids
  // outside [0, vocab), an empty span, a sequence longer than max_seq_len or a full KV pool:
  // InvalidArgument / OutOfMemory, the sequence unchanged.
  Tensor forward(std::span<const int32_t> tokens, GpuSequence& sequence, bool all_logits);

  struct BatchItem {
    std::span<const int32_t> tokens;  // new tokens, after the sequence's cached ones
    GpuSequence* sequence = nullptr;
    bool all_logits = false;  // logits of every new token, else of the last
    // Greedy decoding without logprobs: only the argmax of the last row is wanted. The item's
    // result is then an I32 tensor [1] holding that token id (chosen on the device, the lowest id
    // on a tie like runtime::argmax), and its logits never cross to the host.
    bool argmax_only = false;
  };
  // Several sequences' new tokens in one pass (what continuous batching runs each step): every
  // linear layer reads its weights once for all rows, attention runs per sequence on its own
  // blocks. Returns each item's logits as forward() would ([n, vocab] or [1, vocab]; argmax_only
  // items: the token id, I32 [1]), equal to
  // them up to GEMM summation order (cuBLASLt picks kernels by row count, as on any GPU). The
  // rows of all items must fit max_step_tokens and the items max_batch_size; each sequence at
  // most once. All or nothing: on an error no sequence changes. Models whose RoPE changes with
  // the call length (dynamic, longrope) run item by item through forward().
  std::vector<Tensor> forward_batch(std::span<const BatchItem> items);

  const models::Model& cpu_model() const;
  const GpuModelOptions& options() const;  // with the 0 defaults resolved
  std::string device_name() const;  // "NVIDIA H200" or "2 x NVIDIA H200"
  int tensor_parallel_size() const;
  // Device bytes a batch-1 decode step reads as weights: every linear layer, norm and the LM head
  // once, plus one embedding row; summed over the GPUs (each reads its own part).
  double weight_bytes_per_token() const;
  size_t weight_device_bytes() const;   // all weights held on the devices (summed)
  size_t kv_cache_device_bytes() const;  // summed over the devices
  // One line: the kernel of each kind of layer, e.g. "qkv/gate_up fused bf16 x 16, wna16 x 56".
  std::string describe() const;

  struct Impl;

 private:
  explicit GpuModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Loads `dir` on the CPU in the form GpuModel::load needs (quantized layers keep their canonical
// weights). Throws Unsupported when no CUDA device is usable, before reading the checkpoint.
std::unique_ptr<models::Model> load_model_for_gpu(const std::string& dir,
                                                  const models::LoadOptions& options, int device);

// Throws Unsupported naming the reason when CUDA device `device` cannot be used ("no CUDA device is
// visible to this process (cudaGetDeviceCount: cudaErrorNoDevice ...)").
void require_device(int device);

// Number of CUDA devices visible (0 when none is usable).
int device_count();

// The device memory's read bandwidth in GB/s, measured by a streaming kernel over a buffer far
// larger than L2 (best of several runs); what bounds a batch-1 decode step.
double measure_device_read_bandwidth_gbps(int device);

}  // namespace lowbit::gpu
