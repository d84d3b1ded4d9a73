// quant_method "torchao": checkpoints transformers saves from a TorchAoConfig (torchao 0.18,
// transformers 5.17). transformers 5 always writes safetensors: torchao's
// flatten_tensor_state_dict stores each quantized weight as `<module>._weight_<field>` tensors,
// and config.json's quantization_config holds {quant_method "torchao", quant_type {"default":
// AOBaseConfig as config_to_dict writes it: {"_type", "_version", "_data"}},
// modules_to_not_convert, include_input_output_embeddings}. Per quantized Linear [out N, in K], by
// config type:
//   Int4WeightOnlyConfig, int4_packing_format PLAIN (the default; Int4Tensor):
//     _weight_qdata I8 [N, K/2]: element 2j in the low nibble, 2j+1 in the high one, two's
//     complement q in [-8, 7]; _weight_scale, _weight_zero_point [K/g, N] in the model dtype;
//     w = q · scale + zero_point, with the zero point in the float domain (mslk's
//     int4_row_quantize_zp: zero = min + 8 · scale). That is not an integer zero point, so the
//     layer is dequantized at load (fp32 q · scale + zero, then the model dtype): the dequant
//     kernel. Layers whose K is not a multiple of the group size stay in float, as torchao
//     leaves them.
//   Int8WeightOnlyConfig, Int8DynamicActivationInt8WeightConfig (Int8Tensor): _weight_qdata I8
//     [N, K], _weight_scale F32 [N, 1] (PerRow) / [1, 1] (PerTensor) / [N, K/g] (PerGroup),
//     _weight_zero_point I8 of the same shape (zeros: symmetric): w = (q - zp) · scale → the
//     wna16 kernels; with dynamic activations, symmetric per token (the default: scale =
//     absmax / 127.5, as lowbit's w8a8 kernels) → w8a8; per-tensor or asymmetric ones are
//     emulated in fp32 on wna16. torchao rounds x · (1 / scale) where the kernels round x / scale:
//     the codes agree except at rounding ties, among them the absmax element of a row whose
//     largest value is negative (-127.5 ± ulps: -128 or -127;
//     tests/golden/quant_formats/README.md).
//   IntxWeightOnlyConfig, intx_packing_format UNPACKED_TO_INT8 (IntxUnpackedToInt8Tensor, what
//     torchao uses for CPUs): _weight_qdata I8 [N, K] holding int1..int8 values, _weight_scale
//     [N, K/g] or [N, 1] (PerAxis(0)), _weight_zero_point I8 alike: w = (q - zp) · scale → wna16.
// FqnToConfig / ModuleFqnToConfig (older: AOPerModuleConfig) pick a config per module (parameter
// name, module name, "re:" regex on the parameter then on the module, full match, first in file
// order, then "_default"; null = left in float), as torchao applies them. modules_to_not_convert:
// vLLM's should_skip (the whole name, or dot-separated components of it). Everything else is
// rejected naming the field: other packings (tile_packed_to_4d is tinygemm's CUDA tile layout,
// plain_int32 XPU / NPU, preshuffled mslk's), version-1 configs and string quant_types (older
// torchao / transformers, which could only save a torch pickle, pytorch_model.bin), float8 / mx /
// nvfp4, static or pre-scaled activations, reduce_range.
#include <regex>

#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"

