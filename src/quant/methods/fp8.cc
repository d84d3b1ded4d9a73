// quant_method "fp8": vLLM's Fp8Config. On a checkpoint that declares it (what vLLM's own FP8
// export, older llm-compressor "fp8" exports and transformers' FineGrainedFP8 write):
//   per tensor: `weight` float8_e4m3fn [out, in], `weight_scale` fp32 (one value), and with
//     activation_scheme "static" an `input_scale` fp32 (one value); "dynamic": per-tensor input
//     scales computed at run time;
//   block (weight_block_size [bh, bw], DeepSeek-V3 / FineGrainedFP8): `weight_scale_inv` fp32
//     [ceil(out/bh), ceil(in/bw)] (despite the name, the dequantization multiplier), inputs
//     quantized dynamically per 1 x bw group.
// `ignored_layers` (vLLM) or `modules_to_not_convert` (transformers) stay in float.
// `--quantization fp8` on an unquantized checkpoint: online per-tensor fp8 (vLLM's default).
#include <cmath>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/online_linear.h"
#include "quant/methods/skip_list.h"

namespace lowbit::quant {
namespace {

struct Fp8Settings {
  bool serialized = false;  // the checkpoint holds fp8 weights
  bool static_inputs = false;
  int64_t block_rows = 0, block_cols = 0;  // 0: per-tensor
  std::vector<std::string> ignored;
};

class Fp8CheckpointLinear : public KernelLinear {
 public:
  explicit Fp8CheckpointLinear(const Fp8Settings& s) : s_(s) {}

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    layer.declare(ParamSpec{"weight", {DType::F8_E4M3}, {info.out_features, info.in_features}});
    if (s_.block_rows > 0) {
      layer.declare(ParamSpec{"weight_scale_inv", {DType::F32, DType::BF16, DType::F16},
                              {(info.out_features + s_.block_rows - 1) / s_.block_rows,
                               (info.in_features + s_.block_cols - 1) / s_.block_cols}});
    } else {
      layer.declare(ParamSpec{"weight_scale", {DType::F32, DType::BF16, DType::F16}, {}});
      if (s_.static_inputs) {
        layer.declare(ParamSpec{"input_scale", {DType::F32, DType::BF16, DType::F16}, {}});
      }
    }
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    kernels::Fp8Weights w;
    w.rows = info.out_features;
    w.cols = info.in_features;
    const Tensor codes = layer.get("weight");
    w.codes.assign(codes.data_as<const uint8_t>(), codes.data_as<const uint8_t>() + codes.numel());
    const char* scale_name = s_.block_rows > 0 ? "weight_scale_inv" : "weight_scale";
    const Tensor scales = layer.get(scale_name).to_f32();
    w.scales.assign(scales.data_as<const float>(), scales.data_as<const float>() + scales.numel());
    for (float v : w.scales) {
      if (!std::isfinite(v)) {
        throw InvalidArgument(layer.describe(scale_name) + " holds a non-finite scale");
      }
    }
    InputQuant input;
    if (s_.block_rows > 0) {
      w.block_rows = s_.block_rows;
      w.block_cols = s_.block_cols;
      input.args = fp8_dynamic_input_args(Strategy::Group, s_.block_cols);
      if (info.in_features % s_.block_cols != 0) {
        throw Unsupported(info.prefix + ": in_features " + std::to_string(info.in_features) +
                          " is not a multiple of the fp8 block width " +
                          std::to_string(s_.block_cols));
      }
    } else {
      if (w.scales.size() != 1) {
        throw InvalidArgument(layer.describe(scale_name) + " must hold one value, it has " +
                              scales.shape_string());
      }
      w.block_rows = w.rows;
      w.block_cols = w.cols;
      input.args = fp8_dynamic_input_args(Strategy::Tensor);
      if (s_.static_inputs) {
        const Tensor in = layer.get("input_scale").to_f32();
        if (in.numel() != 1) {
          throw InvalidArgument(layer.describe("input_scale") + " must hold one value");
        }
        input.args.dynamic = DynamicMode::Static;
        input.static_scale = in.data_as<const float>()[0];
      }
    }
    finish_fp8(layer, std::move(w), input);
  }

 private:
  Fp8Settings s_;
};

class Fp8Config : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    auto c = std::make_unique<Fp8Config>();
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    Fp8Settings& s = c->s_;
    s.serialized = normalize(string_field(j, {"quant_method"}, "", where)) == "fp8" ||
                   bool_field(j, {"is_checkpoint_fp8_serialized"}, false, where);
    const std::string scheme = string_field(j, {"activation_scheme"}, "dynamic", where);
    if (scheme != "static" && scheme != "dynamic") {
      throw InvalidArgument(where + ".activation_scheme must be \"static\" or \"dynamic\", not \"" +
                            scheme + "\"");
    }
    s.static_inputs = scheme == "static";
    const nlohmann::json block = get_from_keys_or(j, {"weight_block_size"}, nullptr);
    if (!block.is_null()) {
      if (!block.is_array() || block.size() != 2 || !block[0].is_number_integer() ||
          !block[1].is_number_integer() || block[0].get<int64_t>() <= 0 ||
          block[1].get<int64_t>() <= 0) {
        throw InvalidArgument(where + ".weight_block_size must be two positive integers");
      }
      if (s.static_inputs) {
        throw InvalidArgument(where + ": block fp8 needs activation_scheme \"dynamic\"");
      }
      s.block_rows = block[0].get<int64_t>();
      s.block_cols = block[1].get<int64_t>();
    }
    s.ignored = string_list_field(j, {"ignored_layers", "modules_to_not_convert"}, where);
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "fp8";
    d.summary = "vLLM / transformers fp8 checkpoints (per-tensor, 128x128 blocks); online per-tensor";
    d.min_capability = 75;
    d.act_dtypes = {DType::F32, DType::BF16, DType::F16};
    d.layers = {LayerKind::Linear, LayerKind::LmHead, LayerKind::Experts};
    d.kernels = fp8_weight_kernels();
    d.online = true;
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind == LayerKind::Embedding || layer.kind == LayerKind::Attention) return nullptr;
    if (is_ignored(layer.prefix)) return nullptr;
    if (!s_.serialized) {
      if (layer.kind == LayerKind::LmHead) return nullptr;  // online takes Linear layers only
      return std::make_unique<OnlineLinear>(fp8_weight_args(Strategy::Tensor),
                                            fp8_dynamic_input_args(Strategy::Tensor));
    }
    // vLLM's Fp8Config leaves the LM head unquantized; checkpoints store it in float.
    if (layer.kind == LayerKind::LmHead) return nullptr;
    return std::make_unique<Fp8CheckpointLinear>(s_);
  }

 private:
  static std::string normalize(std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }
  bool is_ignored(const std::string& prefix) const { return is_skipped_module(prefix, s_.ignored); }

  Fp8Settings s_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(Fp8Config, "fp8");

}  // namespace lowbit::quant
