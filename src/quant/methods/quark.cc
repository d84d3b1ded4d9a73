// quant_method "quark": checkpoints AMD Quark writes with export_safetensors (amd-quark 0.13,
// "real_quantized" weights, pack_method "reorder"). quantization_config holds global_quant_config
// {weight, input_tensors, output_tensors, bias}, layer_quant_config {fnmatch pattern: config},
// exclude [names / patterns]. Per Linear [out N, in K], by weight dtype:
//   fp8_e4m3, per_tensor or per_channel: weight F8_E4M3 [N, K], weight_scale [] or [N] (BF16 /
//     F32): w = fp8 · scale; input_tensors fp8_e4m3 per_tensor static → input_scale [], inputs
//     quantized with it (the fp8 kernels, as vLLM's QuarkW8A8Fp8); dynamic per_tensor / per_token
//     inputs are quantized at run time; no input_tensors: weight-only.
//   int4 / uint4, per_group (weight-only): weight I32 [K, N/8], eight codes per word along the
//     output dimension in AutoAWQ's order {0,2,4,6,1,3,5,7} ("reorder"; "order" = sequential),
//     weight_scale [G, N], weight_zero_point I32 [G, N/8] (packed the same way) or [G, N]:
//     w = (q - zero) · scale; int4 codes and zeros are two's-complement nibbles.
// Other dtypes (int8, mx, fp4, ...), output / bias quantization and fake_quantized exports are
// rejected naming the field.
#include <cmath>
#include <regex>

#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/methods/online_linear.h"
#include "quant/methods/packed_int.h"

namespace lowbit::quant {
namespace {

const std::vector<DType> kScaleDtypes = {DType::F32, DType::BF16, DType::F16};
const std::vector<int> kReorder = {0, 2, 4, 6, 1, 3, 5, 7};

enum class WeightKind { Fp8, Int4, Uint4 };
enum class InputKind { None, StaticTensor, DynamicTensor, DynamicToken };

struct LayerQuant {
  WeightKind weight = WeightKind::Fp8;
  bool per_channel = false;  // fp8: weight_scale [N]
  int64_t group_size = 0;    // int4 / uint4
  InputKind input = InputKind::None;
  bool reorder = true;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One quantization spec ({dtype, qscheme, group_size, is_dynamic, ...}) of `cfg`, parsed.
LayerQuant parse_layer(const nlohmann::json& cfg, bool reorder, const std::string& where) {
  if (!cfg.is_object()) throw InvalidArgument(where + " must be a JSON object");
  for (const char* unsupported : {"output_tensors", "bias"}) {
    if (cfg.contains(unsupported) && !cfg.at(unsupported).is_null()) {
      throw Unsupported(where + "." + unsupported + ": output / bias quantization is not supported");
    }
  }
  LayerQuant q;
  q.reorder = reorder;
  const nlohmann::json w = get_from_keys_or(cfg, {"weight"}, nullptr);
  if (!w.is_object()) throw InvalidArgument(where + ".weight is missing or not an object");
  const std::string dtype = lower(string_field(w, {"dtype"}, "", where + ".weight"));
  const std::string scheme = string_field(w, {"qscheme"}, "", where + ".weight");
  if (dtype == "fp8_e4m3") {
    q.weight = WeightKind::Fp8;
    if (scheme != "per_tensor" && scheme != "per_channel") {
      throw Unsupported(where + ".weight.qscheme '" + scheme + "': fp8 weights per_tensor or per_channel");
    }
    q.per_channel = scheme == "per_channel";
  } else if (dtype == "int4" || dtype == "uint4") {
    q.weight = dtype == "int4" ? WeightKind::Int4 : WeightKind::Uint4;
    if (scheme != "per_group") {
      throw Unsupported(where + ".weight.qscheme '" + scheme + "': 4-bit weights per_group only");
    }
    q.group_size = int_field(w, {"group_size"}, where + ".weight");
    if (q.group_size <= 0) throw InvalidArgument(where + ".weight.group_size must be positive");
  } else {
    throw Unsupported(where + ".weight.dtype '" + dtype +
                      "' is not supported (supported: fp8_e4m3, int4, uint4)");
  }
  const nlohmann::json in = get_from_keys_or(cfg, {"input_tensors"}, nullptr);
  if (in.is_null()) return q;
  const std::string where_in = where + ".input_tensors";
  if (q.weight != WeightKind::Fp8 || lower(string_field(in, {"dtype"}, "", where_in)) != "fp8_e4m3") {
    throw Unsupported(where_in + ": only fp8_e4m3 inputs with fp8_e4m3 weights are supported");
  }
  const std::string in_scheme = string_field(in, {"qscheme"}, "", where_in);
  const bool dynamic = bool_field(in, {"is_dynamic"}, false, where_in);
  if (in_scheme == "per_tensor") {
    q.input = dynamic ? InputKind::DynamicTensor : InputKind::StaticTensor;
  } else if (in_scheme == "per_channel" && dynamic) {
    q.input = InputKind::DynamicToken;
  } else {
    throw Unsupported(where_in + ".qscheme '" + in_scheme + "' (is_dynamic " +
                      (dynamic ? "true" : "false") + ") is not supported");
  }
  return q;
}

float single_value(const LayerParams& layer, const std::string& name) {
  const Tensor t = layer.get(name).to_f32();
  if (t.numel() != 1) {
    throw InvalidArgument(layer.describe(name) + " must hold one value, it has " + t.shape_string());
  }
  const float v = t.data_as<const float>()[0];
  if (!std::isfinite(v) || v <= 0) throw InvalidArgument(layer.describe(name) + " is not a positive scale");
  return v;
}

class QuarkLinear : public KernelLinear {
 public:
  explicit QuarkLinear(const LayerQuant& q) : q_(q) {}

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    const int64_t n = info.out_features, k = info.in_features;
    if (q_.weight == WeightKind::Fp8) {
      layer.declare(ParamSpec{"weight", {DType::F8_E4M3}, {n, k}});
      layer.declare(ParamSpec{"weight_scale", kScaleDtypes, q_.per_channel ? Shape{-1} : Shape{}});
      if (q_.input == InputKind::StaticTensor) layer.declare(ParamSpec{"input_scale", kScaleDtypes, {}});
      return;
    }
    if (n % 8 != 0 || k % q_.group_size != 0) {
      throw Unsupported(info.prefix + ": quark 4-bit needs out features divisible by 8 and in " +
                        "features by the group size " + std::to_string(q_.group_size));
    }
    const int64_t g = k / q_.group_size;
    layer.declare(ParamSpec{"weight", {DType::I32}, {k, n / 8}});
    layer.declare(ParamSpec{"weight_scale", kScaleDtypes, {g, n}});
    layer.declare(ParamSpec{"weight_zero_point", {DType::I32}, {g, -1}});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    if (q_.weight == WeightKind::Fp8) {
      load_fp8(layer);
    } else {
      load_int4(layer);
    }
  }

