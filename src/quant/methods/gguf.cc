// quant_method "gguf": llama.cpp GGUF files. vLLM picks its "gguf" method for a .gguf model; in
// lowbit no config.json names it either: the model loader reads the file (src/models/gguf_model.h)
// and writes this config itself, listing the projections (q/k/v/o/gate/up/down, lm_head) whose
// GGUF type has the arithmetic of a kernel lowbit already has:
//   {"quant_method": "gguf", "modules": {"model.layers.0.self_attn.q_proj": "Q4_0", ...}}
// Such a module's checkpoint tensor is its GGUF blocks, rows in Hugging Face's order (the loader
// undoes attn_q / attn_k's permutation on whole rows of blocks), under vLLM's name:
//   qweight U8 [out, in / block weights * block bytes]
// and becomes canonical int weights (kernels/quant_weights.h), no float round trip:
//   Q4_0, 18-byte blocks of 32: fp16 d, qs[16]; element j = qs[j] & 15, element j + 16 = qs[j] >> 4;
//         w = (q - 8) * d   → bits 4, group 32, code q, implicit zero 8, scale float(d)
//   Q8_0, 34-byte blocks of 32: fp16 d, int8 qs[32]; w = q * d
//         → bits 8, group 32, code q + 128, implicit zero 128, scale float(d)
//   Q6_K, 210-byte super-blocks of 256 (formats::q6_k_codes): w = d * sc[g] * (q - 32)
//         → bits 6, group 16, code q, implicit zero 32, scale d * sc[g] (exact)
// (code - zero) * scale is the exact product gguf-py's dequantize computes, so the wna16 kernels
// (W4A16 / W8A16 on the GPU) run the file's own numbers; Q6_K takes the CPU's group-16 layout
// (kernels/cpu/wna16_g16.h), one byte per weight. Every other tensor (F32 / F16 / BF16 as stored,
// Q4_1, Q5_0, Q5_1, the other K-quants, the embedding) is decoded at load by the loader and runs
// dense ("gguf_decode" below): no method is returned for those modules.
// `--linear-backend w8a8` (opt-in) runs those int weights on the int8-activation kernels instead:
// x quantized per token to int8 at run time (compressed-tensors' dynamic W8A8 input, as vLLM does),
// int32 dot products, the file's block scales applied per group. llama.cpp's CPU backend also
// multiplies these types by quantized activations (its q8 blocks of 32 or 256, finer than a token);
// the default keeps x in fp32, the arithmetic of the dequantized weights transformers runs.
#include <algorithm>
#include <map>
#include <optional>

#include "core/float_convert.h"
#include "formats/gguf_dequant.h"
#include "lowbit/error.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {
namespace {

enum class GgufIntType { Q4_0, Q8_0, Q6_K };

// The input of `--linear-backend w8a8`: the W8A8 preset's, dynamic per-token symmetric int8.
InputQuant per_token_int8() {
  InputQuant in;
  in.args = *preset_scheme("W8A8", {}).input_activations;
  return in;
}

int64_t block_weights(GgufIntType t) { return t == GgufIntType::Q6_K ? 256 : 32; }
int64_t block_bytes(GgufIntType t) {
  switch (t) {
    case GgufIntType::Q4_0: return 2 + 16;
    case GgufIntType::Q8_0: return 2 + 32;
    case GgufIntType::Q6_K: return 128 + 64 + 16 + 2;
  }
  return 0;
}


class GgufLinear : public KernelLinear {
 public:
  explicit GgufLinear(GgufIntType type) : type_(type) {}

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    const int64_t per_block = block_weights(type_);
    if (info.in_features % per_block != 0) {
      throw InvalidArgument(info.prefix + ": GGUF " + name() + " needs in_features divisible by " +
                            std::to_string(per_block) + ", got " + std::to_string(info.in_features));
    }
    layer.declare(ParamSpec{"qweight",
                            {DType::U8},
                            {info.out_features, info.in_features / per_block * block_bytes(type_)}});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    kernels::IntWeights w;
    w.bits = type_ == GgufIntType::Q4_0 ? 4 : type_ == GgufIntType::Q6_K ? 6 : 8;
    w.rows = info.out_features;
    w.cols = info.in_features;
    w.group_size = type_ == GgufIntType::Q6_K ? 16 : 32;
    w.codes.resize(static_cast<size_t>(w.rows * w.cols));
    w.scales.resize(static_cast<size_t>(w.rows * w.groups()));
    const auto* src = layer.get("qweight").data_as<const uint8_t>();
    if (type_ == GgufIntType::Q6_K) {  // rows are whole super-blocks: block b = r · cols / 256 + c / 256
      for (int64_t b = 0; b < w.rows * w.cols / 256; ++b) {
        formats::q6_k_codes(src + b * block_bytes(type_), w.codes.data() + b * 256,
                            w.scales.data() + b * 16);
      }
      finish_int(layer, std::move(w), input(layer));
      return;
    }
    constexpr int64_t kBlock = 32;
    const int64_t blocks = w.cols / kBlock;
    for (int64_t b = 0; b < w.rows * blocks; ++b) {
      const uint8_t* block = src + b * block_bytes(type_);
      w.scales[static_cast<size_t>(b)] =
          f16_to_f32(static_cast<uint16_t>(block[0] | (block[1] << 8)));  // little-endian fp16
      uint8_t* codes = w.codes.data() + b * kBlock;  // rows are whole blocks: b * 32 = r * cols + c
      const uint8_t* qs = block + 2;
      if (type_ == GgufIntType::Q4_0) {
        for (int64_t j = 0; j < kBlock / 2; ++j) {
          codes[j] = qs[j] & 0x0F;
          codes[j + kBlock / 2] = qs[j] >> 4;
        }
      } else {
        for (int64_t j = 0; j < kBlock; ++j) {
          codes[j] = static_cast<uint8_t>(static_cast<int8_t>(qs[j]) + 128);
        }
      }
    }
    finish_int(layer, std::move(w), input(layer));
  }

