#include "models/kv_cache_quant.h"

#include <algorithm>
#include <cmath>

#include "core/float_convert.h"
#include "core/log.h"
#include "lowbit/error.h"

namespace lowbit::models {
namespace {

// vLLM's K_SCALE_CONSTANT and V_SCALE_CONSTANT: --calculate-kv-scales divides the first batch's
// absolute maximum by these (not by 448), leaving headroom for later, larger values.
constexpr float kKeyRange = 200.0f;
constexpr float kValueRange = 100.0f;

// fp32 → fp8 e5m2 (IEEE-like: 2 mantissa bits, bias 15, max 57344), round to nearest even in one
// step (going through fp16 would round twice). Callers clamp to ±57344 first, so no overflow.
uint8_t f32_to_fp8_e5m2(float f) {
  const uint32_t bits = f32_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits > 0x7F800000) return sign | 0x7F;  // NaN
  if (abs_bits < 0x38800000) {                    // below 2^-14, the smallest normal: step 2^-16
    return sign | static_cast<uint8_t>(std::nearbyint(bits_to_f32(abs_bits) * 65536.0f));
  }
  const uint32_t rounding = 0xFFFFF + ((abs_bits >> 21) & 1);
  const uint32_t code = ((abs_bits + rounding) >> 21) - ((127 - 15) << 2);
  return static_cast<uint8_t>(sign | std::min<uint32_t>(code, 0x7C));
}

std::vector<float> read_scale(const formats::Checkpoint& checkpoint, const std::string& name,
                              int64_t kv_heads, std::set<std::string>& used) {
  const Tensor t = checkpoint.get(name).to_f32();
  if (t.numel() != 1 && t.numel() != kv_heads) {
    throw InvalidArgument(checkpoint.file_of(name) + ": tensor '" + name + "' has shape " +
                          t.shape_string() + "; a KV-cache scale holds 1 value or one per KV head (" +
                          std::to_string(kv_heads) + ")");
  }
  std::vector<float> v(t.data_as<const float>(), t.data_as<const float>() + t.numel());
  for (float s : v) {
    if (!(s > 0.0f) || !std::isfinite(s)) {
      throw InvalidArgument(checkpoint.file_of(name) + ": tensor '" + name +
                            "' holds a scale that is not a positive finite number");
    }
  }
  used.insert(name);
  return v;
}

}  // namespace

