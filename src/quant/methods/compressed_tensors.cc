// quant_method "compressed-tensors": the checkpoints llm-compressor (and `lowbit quantize`) write.
// Each Linear's scheme comes from config_groups / ignore with compressed-tensors' matching; its
// tensors are read by the scheme's format reader (quant/scheme) and handed to the shared kernels
// (kernel_linear.h), dispatched as REGISTRY.md §5 does on GPUs, mapped onto the CPU kernels:
//   int weights, no input quantization          → wna16 (W4A16, W8A16, asymmetric, g_idx)
//   int8/int4 weights, int8 token/tensor inputs → w8a8  (W8A8, W4A8)
//   fp8 weights (tensor/channel/group/block)    → fp8   (FP8, FP8_DYNAMIC, FP8_BLOCK; inputs
//                                                  fake-quantized to fp8 in fp32)
//   fp4 / mx / anything else                    → dequant (NVFP4, MXFP4, ...)
#include <cmath>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/scheme/compressed_tensor.h"
#include "quant/scheme/matching.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {
namespace {

// Every tensor a compressed-tensors Linear may carry; the format reader decides which it needs
// and checks their dtypes and shapes (naming the tensor).
const char* const kCompressedTensorNames[] = {
    "weight",       "weight_packed",       "weight_scale",       "weight_zero_point",
    "weight_shape", "weight_g_idx",        "weight_global_scale", "input_scale",
    "input_zero_point", "input_global_scale"};

class CompressedTensorsLinear : public KernelLinear {
 public:
  CompressedTensorsLinear(QuantScheme scheme, CompressionFormat format)
      : scheme_(std::move(scheme)), format_(format) {}

  void create_weights(LayerParams& layer) override {
    for (const char* name : kCompressedTensorNames) {
      layer.declare(ParamSpec{name, {}, {}, false});
    }
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    TensorSource source;
    source.has = [&](const std::string& full) { return layer.has(suffix(info, full)); };
    source.get = [&](const std::string& full) { return layer.get(suffix(info, full)); };
    source.description = layer.source;
    const QuantArgs& w = *scheme_.weights;
    const std::optional<InputQuant> input = input_quant(layer);
    auto read = [&] {
      return read_compressed_weight(source, info.prefix, w, format_, info.out_features,
                                    info.in_features);
    };
    if (w.type == QuantType::Int && w.strategy != Strategy::Block) {
      finish_int(layer, int_weights(read(), w), input);
    } else if (w.type == QuantType::Float && w.num_bits == 8 && format_ == CompressionFormat::FloatQuantized) {
      finish_fp8(layer, fp8_weights(read(), w), input);
    } else {  // decompress_weight reads (and checks) the tensors itself
      finish_dequant(layer, decompress_weight(source, info.prefix, w, format_, info.out_features,
                                              info.in_features),
                     input);
    }
  }

 private:
  static std::string suffix(const LayerInfo& info, const std::string& full) {
    return full.substr(info.prefix.size() + 1);
  }

  std::optional<InputQuant> input_quant(const LayerParams& layer) const {
    if (!scheme_.input_activations) return std::nullopt;
    InputQuant in;
    in.args = *scheme_.input_activations;
    if (in.args.strategy == Strategy::TensorGroup) {
      // NVFP4 activations: per-16 scales at run time, under the calibrated global scale
      // (vLLM's CompressedTensorsW4A4Fp4 requires it too).
      if (!layer.has("input_global_scale")) {
        throw InvalidArgument(layer.describe("input_global_scale") +
                              " is missing: tensor_group input activations need their "
                              "calibrated global scale");
      }
      const Tensor g = layer.get("input_global_scale").to_f32();
      if (g.numel() != 1 || !std::isfinite(g.data_as<const float>()[0]) ||
          g.data_as<const float>()[0] <= 0.0f) {
        throw InvalidArgument(layer.describe("input_global_scale") +
                              " must hold one finite value > 0, it has " + g.shape_string());
      }
      in.global_scale = g.data_as<const float>()[0];
    } else if (!in.args.is_dynamic()) {
      const Tensor scale = layer.get("input_scale").to_f32();
      if (scale.numel() != 1) {
        throw InvalidArgument(layer.describe("input_scale") + " must hold one value (static " +
                              "per-tensor activation scale), it has " + scale.shape_string());
      }
      in.static_scale = scale.data_as<const float>()[0];
      if (!in.args.symmetric && layer.has("input_zero_point")) {
        in.static_zero = layer.get("input_zero_point").to_f32().data_as<const float>()[0];
      }
    }
    return in;
  }

