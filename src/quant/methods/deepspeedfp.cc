// quant_method "deepspeedfp": vLLM's DeepSpeedFPConfig (vllm/model_executor/layers/quantization/
// deepspeedfp.py, in vLLM until mid-2025). Its checkpoints are ordinary bf16 checkpoints: vLLM's
// weight loader hands each Linear's bf16 `weight` to DeepSpeed's FP_Quantize, keeps the packed
// FP8 / FP6 groups, and dequantizes them to bf16 for F.linear on every forward. Config (config.json
// quantization_config, or quant_config.json / quantize_config.json with quant_method
// "deepspeedfp"): `bits` 8 or 6 and `group_size`, both required as vLLM's from_config requires
// them; `--quantization deepspeedfp` on a bf16 checkpoint uses DeepSpeedFPConfig's defaults (8
// bits, groups of 512). Only decoder Linear layers (vLLM's LinearBase): no LM head, embedding or
// experts.
//
// The DeepSpeed format is not e4m3fn (its fp8 reaches 480 and its groups always hold that code),
// and vLLM multiplies in bf16 after rounding code x scale to bf16, so no fp8 kernel reproduces it:
// the weight is quantized and dequantized once at load exactly as DeepSpeed does
// (deepspeedfp.h), then runs on the dequant kernel.
#include "quant/methods/deepspeedfp.h"

#include <algorithm>
#include <cstring>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"

namespace lowbit::quant {
namespace deepspeedfp {

FpFormat format_for_bits(int bits) {
  // q_range as fp_quantize.cpp sets it: the largest value of each format (no inf / NaN codes).
  if (bits == 8) return FpFormat{8, 3, 4, 480.0f};
  if (bits == 6) return FpFormat{6, 2, 3, 28.0f};
  throw InvalidArgument("DeepSpeedFP quantizes to 8 or 6 bits, not " + std::to_string(bits));
}

// apply_quantization's arithmetic on the fp32 bit pattern (23 mantissa, 8 exponent bits), in the
// kernel's unsigned 32-bit integers, including their wrap-around: that is what gives exact zeros
// their code.
uint8_t encode(float scaled, const FpFormat& f) {
  const int qm = f.mantissa_bits, qe = f.exponent_bits, drop = 23 - qm;
  const uint32_t bits = f32_to_bits(scaled);
  const uint32_t sign = bits >> 31;
  const uint32_t exponent = (bits >> 23) & 0xFFu;
  uint32_t mantissa = bits & 0x7FFFFFu;
  uint32_t dst_exponent = exponent;
  const uint32_t dropped = (1u << drop) - 1;
  mantissa += 1u << (drop - 1);  // round half away from zero
  if ((mantissa & ~dropped) == (1u << 23)) dst_exponent += 1;
  if (exponent != 0) {
    const uint32_t max_exponent = (1u << (qe - 1)) + (1u << 7);
    const uint32_t min_exponent = (1u << 7) - ((1u << (qe - 1)) - 1);
    if (dst_exponent > max_exponent) {
      dst_exponent = max_exponent;
      mantissa = ((~0u) >> (32 - qm)) << 1;  // masked away below, as in the kernel
    }
    if (dst_exponent < min_exponent) {
      dst_exponent = min_exponent;
      mantissa = 0;
    }
  }
  const uint32_t q_mantissa = (mantissa & (((1u << qm) - 1) << drop)) >> drop;
  if (dst_exponent != (1u << qe) - 1) {
    dst_exponent = (dst_exponent - 127u) + (1u << (qe - 1)) - 1;
  }
  return static_cast<uint8_t>((sign << (qe + qm)) | (dst_exponent << qm) | q_mantissa);
}

float decode(uint8_t code, const FpFormat& f) {
  // apply_dequantization: the code's fields moved into a bf16 bit pattern.
  const int qm = f.mantissa_bits, qe = f.exponent_bits;
  const uint32_t sign = (code >> (qm + qe)) & 1u;
  uint32_t exponent = (code >> qm) & ((1u << qe) - 1);
  const uint32_t mantissa = code & ((1u << qm) - 1);
  exponent = exponent - ((1u << (qe - 1)) - 1) + 127u;
  return bf16_to_f32(
      static_cast<uint16_t>((sign << 15) | (exponent << 7) | (mantissa << (7 - qm))));
}

int64_t packed_group_bytes(int64_t group_size, const FpFormat& f) {
  return group_size * f.bits / 8 + 4;
}

namespace {

void check_sizes(int64_t n, int64_t group_size, const FpFormat& f) {
  if (group_size <= 0 || n % group_size != 0 || (group_size * f.bits) % 8 != 0) {
    throw InvalidArgument("DeepSpeedFP: " + std::to_string(n) +
                          " values do not split into groups of " + std::to_string(group_size));
  }
}

}  // namespace

std::vector<uint8_t> quantize(const uint16_t* bf16, int64_t n, int64_t group_size,
                              const FpFormat& f) {
  check_sizes(n, group_size, f);
  const int64_t groups = n / group_size, stride = packed_group_bytes(group_size, f);
  const uint32_t mask = (1u << f.bits) - 1;
  std::vector<uint8_t> packed(static_cast<size_t>(groups * stride), 0);
#pragma omp parallel for schedule(static) if (groups >= 64)
  for (int64_t g = 0; g < groups; ++g) {
    const uint16_t* x = bf16 + g * group_size;
    uint8_t* out = packed.data() + g * stride;
    float absmax = 0.0f;
    for (int64_t i = 0; i < group_size; ++i)
      absmax = std::max(absmax, std::fabs(bf16_to_f32(x[i])));
    const float scale = absmax / f.q_range;
    std::memcpy(out + group_size * f.bits / 8, &scale, 4);
    if (absmax == 0.0f) continue;  // all codes 0: the zero scale makes every value 0
    const float multiplier = f.q_range / absmax;
    for (int64_t i = 0; i < group_size; ++i) {
      // encode's fp6 codes never reach bits 6-7, even for zeros, so the mask changes nothing.
      const uint32_t code = encode(bf16_to_f32(x[i]) * multiplier, f) & mask;
      const int64_t bit = i * f.bits;
      // An fp6 code may straddle two bytes: the kernel ORs it into a little-endian word.
      const uint32_t shifted = code << (bit % 8);
      out[bit / 8] |= static_cast<uint8_t>(shifted);
      if (shifted > 0xFFu) out[bit / 8 + 1] |= static_cast<uint8_t>(shifted >> 8);
    }
  }
  return packed;
}

std::vector<uint16_t> dequantize(const uint8_t* packed, int64_t n, int64_t group_size,
                                 const FpFormat& f) {
  check_sizes(n, group_size, f);
  const int64_t groups = n / group_size, stride = packed_group_bytes(group_size, f);
  const uint32_t mask = (1u << f.bits) - 1;
  std::vector<uint16_t> out(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (groups >= 64)
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* in = packed + g * stride;
    float scale;
    std::memcpy(&scale, in + group_size * f.bits / 8, 4);
    for (int64_t i = 0; i < group_size; ++i) {
      const int64_t bit = i * f.bits;
      uint32_t word = in[bit / 8];
      if (bit % 8 + f.bits > 8) word |= static_cast<uint32_t>(in[bit / 8 + 1]) << 8;
      const uint8_t code = static_cast<uint8_t>((word >> (bit % 8)) & mask);
      out[static_cast<size_t>(g * group_size + i)] = f32_to_bf16(decode(code, f) * scale);
    }
  }
  return out;
}

}  // namespace deepspeedfp

namespace {

// DeepSpeedFPConfig's constructor defaults, used when the method is asked for by name.
constexpr int kDefaultBits = 8;
constexpr int64_t kDefaultGroup = 512;
// apply_quantization loads 8 bf16 values per thread (16-byte vectors) and is instantiated for at
// most 6 passes of a 32-thread warp: longer groups are never launched (vLLM would keep garbage).
constexpr int64_t kMaxGroup = 6 * 32 * 8;

class DeepSpeedFpLinear : public KernelLinear {
 public:
  DeepSpeedFpLinear(deepspeedfp::FpFormat format, int64_t group) : format_(format), group_(group) {}

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    // FP_Quantize.quantize asserts bf16 input.
    layer.declare(ParamSpec{"weight", {DType::BF16}, {info.out_features, info.in_features}});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const Tensor& w = layer.get("weight");
    const int64_t n = w.numel(), cols = layer.info().in_features;
    if (n % group_ != 0) {
      throw InvalidArgument(layer.describe("weight") + " has " + std::to_string(n) +
                            " values, not a multiple of DeepSpeedFP's group_size " +
                            std::to_string(group_));
    }
    const uint16_t* x = w.data_as<const uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      if ((x[i] & 0x7F80u) == 0x7F80u) {
        throw InvalidArgument(layer.describe("weight") + " holds a non-finite value at [" +
                              std::to_string(i / cols) + ", " + std::to_string(i % cols) + "]");
      }
    }
    const std::vector<uint8_t> packed = deepspeedfp::quantize(x, n, group_, format_);
    const std::vector<uint16_t> bf16 = deepspeedfp::dequantize(packed.data(), n, group_, format_);
    std::vector<float> values(bf16.size());
    for (size_t i = 0; i < bf16.size(); ++i) values[i] = bf16_to_f32(bf16[i]);
    finish_dequant(layer, values, std::nullopt);
  }

