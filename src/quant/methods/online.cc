// vLLM's online-quantization shorthands (`--quantization NAME` on an unquantized checkpoint,
// REGISTRY.md §4): each quantizes the float weights at load. They take over Linear layers (and
// routed experts); embeddings and the LM head stay as the checkpoint has them.
//   fp8_per_tensor   fp8 weights, one scale per tensor; inputs fp8 per tensor, dynamic
//   fp8_per_channel  fp8 weights per output channel; inputs fp8 per token, dynamic
//                    (llm-compressor's FP8_DYNAMIC)
//   fp8_per_block    fp8 weights in 128x128 blocks; inputs fp8 per 1x128 group, dynamic
//   int8_per_channel_weight_only  int8 weights per channel, routed experts only (MoE)
// On CPUs, which have no fp8 arithmetic, the fp8 input quantization is emulated in fp32 so the
// numbers are what an fp8 GPU computes.
#include "lowbit/error.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/online_linear.h"

namespace lowbit::quant {
namespace {

struct OnlineScheme {
  const char* name;
  const char* summary;
  Strategy weight_strategy;
  bool fp8;
  std::optional<Strategy> input_strategy;
  int64_t input_group = 0;
  bool moe_only = false;
};

const OnlineScheme kSchemes[] = {
    {"fp8_per_tensor", "online fp8: per-tensor weights, dynamic per-tensor fp8 inputs",
     Strategy::Tensor, true, Strategy::Tensor},
    {"fp8_per_channel", "online fp8: per-channel weights, dynamic per-token fp8 inputs",
     Strategy::Channel, true, Strategy::Token},
    {"fp8_per_block", "online fp8: 128x128 block weights, dynamic 1x128-group fp8 inputs",
     Strategy::Block, true, Strategy::Group, 128},
    {"int8_per_channel_weight_only", "online int8 per-channel weight-only, MoE experts only",
     Strategy::Channel, false, std::nullopt, 0, true},
};

class OnlineConfig : public QuantizationConfig {
 public:
  explicit OnlineConfig(const OnlineScheme& scheme) : scheme_(scheme) {}

  MethodDescription describe() const override { return describe_scheme(scheme_); }

  static MethodDescription describe_scheme(const OnlineScheme& s) {
    MethodDescription d;
    d.name = s.name;
    d.summary = s.summary;
    d.min_capability = 75;  // vLLM's OnlineQuantizationConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = s.moe_only ? std::vector<LayerKind>{LayerKind::Experts}
                          : std::vector<LayerKind>{LayerKind::Linear, LayerKind::Experts};
    d.kernels = s.fp8 ? fp8_weight_kernels() : int_weight_kernels();
    d.online = true;
    d.moe_only = s.moe_only;
    add_gpu_kernels(d);
    return d;
  }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    const bool takes = layer.kind == LayerKind::Experts ||
                       (layer.kind == LayerKind::Linear && !scheme_.moe_only);
    if (!takes) return nullptr;
    const QuantArgs weights =
        scheme_.fp8 ? fp8_weight_args(scheme_.weight_strategy) : int8_channel_weight_args();
    std::optional<QuantArgs> inputs;
    if (scheme_.input_strategy) {
      inputs = fp8_dynamic_input_args(*scheme_.input_strategy, scheme_.input_group);
    }
    return std::make_unique<OnlineLinear>(weights, inputs);
  }

 private:
  const OnlineScheme& scheme_;
};

// One registration class per name (the macro takes static functions).
template <int I>
struct Online {
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object() || !j.empty()) {
      throw InvalidArgument(where + ": " + kSchemes[I].name +
                            " is an online method and takes no configuration");
    }
    return std::make_unique<OnlineConfig>(kSchemes[I]);
  }
  static MethodDescription description() { return OnlineConfig::describe_scheme(kSchemes[I]); }
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(Online<0>, "fp8_per_tensor");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(Online<1>, "fp8_per_channel");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(Online<2>, "fp8_per_block");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(Online<3>, "int8_per_channel_weight_only");

}  // namespace lowbit::quant