 private:
  static std::optional<InputQuant> input(const LayerParams& layer) {
    if (layer.info().backend == "w8a8") return per_token_int8();
    return std::nullopt;
  }
  std::string name() const {
    return type_ == GgufIntType::Q4_0 ? "Q4_0" : type_ == GgufIntType::Q6_K ? "Q6_K" : "Q8_0";
  }
  GgufIntType type_;
};

class GgufConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object() || !j.contains("modules")) {
      throw InvalidArgument(where +
                            ": quant_method 'gguf' is a file format, not a quantization_config: "
                            "give the .gguf file (or its directory) as the model");
    }
    const nlohmann::json& modules = j.at("modules");
    if (!modules.is_object()) throw InvalidArgument(where + ".modules must be a JSON object");
    auto c = std::make_unique<GgufConfig>();
    for (const auto& [prefix, type] : modules.items()) {
      const std::string t = type.is_string() ? type.get<std::string>() : type.dump();
      if (t == "Q4_0") {
        c->modules_.emplace(prefix, GgufIntType::Q4_0);
      } else if (t == "Q8_0") {
        c->modules_.emplace(prefix, GgufIntType::Q8_0);
      } else if (t == "Q6_K") {
        c->modules_.emplace(prefix, GgufIntType::Q6_K);
      } else {
        throw InvalidArgument(where + ".modules." + prefix + ": GGUF type " + t +
                              " does not run on the int kernels (Q4_0, Q8_0, Q6_K)");
      }
    }
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "gguf";
    d.summary =
        "llama.cpp GGUF files, chosen by the model path (MODEL.gguf), not by "
        "quantization_config: Q4_0 / Q8_0 / Q6_K projections and LM head on the int kernels "
        "(W4A16 / W8A16 group 32, 6-bit group 16), every other tensor type decoded at load as "
        "gguf-py does";
    d.min_capability = 60;  // vLLM's GGUFConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear, LayerKind::LmHead, LayerKind::Embedding};
    for (KernelSpec& k : int_weight_kernels()) {
      if (k.name == "w8a8") {  // activations stay in float unless asked
        k.implements = "opt-in (--linear-backend w8a8, CPU): activations quantized per token to "
                       "int8 at run time, int32 dot products, the file's block scales per group";
        k.opt_in = true;  // the GPU has no int8-activation kernel for group-32 or 4-bit weights
      }
      d.kernels.push_back(std::move(k));
    }
    KernelSpec decode;
    decode.name = "gguf_decode";
    decode.isa = KernelSpec::Isa::Portable;
    decode.implements =
        "Q4_1/Q5_0/Q5_1, Q2_K..Q5_K (and embeddings) decoded at load to f32 (or --dtype bf16 / "
        "f16), dense matmul";
    d.kernels.push_back(decode);
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind != LayerKind::Linear && layer.kind != LayerKind::LmHead) return nullptr;
    const auto it = modules_.find(layer.prefix);
    if (it == modules_.end()) return nullptr;  // decoded at load: a dense layer
    return std::make_unique<GgufLinear>(it->second);
  }

 private:
  std::map<std::string, GgufIntType> modules_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(GgufConfig, "gguf");

}  // namespace lowbit::quant