namespace lowbit::quant {
namespace {

const std::vector<DType> kFloatDtypes = {DType::F32, DType::BF16, DType::F16};
const char* kPickleHint =
    ": older torchao / transformers saved such models only as a torch pickle (pytorch_model.bin), "
    "which lowbit does not read; re-save it with a current torchao and transformers 5, whose "
    "checkpoints are safetensors";

enum class Layout { Int4Plain, Int8, Intx };
enum class Granularity { Row, Tensor, Group };

struct ActQuant {
  bool enabled = false;
  bool per_token = true;  // false: one dynamic scale per tensor
  bool symmetric = true;
};

struct LayerScheme {
  Layout layout = Layout::Int8;
  std::string type;  // the config's _type, for messages
  int bits = 8;
  Granularity granularity = Granularity::Row;
  int64_t group_size = 0;  // Granularity::Group
  ActQuant act;
};

// An enum value as config_to_dict writes it ({"_type": "X", "_data": "NAME"}) or a plain string.
std::string enum_value(const nlohmann::json& data, const std::string& key,
                       const std::string& fallback, const std::string& where) {
  if (!data.contains(key) || data.at(key).is_null()) return fallback;
  const nlohmann::json& v = data.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("_data") && v.at("_data").is_string()) {
    return v.at("_data").get<std::string>();
  }
  throw InvalidArgument(where + "." + key + " is not an enum value: " + v.dump());
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// {"_type": "PerRow" | "PerTensor" | "PerGroup" | "PerAxis", "_data": {...}}.
Granularity parse_granularity(const nlohmann::json& g, int64_t& group_size,
                              const std::string& where) {
  if (!g.is_object() || !g.contains("_type") || !g.at("_type").is_string()) {
    throw InvalidArgument(where + " is not a torchao granularity object: " + g.dump());
  }
  const std::string type = g.at("_type").get<std::string>();
  const nlohmann::json data = get_from_keys_or(g, {"_data"}, nlohmann::json::object());
  if (type == "PerTensor") return Granularity::Tensor;
  if (type == "PerRow" || type == "PerToken") {
    const nlohmann::json dim = get_from_keys_or(data, {"dim"}, -1);
    if (!dim.is_number_integer() || (dim.get<int64_t>() != -1 && dim.get<int64_t>() != 1)) {
      throw Unsupported(where + ": PerRow along dim " + dim.dump() + " (only the last dim)");
    }
    return Granularity::Row;
  }
  if (type == "PerAxis") {
    if (get_from_keys_or(data, {"axis"}, 0) != 0) {
      throw Unsupported(where + ": PerAxis only along axis 0 (one scale per output row)");
    }
    return Granularity::Row;
  }
  if (type == "PerGroup") {
    group_size = int_field(data, {"group_size"}, where + "._data");
    if (group_size <= 0) throw InvalidArgument(where + "._data.group_size must be positive");
    return Granularity::Group;
  }
  throw Unsupported(where + "._type '" + type +
                    "' (supported: PerRow, PerTensor, PerGroup, PerAxis)");
}

void reject_version_1(const nlohmann::json& c, const std::string& type, const std::string& where) {
  const nlohmann::json v = get_from_keys_or(c, {"_version"}, 2);
  if (v == 1) {
    throw Unsupported(where + ": " + type + " _version 1 (AffineQuantizedTensor)" + kPickleHint);
  }
}

LayerScheme parse_int4(const nlohmann::json& data, const std::string& where) {
  LayerScheme s;
  s.layout = Layout::Int4Plain;
  s.bits = 4;
  s.granularity = Granularity::Group;
  s.group_size = data.contains("group_size") ? int_field(data, {"group_size"}, where) : 128;
  if (s.group_size <= 0) throw InvalidArgument(where + ".group_size must be positive");
  const std::string key =
      data.contains("packing_format") ? "packing_format" : "int4_packing_format";
  const std::string packing = upper(enum_value(data, key, "PLAIN", where));
  if (packing == "PLAIN") return s;
  std::string why = "";
  if (packing == "TILE_PACKED_TO_4D") why = " (tinygemm's CUDA tile layout)";
  if (packing == "PLAIN_INT32") why = " (the XPU / NPU layout)";
  if (packing == "PRESHUFFLED") why = " (mslk's preshuffled GPU layout)";
  if (packing == "OPAQUE") why = " (Int4OpaqueTensor, which torchao cannot save as safetensors)";
  throw Unsupported(where + "." + key + " '" + packing + "'" + why +
                    " is not supported (supported: PLAIN, torchao's default)");
}

LayerScheme parse_int8(const nlohmann::json& data, bool dynamic, const std::string& where) {
  LayerScheme s;
  s.layout = Layout::Int8;
  if (data.contains("group_size") && !data.at("group_size").is_null()) {
    throw Unsupported(where + ".group_size (version 1 field)" + kPickleHint);
  }
  nlohmann::json weight = get_from_keys_or(data, {"granularity"}, nullptr);
  nlohmann::json act = weight;
  if (weight.is_array()) {  // [activation, weight]
    if (weight.size() != 2) throw InvalidArgument(where + ".granularity must list 2 entries");
    act = weight[0];
    weight = weight[1];
  }
  if (!weight.is_null())
    s.granularity = parse_granularity(weight, s.group_size, where + ".granularity");
  if (!dynamic) return s;
  if (bool_field(data, {"reduce_range"}, false, where)) {
    throw Unsupported(where + ".reduce_range: the halved int8 range is not supported");
  }
  s.act.enabled = true;
  int64_t unused = 0;
  s.act.per_token =
      act.is_null() ||
      parse_granularity(act, unused, where + ".granularity (activations)") == Granularity::Row;
  if (unused != 0) throw Unsupported(where + ".granularity: activations per group");
  const std::string mapping = upper(enum_value(data, "act_mapping_type", "SYMMETRIC", where));
  if (mapping != "SYMMETRIC" && mapping != "ASYMMETRIC") {
    throw Unsupported(where + ".act_mapping_type '" + mapping + "'");
  }
  s.act.symmetric = mapping == "SYMMETRIC";
  return s;
}

LayerScheme parse_intx(const nlohmann::json& data, const std::string& where) {
  LayerScheme s;
  s.layout = Layout::Intx;
  const std::string dtype = enum_value(data, "weight_dtype", "int8", where);
  if (dtype.size() != 4 || dtype.rfind("int", 0) != 0 || dtype[3] < '1' || dtype[3] > '8') {
    throw Unsupported(where + ".weight_dtype '" + dtype + "' (int1 .. int8)");
  }
  s.bits = dtype[3] - '0';
  const std::string packing =
      upper(enum_value(data, "intx_packing_format", "UNPACKED_TO_INT8", where));
  if (packing != "UNPACKED_TO_INT8") {
    throw Unsupported(
        where + ".intx_packing_format '" + packing +
        "' (only UNPACKED_TO_INT8; the opaque CPU packings are not saved as safetensors)");
  }
  const nlohmann::json g = get_from_keys_or(data, {"granularity"}, nullptr);
  if (!g.is_null()) s.granularity = parse_granularity(g, s.group_size, where + ".granularity");
  if (s.granularity == Granularity::Tensor) throw Unsupported(where + ".granularity: PerTensor");
  return s;
}

// One AOBaseConfig dict; nullopt for null (module left in float).
std::optional<LayerScheme> parse_ao_config(const nlohmann::json& c, const std::string& where) {
  if (c.is_null()) return std::nullopt;
  if (!c.is_object() || !c.contains("_type") || !c.at("_type").is_string()) {
    throw InvalidArgument(where + " is not a torchao config ({\"_type\", \"_data\"}): " + c.dump());
  }
  const std::string type = c.at("_type").get<std::string>();
  const nlohmann::json data = get_from_keys_or(c, {"_data"}, nlohmann::json::object());
  if (!data.is_object()) throw InvalidArgument(where + "._data must be an object");
  const std::string field = where + "._data";
  LayerScheme s;
  if (type == "Int4WeightOnlyConfig") {
    reject_version_1(c, type, where);
    s = parse_int4(data, field);
  } else if (type == "Int8WeightOnlyConfig" || type == "Int8DynamicActivationInt8WeightConfig") {
    reject_version_1(c, type, where);
    s = parse_int8(data, type != "Int8WeightOnlyConfig", field);
  } else if (type == "IntxWeightOnlyConfig") {
    reject_version_1(c, type, where);
    s = parse_intx(data, field);
  } else {
    throw Unsupported(where + "._type '" + type +
                      "' is not supported (supported: Int4WeightOnlyConfig, Int8WeightOnlyConfig, "
                      "Int8DynamicActivationInt8WeightConfig, IntxWeightOnlyConfig, FqnToConfig; "
                      "not yet float8, mx, nvfp4, intx with int8 activations, static activations)");
  }
  s.type = type;
  return s;
}

class TorchAoLinear : public KernelLinear {
 public:
  explicit TorchAoLinear(LayerScheme s) : s_(std::move(s)) {}

