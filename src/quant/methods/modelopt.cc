// quant_method "modelopt" (alias "modelopt_fp4", vLLM's name for the NVFP4 variant): checkpoints
// NVIDIA Model Optimizer writes with export_hf_checkpoint (nvidia-modelopt 0.47). Its config is
// config.json's quantization_config {quant_method "modelopt", quant_algo, ignore, group_size?,
// producer, config_groups} and/or hf_quant_config.json {producer {name "modelopt"}, quantization
// {quant_algo, exclude_modules, group_size, kv_cache_quant_algo}}; both shapes are read.
// Per quantized Linear [out N, in K]:
//   quant_algo "FP8":   weight F8_E4M3 [N, K], weight_scale F32 (one value), input_scale F32 (one
//                       value): w = fp8 · weight_scale, inputs statically quantized to fp8 with
//                       input_scale → the fp8 kernels, as vLLM's ModelOptFp8 runs it.
//   quant_algo "NVFP4": weight U8 [N, K/2] (two e2m1 codes per byte, the first in the low nibble),
//                       weight_scale F8_E4M3 [N, K/16], weight_scale_2 F32 (one value), input_scale
//                       F32: w = e2m1 · fp32(weight_scale · weight_scale_2) (ModelOpt's
//                       NVFP4QTensor.dequantize order). CPUs have no fp4 arithmetic: the weight is
//                       dequantized once (the dequant kernel, as compressed-tensors NVFP4) and the
//                       inputs stay in float, i.e. a weight-only emulation; input_scale (the
//                       W4A4 activation global scale on Blackwell GPUs) is read but not applied.
// ignore / exclude_modules entries: an exact module name, a prefix of it ("model.layers.0"), or an
// fnmatch pattern with '*' ("*mlp.gate"), as vLLM's ModelOpt config matches them.
#include <cmath>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/methods/online_linear.h"
#include "quant/scheme/packing.h"

namespace lowbit::quant {
namespace {

enum class Algo { Fp8, Nvfp4 };

const std::vector<DType> kScaleDtypes = {DType::F32, DType::BF16, DType::F16};

// One value of a scalar tensor (shape [] or [1]), finite and positive.
float scalar_scale(const LayerParams& layer, const std::string& name) {
  const Tensor t = layer.get(name).to_f32();
  if (t.numel() != 1) {
    throw InvalidArgument(layer.describe(name) + " must hold one value (per-tensor scale), it has " +
                          t.shape_string());
  }
  const float v = t.data_as<const float>()[0];
  if (!std::isfinite(v) || v <= 0.0f) {
    throw InvalidArgument(layer.describe(name) + " holds " + std::to_string(v) +
                          ", not a positive finite scale");
  }
  return v;
}

class ModelOptFp8Linear : public KernelLinear {
 public:
  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    layer.declare(ParamSpec{"weight", {DType::F8_E4M3}, {info.out_features, info.in_features}});
    layer.declare(ParamSpec{"weight_scale", kScaleDtypes, {}});
    layer.declare(ParamSpec{"input_scale", kScaleDtypes, {}});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    kernels::Fp8Weights w;
    w.rows = info.out_features;
    w.cols = info.in_features;
    w.block_rows = w.rows;
    w.block_cols = w.cols;
    const Tensor codes = layer.get("weight");
    w.codes.assign(codes.data_as<const uint8_t>(), codes.data_as<const uint8_t>() + codes.numel());
    w.scales = {scalar_scale(layer, "weight_scale")};
    InputQuant input;
    input.args = fp8_dynamic_input_args(Strategy::Tensor);
    input.args.dynamic = DynamicMode::Static;
    input.static_scale = scalar_scale(layer, "input_scale");
    finish_fp8(layer, std::move(w), input);
  }
};

class ModelOptNvfp4Linear : public KernelLinear {
 public:
  explicit ModelOptNvfp4Linear(int64_t group) : group_(group) {}

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    if (info.in_features % group_ != 0) {
      throw Unsupported(info.prefix + ": NVFP4 needs in_features (" +
                        std::to_string(info.in_features) + ") divisible by the group size " +
                        std::to_string(group_));
    }
    layer.declare(ParamSpec{"weight", {DType::U8}, {info.out_features, info.in_features / 2}});
    layer.declare(
        ParamSpec{"weight_scale", {DType::F8_E4M3}, {info.out_features, info.in_features / group_}});
    layer.declare(ParamSpec{"weight_scale_2", kScaleDtypes, {}});
    layer.declare(ParamSpec{"input_scale", kScaleDtypes, {}, false});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    const int64_t n = info.out_features, k = info.in_features, groups = k / group_;
    const float global = scalar_scale(layer, "weight_scale_2");
    const std::vector<uint8_t> codes =
        unpack_fp4_rows(layer.get("weight").data_as<const uint8_t>(), n, k);
    const uint8_t* scales = layer.get("weight_scale").data_as<const uint8_t>();
    std::vector<float> values(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const float local = fp8_e4m3_to_f32(scales[r * groups + g]);
        if (!std::isfinite(local)) {
          throw InvalidArgument(layer.describe("weight_scale") + " holds a NaN at [" +
                                std::to_string(r) + ", " + std::to_string(g) + "]");
        }
        const float block = local * global;  // fp32, rounded once, as ModelOpt does
        for (int64_t c = g * group_; c < (g + 1) * group_; ++c) {
          const size_t i = static_cast<size_t>(r * k + c);
          values[i] = fp4_value(codes[i]) * block;
        }
      }
    }
    finish_dequant(layer, values, std::nullopt);
  }

 private:
  int64_t group_;
};

class ModelOptConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<ModelOptConfig>();
    // hf_quant_config.json nests the settings under "quantization".
    const bool nested = j.contains("quantization");
    const nlohmann::json& q = nested ? j.at("quantization") : j;
    const std::string field = nested ? where + ".quantization" : where;
    if (!q.is_object()) throw InvalidArgument(field + " must be a JSON object");
    if (!q.contains("quant_algo") || !q.at("quant_algo").is_string()) {
      throw InvalidArgument(field + ".quant_algo is missing or not a string");
    }
    const std::string algo = q.at("quant_algo").get<std::string>();
    if (algo == "FP8") {
      c->algo_ = Algo::Fp8;
    } else if (algo == "NVFP4") {
      c->algo_ = Algo::Nvfp4;
    } else {
      throw Unsupported(field + ".quant_algo '" + algo +
                        "' is not supported (supported: FP8, NVFP4; not yet FP8 per-channel / "
                        "block, INT4_AWQ, W4A8_AWQ, INT8_SQ, MXFP8, MIXED_PRECISION)");
    }
    if (q.contains("group_size") && !q.at("group_size").is_null()) {
      c->group_ = int_field(q, {"group_size"}, field);
      if (c->group_ <= 0 || c->group_ % 2 != 0) {
        throw InvalidArgument(field + ".group_size must be a positive even integer");
      }
    }
    c->exclude_ = string_list_field(q, {"exclude_modules", "ignore"}, field);
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "modelopt";
    d.summary = "NVIDIA ModelOpt exports: FP8 per-tensor (static inputs), NVFP4 (weight-only on CPU)";
    d.min_capability = 75;  // vLLM: 80 for FP8 (ModelOptFp8Config), 75 for NVFP4
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear, LayerKind::Experts};
    d.config_filenames = {"hf_quant_config.json"};
    d.kernels = fp8_weight_kernels();  // fp8, dequant (NVFP4 uses dequant)
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind != LayerKind::Linear && layer.kind != LayerKind::Experts) return nullptr;
    if (excluded(layer.prefix)) return nullptr;
    if (algo_ == Algo::Fp8) return std::make_unique<ModelOptFp8Linear>();
    return std::make_unique<ModelOptNvfp4Linear>(group_);
  }

 private:
  bool excluded(const std::string& prefix) const {
    for (const std::string& e : exclude_) {
      if (e.find_first_of("*?") != std::string::npos) {
        if (glob_match(e, prefix)) return true;
      } else if (prefix == e || prefix.rfind(e + ".", 0) == 0) {
        return true;
      }
    }
    return false;
  }

  Algo algo_ = Algo::Fp8;
  int64_t group_ = 16;
  std::vector<std::string> exclude_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(ModelOptConfig, "modelopt");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(ModelOptConfig, "modelopt_fp4");

}  // namespace lowbit::quant