KvCacheQuantizer::KvCacheQuantizer(const KvCacheOptions& options, const ModelConfig& config,
                                   const ArchSpec& spec, const formats::Checkpoint& checkpoint,
                                   std::set<std::string>& used) {
  const std::string& d = options.dtype;
  if (d == "auto" || d.empty() || d == "bfloat16" || d == "float16" || d == "float32") {
    if (options.calculate_scales || !options.skip_layers.empty()) {
      throw InvalidArgument("--calculate-kv-scales and --kv-cache-dtype-skip-layers need "
                            "--kv-cache-dtype fp8");
    }
    return;  // the CPU cache holds fp32 values: every float dtype is at least as precise
  }
  if (d != "fp8" && d != "fp8_e4m3" && d != "fp8_e5m2") {
    throw InvalidArgument("--kv-cache-dtype '" + d +
                          "': expected auto, fp8, fp8_e4m3 or fp8_e5m2");
  }
  fp8_ = true;
  e5m2_ = d == "fp8_e5m2";
  calculate_ = options.calculate_scales;
  kv_heads_ = config.num_kv_heads;
  head_dim_ = config.head_dim;
  const size_t layers = static_cast<size_t>(config.num_layers);
  skip_.assign(layers, false);
  for (const std::string& entry : options.skip_layers) {
    if (entry == "sliding_window") {
      for (size_t l = 0; l < layers; ++l) skip_[l] = skip_[l] || config.sliding_window[l] > 0;
      continue;
    }
    size_t end = 0;
    long index = -1;
    try {
      index = std::stol(entry, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    if (end != entry.size() || index < 0 || index >= static_cast<long>(layers)) {
      throw InvalidArgument("--kv-cache-dtype-skip-layers: '" + entry +
                            "' is neither a layer index in [0, " + std::to_string(layers) +
                            ") nor sliding_window");
    }
    skip_[static_cast<size_t>(index)] = true;
  }
  calibrated_.assign(layers, !calculate_);
  k_scale_.assign(layers, {1.0f});
  v_scale_.assign(layers, {1.0f});
  if (calculate_) return;
  int missing = 0;
  for (size_t l = 0; l < layers; ++l) {
    const std::string p = spec.names.layer_prefix + std::to_string(l) + ".self_attn.";
    auto first = [&](std::initializer_list<std::string> names) -> std::string {
      for (const std::string& n : names) {
        if (checkpoint.has(p + n)) return p + n;
      }
      return "";
    };
    const std::string k = first({"k_scale", "attn.k_scale", "k_proj.k_scale", "k_proj.output_scale"});
    const std::string v = first({"v_scale", "attn.v_scale", "v_proj.v_scale", "v_proj.output_scale"});
    const std::string legacy = first({"kv_scale"});
    if (!k.empty() && !v.empty()) {
      k_scale_[l] = read_scale(checkpoint, k, kv_heads_, used);
      v_scale_[l] = read_scale(checkpoint, v, kv_heads_, used);
    } else if (!k.empty() || !v.empty() || !legacy.empty()) {
      // vLLM: one scale for both (legacy kv_scale) → the larger serves keys and values.
      const std::vector<float> s = read_scale(checkpoint, !k.empty() ? k : !v.empty() ? v : legacy,
                                              kv_heads_, used);
      k_scale_[l] = v_scale_[l] = s;
    } else {
      ++missing;
    }
  }
  if (missing > 0) {
    log_warn(checkpoint.path() + ": no KV-cache scales for " + std::to_string(missing) + " of " +
             std::to_string(layers) + " layers; using KV cache scaling factor 1.0 (quantize with "
             "--kv-cache fp8, or pass --calculate-kv-scales)");
  }
}

std::string KvCacheQuantizer::describe() const {
  if (!fp8_) return "auto (fp32 on the CPU)";
  const int64_t layers = static_cast<int64_t>(skip_.size());
  const int64_t on = std::count(skip_.begin(), skip_.end(), false);
  return std::string(e5m2_ ? "fp8_e5m2" : "fp8_e4m3") +
         (calculate_ ? " (scales from the first batch)" : "") + ", " + std::to_string(on) + " of " +
         std::to_string(layers) + " layers";
}

std::vector<float> KvCacheQuantizer::k_scale(int64_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return k_scale_[static_cast<size_t>(layer)];
}

std::vector<float> KvCacheQuantizer::v_scale(int64_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return v_scale_[static_cast<size_t>(layer)];
}

void KvCacheQuantizer::round_rows(float* x, int64_t rows, const std::vector<float>& scale,
                                  uint8_t* codes) const {
  const int64_t width = kv_heads_ * head_dim_;
  const float max = e5m2_ ? 57344.0f : 448.0f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < width; ++i) {
      const float s = scale.size() == 1 ? scale[0] : scale[static_cast<size_t>(i / head_dim_)];
      float& value = x[r * width + i];
      const float q = std::clamp(value / s, -max, max);
      const uint8_t code = e5m2_ ? f32_to_fp8_e5m2(q) : f32_to_fp8_e4m3(q);
      value = (e5m2_ ? fp8_e5m2_to_f32(code) : fp8_e4m3_to_f32(code)) * s;
      if (codes != nullptr) codes[r * width + i] = code;
    }
  }
}

void KvCacheQuantizer::quantize(int64_t layer, float* k, float* v, int64_t rows, uint8_t* k_codes,
                                uint8_t* v_codes) const {
  if (!quantizes(layer)) return;
  const size_t l = static_cast<size_t>(layer);
  if (calculate_) {
    // Scales change only here, once per layer, under the lock; without --calculate-kv-scales
    // they are fixed at load and every call reads them without locking or copying.
    std::lock_guard<std::mutex> lock(mutex_);
    if (!calibrated_[l]) {
      float kmax = 0.0f, vmax = 0.0f;
      for (int64_t i = 0; i < rows * kv_heads_ * head_dim_; ++i) {
        kmax = std::max(kmax, std::fabs(k[i]));
        vmax = std::max(vmax, std::fabs(v[i]));
      }
      k_scale_[l] = {kmax > 0.0f ? kmax / kKeyRange : 1.0f};
      v_scale_[l] = {vmax > 0.0f ? vmax / kValueRange : 1.0f};
      calibrated_[l] = true;
    }
  }
  round_rows(k, rows, k_scale_[l], k_codes);
  round_rows(v, rows, v_scale_[l], v_codes);
}

}  // namespace lowbit::models