  void create_weights(LayerParams& layer) override {
    const int64_t n = layer.info().out_features, k = layer.info().in_features;
    if (s_.layout == Layout::Int4Plain) {
      if (k % 2 != 0) throw Unsupported(layer.info().prefix + ": int4 needs an even in_features");
      const int64_t g = k / s_.group_size;
      layer.declare(ParamSpec{"_weight_qdata", {DType::I8, DType::U8}, {n, k / 2}});
      layer.declare(ParamSpec{"_weight_scale", kFloatDtypes, {g, n}});
      layer.declare(ParamSpec{"_weight_zero_point", kFloatDtypes, {g, n}});
    } else {
      const Shape qparams = qparam_shape(layer.info());
      layer.declare(ParamSpec{"_weight_qdata", {DType::I8}, {n, k}});
      layer.declare(ParamSpec{"_weight_scale", kFloatDtypes, qparams});
      layer.declare(
          ParamSpec{"_weight_zero_point", {DType::I8}, qparams, s_.layout == Layout::Intx});
    }
    // Present only for schemes lowbit rejects; declared so that the error names them.
    for (const char* extra :
         {"_weight_act_pre_scale", "_weight_act_quant_scale", "_weight_act_quant_zero_point"}) {
      layer.declare(ParamSpec{extra, {}, {}, false});
    }
  }

