// Model: a loaded decoder-only causal LM (any registered architecture) and its CPU forward pass;
// KvCache: the keys and values of one sequence.
//
// Weights stay in their stored dtype (F32 / F16 / BF16), as zero-copy views of the memory-mapped
// safetensors files; all activations and the KV cache are fp32. Linear layers go through
// kernels::matmul, the other ops through kernels/ops.h; OpenMP threads (the caller sets
// omp_set_num_threads) split each op. A Model is immutable after load() and may be shared by
// threads, each with its own KvCache.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "lowbit/tensor.h"
#include "models/arch_registry.h"
#include "models/kv_cache_quant.h"
#include "models/layers/decoder_weights.h"
#include "models/model_config.h"
#include "models/rope.h"

namespace lowbit::models {

// Keys and values of one sequence: per layer, fp32 [capacity, kv_heads, head_dim] each. Either
// growable (capacity doubles as needed) or fixed (new_cache(max_tokens)): a forward that would
// exceed a fixed capacity throws InvalidArgument and leaves the cache unchanged.
class KvCache {
 public:
  KvCache() = default;

  int64_t length() const { return length_; }      // tokens cached (the next position)
  int64_t capacity() const { return capacity_; }  // tokens storable without growing
  bool fixed_capacity() const { return fixed_; }
  void clear() { length_ = 0; }
  // Keeps the first n tokens (n <= length()), e.g. to roll back rejected tokens.
  void truncate(int64_t n);

  int num_layers() const { return static_cast<int>(keys_.size()); }
  int64_t row_size() const { return row_size_; }  // kv_heads * head_dim

  // For the decoder: makes room for `tokens` positions (grows or throws), then raw rows.
  void reserve(int64_t tokens);
  float* keys(int layer) { return keys_[static_cast<size_t>(layer)].data(); }
  float* values(int layer) { return values_[static_cast<size_t>(layer)].data(); }
  void set_length(int64_t n) { length_ = n; }

 private:
  friend class Model;
  KvCache(int layers, int64_t row_size, int64_t capacity, bool fixed);

  int64_t row_size_ = 0;
  int64_t length_ = 0;
  int64_t capacity_ = 0;
  bool fixed_ = false;
  std::vector<std::vector<float>> keys_;
  std::vector<std::vector<float>> values_;
};

// How to build a model: quantization on top of what the checkpoint says, and kernel choice.
struct LoadOptions {
  std::string quantization;    // --quantization: online method, or the checkpoint's own name
  std::string linear_backend;  // --linear-backend: force a kernel family (error if it cannot run)
  // --dtype: what quantized layers that dequantize (the dequant kernel) compute in; "auto" = the
  // checkpoint's float dtype (the embedding's). Activations are fp32 on the CPU either way.
  std::string dtype = "auto";
  KvCacheOptions kv_cache;  // --kv-cache-dtype, --calculate-kv-scales, --kv-cache-dtype-skip-layers
};

class Model {
 public:
  // Reads dir/config.json (+ generation_config.json) and the safetensors checkpoint in dir; the
  // quantization method comes from the checkpoint (quant/methods/resolve.h) and `options`.
  static std::unique_ptr<Model> load(const std::string& dir, const LoadOptions& options = {});

  // "compressed-tensors (checkpoint)", "fp8 (online)", "none (unquantized)".
  const std::string& quantization() const { return quantization_; }
  // The KV-cache quantizer, null for a full-precision cache.
  const KvCacheQuantizer* kv_cache_quantizer() const { return kv_quant_.get(); }

  const ModelConfig& config() const { return config_; }
  const ArchSpec& spec() const { return *spec_; }

  // max_tokens > 0: fixed capacity, allocated now; 0: grows as needed.
  KvCache new_cache(int64_t max_tokens = 0) const;

  // Runs `tokens` at positions cache.length() .. cache.length() + n - 1, appends their keys and
  // values to the cache and returns fp32 logits [n, vocab] (all_logits) or [1, vocab] (the last
  // position). Ids outside [0, vocab) or an empty span: InvalidArgument, cache unchanged.
  Tensor forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const;

  // True when generation should drop the cache and re-run the whole sequence before processing
  // position total_length - 1 with `cached` tokens in the cache: what transformers' Phi3 generate
  // does when a longrope model first grows past original_max_position_embeddings.
  bool needs_reprefill(int64_t cached, int64_t total_length) const;

  struct TensorInfo {
    std::string name;
    DType dtype;
    Shape shape;
  };
  struct Summary {
    std::string architecture;
    int64_t parameters = 0;                         // elements of all checkpoint tensors
    std::map<std::string, int64_t> bytes_by_dtype;  // "BF16" → bytes
    std::vector<TensorInfo> tensors;                // sorted by name
    std::vector<std::string> unused_tensors;  // present in the checkpoint, not used by the model
  };
  Summary summary() const;

  const DecoderWeights& weights() const { return weights_; }
  const RotaryEmbedding& rotary() const { return *rope_; }
  const formats::Checkpoint& checkpoint() const { return *checkpoint_; }
  const std::string& directory() const { return directory_; }

  // The quantization pipeline replaces weights (smoothing, fake-quantized values) in place. Only
  // before the model is shared with other threads.
  DecoderWeights& mutable_weights() { return weights_; }

 private:
  Model() = default;

  ModelConfig config_;
  const ArchSpec* spec_ = nullptr;
  std::unique_ptr<formats::Checkpoint> checkpoint_;
  DecoderWeights weights_;
  std::unique_ptr<RotaryEmbedding> rope_;
  std::vector<std::string> unused_tensors_;
  std::string directory_;
  std::string quantization_;
  std::unique_ptr<KvCacheQuantizer> kv_quant_;
};

}  // namespace lowbit::models
