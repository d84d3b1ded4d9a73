// KV-cache quantization (--kv-cache-dtype fp8 | fp8_e4m3 | fp8_e5m2): every key and value is
// rounded to fp8 with its layer's scale as it is written to the cache, x → fp8(x / s) · s, which is
// exactly what an fp8 cache stores and attention reads back. (Model::forward's contiguous cache keeps
// the rounded values in fp32; the paged cache of the serving engine stores the fp8 bytes, one per
// value, and attention decodes them with the same scales: the same values, a quarter of the memory.)
//
// Scales, as vLLM resolves them: from the checkpoint (compressed-tensors' self_attn.k_scale /
// v_scale, per tensor or per KV head; vLLM's k_proj.output_scale / legacy kv_scale names), else
// 1.0 with a warning; --calculate-kv-scales instead takes them from the first forward pass
// (max|k| / 200, max|v| / 100: vLLM's K_SCALE_CONSTANT / V_SCALE_CONSTANT). Layers named in
// --kv-cache-dtype-skip-layers (indices, or "sliding_window") keep a full-precision cache.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "models/arch_registry.h"
#include "models/model_config.h"

namespace lowbit::models {

struct KvCacheOptions {
  std::string dtype = "auto";  // auto | fp8 | fp8_e4m3 | fp8_e5m2
  bool calculate_scales = false;
  std::vector<std::string> skip_layers;  // "3", "17", "sliding_window"
};

class KvCacheQuantizer {
 public:
  // Throws InvalidArgument for an unknown dtype, a bad skip entry or a mis-shaped scale tensor
  // (naming it). Scale tensors it reads are added to `used`.
  KvCacheQuantizer(const KvCacheOptions& options, const ModelConfig& config, const ArchSpec& spec,
                   const formats::Checkpoint& checkpoint, std::set<std::string>& used);

  bool active() const { return fp8_; }
  bool quantizes(int64_t layer) const { return fp8_ && !skip_[static_cast<size_t>(layer)]; }
  std::string describe() const;  // "fp8_e4m3 (scales from the checkpoint), 8 of 8 layers"

  // Rounds `rows` new cache rows of `layer` in place: k and v are [rows, kv_heads * head_dim].
  // With --calculate-kv-scales the first call of each layer fixes its scales first. k_codes /
  // v_codes (optional, [rows, kv_heads * head_dim]) receive the fp8 codes of the same values:
  // decode(code) · scale is the rounded value, bit for bit.
  void quantize(int64_t layer, float* k, float* v, int64_t rows, uint8_t* k_codes = nullptr,
                uint8_t* v_codes = nullptr) const;

  bool e5m2() const { return e5m2_; }
  // The scales attention decodes codes with (1 value, or one per KV head). Valid until the next
  // quantize() of the layer (which may set them, with --calculate-kv-scales, on its first call).
  const std::vector<float>& key_scales(int64_t layer) const { return k_scale_[static_cast<size_t>(layer)]; }
  const std::vector<float>& value_scales(int64_t layer) const { return v_scale_[static_cast<size_t>(layer)]; }

  // The scales in use (one per tensor, or one per KV head), for tests and reports.
  std::vector<float> k_scale(int64_t layer) const;
  std::vector<float> v_scale(int64_t layer) const;

 private:
  void round_rows(float* x, int64_t rows, const std::vector<float>& scale, uint8_t* codes) const;

  bool fp8_ = false;
  bool e5m2_ = false;
  bool calculate_ = false;
  int64_t kv_heads_ = 0, head_dim_ = 0;
  std::vector<bool> skip_;
  mutable std::mutex mutex_;            // guards the scales while --calculate-kv-scales fills them
  mutable std::vector<bool> calibrated_;
  mutable std::vector<std::vector<float>> k_scale_, v_scale_;
};

}  // namespace lowbit::models