  void process_weights_after_loading(LayerParams& layer) override {
    for (const char* extra :
         {"_weight_act_pre_scale", "_weight_act_quant_scale", "_weight_act_quant_zero_point"}) {
      if (layer.has(extra)) {
        throw Unsupported(layer.describe(extra) +
                          ": activation pre-scaling (AWQ / SmoothQuant) and "
                          "static activation quantization are not supported");
      }
    }
    if (s_.layout == Layout::Int4Plain) {
      load_int4(layer);
    } else {
      load_int(layer);
    }
  }

 private:
  Shape qparam_shape(const LayerInfo& info) const {
    switch (s_.granularity) {
      case Granularity::Row:
        return {info.out_features, 1};
      case Granularity::Tensor:
        return {1, 1};
      case Granularity::Group:
        if (info.in_features % s_.group_size != 0) {
          throw Unsupported(info.prefix + ": in_features " + std::to_string(info.in_features) +
                            " is not a multiple of the group size " +
                            std::to_string(s_.group_size));
        }
        return {info.out_features, info.in_features / s_.group_size};
    }
    return {};
  }

  // Int4Tensor: fp32 q · scale + zero (the product is exact), then the model dtype.
  void load_int4(LayerParams& layer) {
    const int64_t n = layer.info().out_features, k = layer.info().in_features;
    const uint8_t* packed = layer.get("_weight_qdata").data_as<const uint8_t>();
    const Tensor scale = layer.get("_weight_scale").to_f32();
    const Tensor zero = layer.get("_weight_zero_point").to_f32();
    const float* sp = scale.data_as<const float>();
    const float* zp = zero.data_as<const float>();
    std::vector<float> w(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const uint8_t byte = packed[r * (k / 2) + c / 2];
        const int nibble = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        const float q = static_cast<float>(nibble >= 8 ? nibble - 16 : nibble);
        const int64_t g = (c / s_.group_size) * n + r;  // scale and zero are [K/g, N]
        w[static_cast<size_t>(r * k + c)] = q * sp[g] + zp[g];
      }
    }
    finish_dequant(layer, w, std::nullopt);
  }