  // compressed-tensors' signed codes and zero points, shifted into the kernels' unsigned range.
  static kernels::IntWeights int_weights(const CompressedWeight& cw, const QuantArgs& a) {
    kernels::IntWeights w;
    w.bits = a.num_bits;
    w.rows = cw.rows;
    w.cols = cw.cols;
    const int offset = 1 << (a.num_bits - 1);
    const bool per_tensor = a.strategy == Strategy::Tensor;
    w.group_size = a.strategy == Strategy::Group ? a.group_size : cw.cols;
    const int64_t groups = w.groups();
    w.codes.resize(cw.int_codes.size());
    for (size_t i = 0; i < cw.int_codes.size(); ++i) {
      w.codes[i] = static_cast<uint8_t>(cw.int_codes[i] + offset);
    }
    w.scales.resize(static_cast<size_t>(w.rows * groups));
    if (!cw.zero_points.empty()) w.zeros.resize(w.scales.size());
    for (int64_t r = 0; r < w.rows; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const size_t src = per_tensor ? 0 : static_cast<size_t>(r * cw.grid_cols + g);
        const size_t dst = static_cast<size_t>(r * groups + g);
        // The decompressor multiplies in the scale dtype; the scales are exact in fp32.
        w.scales[dst] = cw.scales[src];
        if (!cw.zero_points.empty()) {
          w.zeros[dst] = static_cast<uint8_t>(cw.zero_points[src] + static_cast<float>(offset));
        }
      }
    }
    w.g_idx = cw.g_idx;
    return w;
  }

  static kernels::Fp8Weights fp8_weights(const CompressedWeight& cw, const QuantArgs& a) {
    kernels::Fp8Weights w;
    w.rows = cw.rows;
    w.cols = cw.cols;
    switch (a.strategy) {
      case Strategy::Tensor: w.block_rows = cw.rows; w.block_cols = cw.cols; break;
      case Strategy::Channel: w.block_rows = 1; w.block_cols = cw.cols; break;
      case Strategy::Group: w.block_rows = 1; w.block_cols = a.group_size; break;
      case Strategy::Block: w.block_rows = a.block_rows; w.block_cols = a.block_cols; break;
      default: throw Unsupported("fp8 weights with strategy " + to_string(a.strategy));
    }
    if (!cw.zero_points.empty() || !cw.g_idx.empty()) {
      throw Unsupported("fp8 weights with zero points or g_idx");
    }
    w.codes.resize(cw.codes.size());
    for (size_t i = 0; i < cw.codes.size(); ++i) w.codes[i] = f32_to_fp8_e4m3(cw.codes[i]);
    w.scales = cw.scales;
    return w;
  }

  QuantScheme scheme_;
  CompressionFormat format_;
};

class CompressedTensorsMethodConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    auto c = std::make_unique<CompressedTensorsMethodConfig>();
    c->config_ = parse_quantization_config(j, where);
    for (const auto& [name, scheme] : c->config_.config_groups) {
      if (scheme.output_activations) {
        throw Unsupported(where + ".config_groups." + name +
                          ": output activation quantization is not supported (vLLM neither)");
      }
    }
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "compressed-tensors";
    d.summary = "llm-compressor / lowbit checkpoints: W4A16, W8A16, W8A8, W4A8, FP8, NVFP4, MXFP4";
    d.min_capability = 70;
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear, LayerKind::LmHead, LayerKind::Experts};
    d.kernels = int_weight_kernels();
    for (KernelSpec& k : fp8_weight_kernels()) {
      if (k.name != "dequant") d.kernels.insert(d.kernels.end() - 1, k);
    }
    add_gpu_kernels(d);
    return d;
  }

  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind == LayerKind::Embedding || layer.kind == LayerKind::Attention) return nullptr;
    const std::optional<size_t> group =
        resolve_group(config_.config_groups, config_.ignore, {layer.prefix, {"Linear"}});
    if (!group) return nullptr;
    const QuantScheme& scheme = config_.config_groups[*group].second;
    if (!scheme.weights) return nullptr;  // activation-only groups leave weights in float
    CompressionFormat format = scheme.format.value_or(config_.format);
    if (format == CompressionFormat::MixedPrecision) format = infer_format(scheme);
    if (format == CompressionFormat::Dense) return nullptr;
    return std::make_unique<CompressedTensorsLinear>(scheme, format);
  }

 private:
  CompressedTensorsConfig config_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(CompressedTensorsMethodConfig, "compressed-tensors");

}  // namespace lowbit::quant