 private:
  void load_fp8(LayerParams& layer) {
    const LayerInfo& info = layer.info();
    kernels::Fp8Weights w;
    w.rows = info.out_features;
    w.cols = info.in_features;
    w.block_rows = q_.per_channel ? 1 : w.rows;
    w.block_cols = w.cols;
    const Tensor codes = layer.get("weight");
    w.codes.assign(codes.data_as<const uint8_t>(), codes.data_as<const uint8_t>() + codes.numel());
    const Tensor scales = layer.get("weight_scale").to_f32();
    if (scales.numel() != (q_.per_channel ? w.rows : 1)) {
      throw InvalidArgument(layer.describe("weight_scale") + " has " + scales.shape_string() +
                            " values, expected " + (q_.per_channel ? "one per output row" : "one"));
    }
    w.scales.assign(scales.data_as<const float>(), scales.data_as<const float>() + scales.numel());
    std::optional<InputQuant> input;
    if (q_.input != InputKind::None) {
      InputQuant in;
      in.args = fp8_dynamic_input_args(q_.input == InputKind::DynamicToken ? Strategy::Token
                                                                         : Strategy::Tensor);
      if (q_.input == InputKind::StaticTensor) {
        in.args.dynamic = DynamicMode::Static;
        in.static_scale = single_value(layer, "input_scale");
      }
      input = in;
    }
    finish_fp8(layer, std::move(w), input);
  }