  // Int8Tensor / IntxUnpackedToInt8Tensor: signed codes and zero points shifted by 2^(bits-1) into
  // the kernels' unsigned form.
  void load_int(LayerParams& layer) {
    const LayerInfo& info = layer.info();
    const int64_t n = info.out_features, k = info.in_features;
    const int offset = 1 << (s_.bits - 1);
    kernels::IntWeights w;
    w.bits = s_.bits;
    w.rows = n;
    w.cols = k;
    w.group_size = s_.granularity == Granularity::Group ? s_.group_size : k;
    const int8_t* q = layer.get("_weight_qdata").data_as<const int8_t>();
    w.codes.resize(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n * k; ++i) {
      const int v = q[i] + offset;
      if (v < 0 || v >= (1 << s_.bits)) {
        throw InvalidArgument(layer.describe("_weight_qdata") + " holds " + std::to_string(q[i]) +
                              " at [" + std::to_string(i / k) + ", " + std::to_string(i % k) +
                              "], outside int" + std::to_string(s_.bits));
      }
      w.codes[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
    }
    const int64_t groups = w.groups();
    const bool tensor = s_.granularity == Granularity::Tensor;
    const Tensor scale = layer.get("_weight_scale").to_f32();
    const int8_t* zp = layer.has("_weight_zero_point")
                           ? layer.get("_weight_zero_point").data_as<const int8_t>()
                           : nullptr;
    w.scales.resize(static_cast<size_t>(n * groups));
    w.zeros.resize(static_cast<size_t>(n * groups));
    for (int64_t i = 0; i < n * groups; ++i) {
      const int64_t src = tensor ? 0 : i;
      w.scales[static_cast<size_t>(i)] = scale.data_as<const float>()[src];
      const int z = (zp != nullptr ? zp[src] : 0) + offset;
      if (z < 0 || z >= (1 << s_.bits)) {
        throw InvalidArgument(layer.describe("_weight_zero_point") + " holds " +
                              std::to_string(z - offset) + ", outside int" +
                              std::to_string(s_.bits));
      }
      w.zeros[static_cast<size_t>(i)] = static_cast<uint8_t>(z);
    }
    std::optional<InputQuant> input;
    if (s_.act.enabled) {
      InputQuant in;
      in.args.num_bits = 8;
      in.args.type = QuantType::Int;
      in.args.symmetric = s_.act.symmetric;
      in.args.strategy = s_.act.per_token ? Strategy::Token : Strategy::Tensor;
      in.args.dynamic = DynamicMode::Dynamic;
      input = in;
    }
    finish_int(layer, std::move(w), input);
  }

  LayerScheme s_;
};

// vLLM's should_skip: the whole name, or a run of its dot-separated components.
bool skipped(const std::string& prefix, const std::vector<std::string>& skip) {
  for (const std::string& s : skip) {
    if (prefix == s || ("." + prefix + ".").find("." + s + ".") != std::string::npos) return true;
  }
  return false;
}

class TorchAoConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<TorchAoConfig>();
    const nlohmann::json qt = get_from_keys(j, {"quant_type"}, where);
    if (qt.is_string()) {
      throw Unsupported(where + ".quant_type '" + qt.get<std::string>() +
                        "' (the string form of transformers 4)" + kPickleHint);
    }
    if (!qt.is_object() || qt.size() != 1 || !qt.contains("default")) {
      throw InvalidArgument(where + ".quant_type must be {\"default\": <torchao config>}");
    }
    const nlohmann::json& def = qt.at("default");
    const std::string field = where + ".quant_type.default";
    const std::string type = def.is_object() ? def.value("_type", std::string()) : std::string();
    if (type == "FqnToConfig" || type == "ModuleFqnToConfig" || type == "AOPerModuleConfig") {
      const nlohmann::json data = get_from_keys_or(def, {"_data"}, nlohmann::json::object());
      const std::string key = data.contains("fqn_to_config") && !data.at("fqn_to_config").empty()
                                  ? "fqn_to_config"
                                  : "module_fqn_to_config";
      const nlohmann::json map = get_from_keys_or(data, {key}, nullptr);
      if (!map.is_object()) throw InvalidArgument(field + "._data." + key + " must be an object");
      for (const auto& [name, cfg] : map.items()) {
        c->fqn_.emplace_back(name, parse_ao_config(cfg, field + "._data." + key + "." + name));
      }
      c->per_module_ = true;
    } else {
      c->default_ = parse_ao_config(def, field);
    }
    c->skip_ = string_list_field(j, {"modules_to_not_convert"}, where);
    if (bool_field(j, {"include_input_output_embeddings"}, false, where)) {
      throw Unsupported(where +
                        ".include_input_output_embeddings: quantized embeddings and LM "
                        "heads are not supported");
    }
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "torchao";
    d.summary =
        "torchao checkpoints saved by transformers (safetensors): int4 weight-only (plain), "
        "int8 weight-only / dynamic int8 activations, intx weight-only";
    d.min_capability = 75;  // vLLM's TorchAOConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear};
    d.kernels = int_weight_kernels();  // wna16, w8a8, dequant (int4 plain: float zero points)
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind != LayerKind::Linear) return nullptr;
    if (skipped(layer.prefix, skip_)) return nullptr;
    const std::optional<LayerScheme> s = per_module_ ? lookup(layer.prefix) : default_;
    if (!s) return nullptr;
    // torchao leaves a weight whose K is not a multiple of the int4 group size in float.
    if (s->layout == Layout::Int4Plain && layer.in_features % s->group_size != 0) return nullptr;
    return std::make_unique<TorchAoLinear>(*s);
  }

 private:
  // torchao's precedence: parameter name, module name, parameter regex, module regex, _default.
  std::optional<LayerScheme> lookup(const std::string& module) const {
    const std::string param = module + ".weight";
    for (const std::string& name : {param, module}) {
      for (const auto& [key, s] : fqn_) {
        if (key == name) return s;
      }
    }
    for (const std::string& name : {param, module}) {
      for (const auto& [key, s] : fqn_) {
        if (key.rfind("re:", 0) == 0 && std::regex_match(name, std::regex(key.substr(3)))) return s;
      }
    }
    for (const auto& [key, s] : fqn_) {
      if (key == "_default") return s;
    }
    return std::nullopt;
  }

  std::optional<LayerScheme> default_;
  bool per_module_ = false;
  std::vector<std::pair<std::string, std::optional<LayerScheme>>> fqn_;
  std::vector<std::string> skip_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(TorchAoConfig, "torchao");

}  // namespace lowbit::quant