 private:
  deepspeedfp::FpFormat format_;
  int64_t group_;
};

class DeepSpeedFpConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<DeepSpeedFpConfig>();
    // {} is the request by name (--quantization deepspeedfp); a checkpoint's config names both.
    const int64_t bits = j.empty() ? kDefaultBits : int_field(j, {"bits"}, where);
    c->group_ = j.empty() ? kDefaultGroup : int_field(j, {"group_size"}, where);
    if (bits != 6 && bits != 8) {
      throw Unsupported(where + ".bits is " + std::to_string(bits) +
                        ": DeepSpeedFP quantizes to 8 (fp8 e4m3) or 6 (fp6 e3m2) bits");
    }
    c->format_ = deepspeedfp::format_for_bits(static_cast<int>(bits));
    if (c->group_ <= 0 || c->group_ % 8 != 0 || c->group_ > kMaxGroup) {
      throw InvalidArgument(where + ".group_size is " + std::to_string(c->group_) +
                            ": DeepSpeed's FP quantizer takes groups of a multiple of 8 values, "
                            "at most " +
                            std::to_string(kMaxGroup));
    }
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "deepspeedfp";
    d.summary =
        "DeepSpeed FP8 (e4m3, max 480) / FP6 (e3m2) weight-only groups with fp32 scales: "
        "bf16 weights quantized at load by DeepSpeed's FP_Quantize, run dequantized";
    d.min_capability = 60;  // vLLM's DeepSpeedFPConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear};
    d.config_filenames = {"quant_config.json", "quantize_config.json"};
    d.kernels = dequant_kernels();
    d.online = true;  // it always quantizes bf16 weights at load
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind != LayerKind::Linear) return nullptr;
    return std::make_unique<DeepSpeedFpLinear>(format_, group_);
  }

 private:
  deepspeedfp::FpFormat format_;
  int64_t group_ = kDefaultGroup;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(DeepSpeedFpConfig, "deepspeedfp");

}  // namespace lowbit::quant