  void load_int4(LayerParams& layer) {
    const LayerInfo& info = layer.info();
    const int64_t n = info.out_features, k = info.in_features, g = k / q_.group_size;
    const std::vector<int> order = q_.reorder ? kReorder : std::vector<int>{};
    const bool is_signed = q_.weight == WeightKind::Int4;
    // Two's-complement nibbles of int4 → the kernels' unsigned codes (+8).
    auto shift = [&](std::vector<uint8_t>& v) {
      if (!is_signed) return;
      for (uint8_t& c : v) c = static_cast<uint8_t>((c ^ 0x8) & 0xF);
    };
    std::vector<uint8_t> q = unpack_along_cols(layer.get("weight").data_as<const int32_t>(), k, n, 4, order);
    shift(q);
    const Tensor& zp = layer.get("weight_zero_point");
    std::vector<uint8_t> z;
    if (zp.dim(1) == n / 8) {
      z = unpack_along_cols(zp.data_as<const int32_t>(), g, n, 4, order);
      shift(z);
    } else if (zp.dim(1) == n) {
      z.resize(static_cast<size_t>(g * n));
      for (int64_t i = 0; i < g * n; ++i) {
        const int32_t v = zp.data_as<const int32_t>()[i] + (is_signed ? 8 : 0);
        if (v < 0 || v > 15) {
          throw InvalidArgument(layer.describe("weight_zero_point") + " holds " + std::to_string(v) +
                                " outside the 4-bit range");
        }
        z[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
      }
    } else {
      throw InvalidArgument(layer.describe("weight_zero_point") + " has shape " + zp.shape_string() +
                            ", expected [" + std::to_string(g) + ", " + std::to_string(n / 8) +
                            "] (packed) or [" + std::to_string(g) + ", " + std::to_string(n) + "]");
    }
    const Tensor scales = layer.get("weight_scale").to_f32();
    kernels::IntWeights w;
    w.bits = 4;
    w.rows = n;
    w.cols = k;
    w.group_size = q_.group_size;
    w.codes = transposed(q.data(), k, n);
    w.scales = transposed(scales.data_as<const float>(), g, n);
    w.zeros = transposed(z.data(), g, n);
    finish_int(layer, std::move(w), std::nullopt);
  }

  LayerQuant q_;
};

bool pattern_match(const std::string& pattern, const std::string& name) {
  if (pattern.rfind("re:", 0) == 0) return std::regex_match(name, std::regex(pattern.substr(3)));
  return glob_match(pattern, name);
}

class QuarkConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<QuarkConfig>();
    const nlohmann::json exp = get_from_keys_or(j, {"export"}, nlohmann::json::object());
    const std::string format = string_field(exp, {"weight_format"}, "real_quantized", where + ".export");
    if (format != "real_quantized") {
      throw Unsupported(where + ".export.weight_format '" + format + "': only real_quantized exports");
    }
    const std::string pack = string_field(exp, {"pack_method"}, "reorder", where + ".export");
    if (pack != "reorder" && pack != "order") {
      throw Unsupported(where + ".export.pack_method '" + pack + "' is not reorder or order");
    }
    const bool reorder = pack == "reorder";
    c->global_ = parse_layer(get_from_keys(j, {"global_quant_config"}, where), reorder,
                             where + ".global_quant_config");
    const nlohmann::json layers = get_from_keys_or(j, {"layer_quant_config"}, nlohmann::json::object());
    if (!layers.is_object()) throw InvalidArgument(where + ".layer_quant_config must be an object");
    for (const auto& [pattern, cfg] : layers.items()) {
      c->layers_.emplace_back(pattern, parse_layer(cfg, reorder, where + ".layer_quant_config." + pattern));
    }
    const nlohmann::json types = get_from_keys_or(j, {"layer_type_quant_config"}, nlohmann::json::object());
    if (types.is_object() && !types.empty()) {
      throw Unsupported(where + ".layer_type_quant_config: per-type configs are not supported");
    }
    c->exclude_ = string_list_field(j, {"exclude"}, where);
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "quark";
    d.summary = "AMD Quark exports: fp8 (per-tensor / channel, static or dynamic inputs), int4 / uint4 groups";
    d.min_capability = 70;  // vLLM's QuarkConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear, LayerKind::Experts};
    d.kernels = int_weight_kernels();
    d.kernels.erase(d.kernels.begin() + 1);  // no w8a8
    for (KernelSpec& k : fp8_weight_kernels()) {
      if (k.name != "dequant") d.kernels.insert(d.kernels.end() - 1, k);
    }
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind != LayerKind::Linear && layer.kind != LayerKind::Experts) return nullptr;
    for (const std::string& e : exclude_) {
      if (pattern_match(e, layer.prefix)) return nullptr;
    }
    for (const auto& [pattern, q] : layers_) {
      if (pattern_match(pattern, layer.prefix)) return std::make_unique<QuarkLinear>(q);
    }
    return std::make_unique<QuarkLinear>(global_);
  }

 private:
  LayerQuant global_;
  std::vector<std::pair<std::string, LayerQuant>> layers_;
  std::vector<std::string> exclude_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(QuarkConfig, "quark");

}  // namespace lowbit::quant
