// QuantizationArgs / QuantizationScheme JSON, following compressed-tensors 0.19.0's pydantic models
// (quantization/quant_args.py, quant_scheme.py). Presets and the model-level config are in
// quant_presets.cc and quant_config.cc.
#include "quant/scheme/quant_args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "lowbit/error.h"
#include "quant/scheme/json_util.h"

namespace lowbit::quant {

std::string to_string(QuantType t) { return t == QuantType::Int ? "int" : "float"; }

std::string to_string(Strategy s) {
  switch (s) {
    case Strategy::Tensor: return "tensor";
    case Strategy::Channel: return "channel";
    case Strategy::Group: return "group";
    case Strategy::Block: return "block";
    case Strategy::Token: return "token";
    case Strategy::TensorGroup: return "tensor_group";
    case Strategy::AttnHead: return "attn_head";
  }
  return "?";
}

std::string to_string(ActOrder a) {
  switch (a) {
    case ActOrder::None: return "null";
    case ActOrder::Group: return "group";
    case ActOrder::Weight: return "weight";
  }
  return "?";
}

namespace {

struct FormatName {
  CompressionFormat format;
  const char* name;
};
constexpr FormatName kFormats[] = {
    {CompressionFormat::Dense, "dense"},
    {CompressionFormat::NaiveQuantized, "naive-quantized"},
    {CompressionFormat::IntQuantized, "int-quantized"},
    {CompressionFormat::FloatQuantized, "float-quantized"},
    {CompressionFormat::PackQuantized, "pack-quantized"},
    {CompressionFormat::Nvfp4PackQuantized, "nvfp4-pack-quantized"},
    {CompressionFormat::Mxfp4PackQuantized, "mxfp4-pack-quantized"},
    {CompressionFormat::Mxfp8Quantized, "mxfp8-quantized"},
    {CompressionFormat::MixedPrecision, "mixed-precision"},
};

// torch dtype names as str(torch.dtype) prints them, with the aliases getattr(torch, name) accepts.
struct TorchDType {
  DType dtype;
  const char* name;
};
constexpr TorchDType kTorchDTypes[] = {
    {DType::F8_E4M3, "float8_e4m3fn"}, {DType::F8_E5M2, "float8_e5m2"},
    {DType::BF16, "bfloat16"},         {DType::F16, "float16"},
    {DType::F32, "float32"},           {DType::F64, "float64"},
    {DType::U8, "uint8"},              {DType::I8, "int8"},
    {DType::I16, "int16"},             {DType::I32, "int32"},
    {DType::I64, "int64"},             {DType::BOOL, "bool"},
    {DType::F16, "half"},              {DType::F32, "float"},
    {DType::F64, "double"},            {DType::I16, "short"},
    {DType::I32, "int"},               {DType::I64, "long"},
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

DType parse_torch_dtype(const nlohmann::json& v, const std::string& where) {
  LOWBIT_CHECK(v.is_string(), where + ": expected a torch dtype string, got " + v.dump());
  std::string name = v.get<std::string>();
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  for (const auto& d : kTorchDTypes)
    if (name == d.name) return d.dtype;
  throw InvalidArgument(where + ": no such torch dtype `torch." + name + "`");
}

// zp_dtype when the config leaves it null (QuantizationArgs.validate_model_after).
DType inferred_zp_dtype(const QuantArgs& a, const std::string& where) {
  if (a.type == QuantType::Float) {
    LOWBIT_CHECK(a.num_bits == 4 || a.num_bits == 8,
                 where + ".num_bits: float quantization supports 4 or 8 bits, got " +
                     std::to_string(a.num_bits));
    return DType::F8_E4M3;
  }
  if (a.num_bits <= 8) return DType::I8;
  if (a.num_bits <= 16) return DType::I16;
  return DType::I32;
}

Strategy parse_strategy(const nlohmann::json& v, const std::string& where) {
  LOWBIT_CHECK(v.is_string(), where + ": expected a string, got " + v.dump());
  const std::string s = lower(v.get<std::string>());
  for (Strategy st : {Strategy::Tensor, Strategy::Channel, Strategy::Group, Strategy::Block,
                      Strategy::Token, Strategy::TensorGroup, Strategy::AttnHead})
    if (to_string(st) == s) return st;
  throw InvalidArgument(where + ": '" + s + "' is not a valid QuantizationStrategy");
}

void parse_block_structure(const nlohmann::json& v, QuantArgs* a, const std::string& where) {
  std::vector<int64_t> dims;
  const std::string bad = where + ": invalid block_structure " + v.dump() +
                          ", must be a list of positive ints [rows, cols]";
  if (v.is_string()) {  // legacy "128x128"
    const std::string s = v.get<std::string>();
    const size_t x = s.find('x');
    LOWBIT_CHECK(x != std::string::npos, bad);
    for (const std::string& part : {s.substr(0, x), s.substr(x + 1)}) {
      int64_t dim = 0;
      const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), dim);
      // from_chars also refuses a sign and a number past int64 (std::stoll threw out_of_range).
      LOWBIT_CHECK(!part.empty() && ec == std::errc() && end == part.data() + part.size(), bad);
      dims.push_back(dim);
    }
  } else {
    LOWBIT_CHECK(v.is_array() && v.size() == 2, bad);
    for (const auto& d : v) {
      LOWBIT_CHECK(d.is_number_integer(), bad);
      dims.push_back(d.get<int64_t>());
    }
  }
  // Up to INT32_MAX: a block is at most a weight matrix, and a larger number from the legacy
  // string form could not be written back as the list form reads it (YAML holds ints below 2^53).
  constexpr int64_t kMaxDim = INT32_MAX;
  LOWBIT_CHECK(
      dims.size() == 2 && dims[0] > 0 && dims[1] > 0 && dims[0] <= kMaxDim && dims[1] <= kMaxDim,
      bad);
  a->block_rows = dims[0];
  a->block_cols = dims[1];
}

DynamicMode parse_dynamic(const nlohmann::json& v, const std::string& where) {
  if (v.is_boolean()) return v.get<bool>() ? DynamicMode::Dynamic : DynamicMode::Static;
  LOWBIT_CHECK(v.is_string() && lower(v.get<std::string>()) == "local",
               where + ": expected true, false or \"local\", got " + v.dump());
  return DynamicMode::Local;
}

// compressed-tensors 0.19 rejects actorder "group"/"dynamic"/true (removed). lowbit still reads
// them: older checkpoints carry them, and their weight_g_idx is loadable.
ActOrder parse_actorder(const nlohmann::json& v, const std::string& where) {
  if (v.is_null()) return ActOrder::None;
  if (v.is_boolean()) return v.get<bool>() ? ActOrder::Group : ActOrder::None;
  LOWBIT_CHECK(v.is_string(), where + ": expected null, a bool or a string, got " + v.dump());
  const std::string s = lower(v.get<std::string>());
  if (s == "weight" || s == "static") return ActOrder::Weight;
  if (s == "group" || s == "dynamic") return ActOrder::Group;
  throw InvalidArgument(where + ": '" + s + "' is not a valid ActivationOrdering");
}

void parse_field(const std::string& key, const nlohmann::json& v, QuantArgs* a, bool* has_strategy,
                 bool* has_zp_dtype, const std::string& where) {
  const std::string at = where + "." + key;
  if (key == "num_bits") {
    const int64_t bits = json_util::get_int(v, at);
    // Only the narrowing is checked here (2^32 + 8 must not pass as 8); validate() owns the range.
    LOWBIT_CHECK(bits >= INT32_MIN && bits <= INT32_MAX, at + ": out of range, got " + v.dump());
    a->num_bits = static_cast<int>(bits);
  } else if (key == "type") {
    LOWBIT_CHECK(v.is_string(), at + ": expected \"int\" or \"float\", got " + v.dump());
    const std::string t = lower(v.get<std::string>());
    LOWBIT_CHECK(t == "int" || t == "float", at + ": '" + t + "' is not a valid QuantizationType");
    a->type = t == "int" ? QuantType::Int : QuantType::Float;
  } else if (key == "symmetric") {
    a->symmetric = json_util::get_bool(v, at);
  } else if (key == "group_size") {
    a->group_size = v.is_null() ? 0 : json_util::get_int(v, at);
    LOWBIT_CHECK(v.is_null() || a->group_size >= -1,
                 at + ": invalid group size " + v.dump() +
                     ", use group_size > 0 for strategy='group' and -1 for 'channel'");
    // 0 is lowbit's spelling of null, so an explicit 0 cannot be represented.
    LOWBIT_CHECK(v.is_null() || a->group_size != 0, at + ": group_size 0 is not meaningful");
  } else if (key == "strategy") {
    *has_strategy = !v.is_null();
    if (*has_strategy) a->strategy = parse_strategy(v, at);
  } else if (key == "block_structure") {
    if (!v.is_null()) parse_block_structure(v, a, at);
  } else if (key == "dynamic") {
    a->dynamic = parse_dynamic(v, at);
  } else if (key == "actorder") {
    a->actorder = parse_actorder(v, at);
  } else if (key == "scale_dtype") {
    if (!v.is_null()) a->scale_dtype = parse_torch_dtype(v, at);
  } else if (key == "zp_dtype") {
    *has_zp_dtype = !v.is_null();
    if (*has_zp_dtype) a->zp_dtype = parse_torch_dtype(v, at);
  } else if (key == "observer") {
    LOWBIT_CHECK(v.is_null() || v.is_string(), at + ": expected a string or null");
    a->observer = v.is_null() ? "" : v.get<std::string>();
  } else if (key == "observer_kwargs") {
    LOWBIT_CHECK(v.is_object() || v.is_null(), at + ": expected an object");
    a->observer_kwargs = v.is_null() ? nlohmann::ordered_json::object()
                                     : nlohmann::ordered_json::parse(v.dump());
  } else {
    throw InvalidArgument(where + ": unknown QuantizationArgs field '" + key +
                          "' (extra fields are forbidden)");
  }
}

std::optional<nlohmann::ordered_json> dtype_json(const std::optional<DType>& d) {
  if (!d) return std::nullopt;
  for (const auto& t : kTorchDTypes)
    if (t.dtype == *d) return nlohmann::ordered_json(std::string("torch.") + t.name);
  return std::nullopt;
}

}  // namespace

std::string to_string(CompressionFormat f) {
  for (const auto& e : kFormats)
    if (e.format == f) return e.name;
  return "?";
}

CompressionFormat parse_compression_format(const std::string& s, const std::string& where) {
  for (const auto& e : kFormats)
    if (s == e.name) return e.format;
  if (s == "sparse-bitmask" || s == "sparse-24-bitmask" || s == "marlin-24")
    throw InvalidArgument(where + ": compression format '" + s +
                          "' is a legacy sparse format that lowbit does not read");
  throw InvalidArgument(where + ": unknown compression format '" + s + "'");
}

double QuantArgs::qmin() const { return -qmax() - (type == QuantType::Int ? 1.0 : 0.0); }

double QuantArgs::qmax() const {
  if (type == QuantType::Float) return num_bits == 4 ? 6.0 : 448.0;
  // A shift, not ldexp: this runs once per value in every fake quantization.
  return static_cast<double>((int64_t{1} << (num_bits - 1)) - 1);
}

// compressed-tensors' validate_model_after, in its order, plus lowbit's own limits (noted).
void QuantArgs::validate(const std::string& where) const {
  const std::string s = to_string(strategy);
  LOWBIT_CHECK(num_bits >= 1 && num_bits <= 32, where + ".num_bits: out of range");
  LOWBIT_CHECK(strategy != Strategy::Token || is_dynamic(),
               where + ".strategy: static token quantization is not possible, use dynamic=true");
  const bool grouped = strategy == Strategy::Group || strategy == Strategy::TensorGroup;
  LOWBIT_CHECK(!grouped || group_size > 0,
               where + ".group_size: strategy " + s + " requires a positive group_size");
  LOWBIT_CHECK(group_size <= 0 || grouped,
               where + ".strategy: group_size requires strategy 'group' or 'tensor_group'");
  const bool has_block = block_rows > 0 && block_cols > 0;
  LOWBIT_CHECK(strategy != Strategy::Block || has_block,
               where + ".block_structure: block strategy requires a block_structure");
  LOWBIT_CHECK(strategy == Strategy::Block || !has_block,
               where + ".strategy: block_structure requires strategy 'block'");
  if (is_dynamic()) {
    LOWBIT_CHECK(strategy == Strategy::Token || strategy == Strategy::Tensor ||
                     strategy == Strategy::TensorGroup || strategy == Strategy::Group,
                 where + ".dynamic: dynamic quantization needs strategy token, tensor, "
                         "tensor_group or group, not " + s);
    LOWBIT_CHECK(dynamic != DynamicMode::Local || strategy == Strategy::TensorGroup,
                 where + ".dynamic: \"local\" is only supported for strategy tensor_group");
  }
  LOWBIT_CHECK(type == QuantType::Int || num_bits == 4 || num_bits == 8,
               where + ".num_bits: float quantization supports 4 or 8 bits");
  // compressed-tensors accepts these but fails later in calculate_qparams / GPTQ.
  LOWBIT_CHECK(symmetric || !(type == QuantType::Float && num_bits == 4),
               where + ".symmetric: asymmetric quantization is not supported for FP4");
  LOWBIT_CHECK(actorder != ActOrder::Group || grouped,
               where + ".actorder: 'group' needs strategy group or tensor_group");
}

QuantArgs parse_quant_args(const nlohmann::json& j, const std::string& where) {
  LOWBIT_CHECK(j.is_object(), where + ": QuantizationArgs must be an object, got " + j.dump());
  QuantArgs a;
  bool has_strategy = false, has_zp_dtype = false;
  for (auto it = j.begin(); it != j.end(); ++it)
    parse_field(it.key(), it.value(), &a, &has_strategy, &has_zp_dtype, where);
  if (!has_strategy) {  // inferred from group_size
    if (a.group_size == 0) a.strategy = Strategy::Tensor;
    else if (a.group_size > 0) a.strategy = Strategy::Group;
    else a.strategy = Strategy::Channel;
  }
  a.validate(where);
  // A symmetric zp_dtype is never serialized, so keep the canonical (inferred) one: that makes
  // parse(to_json(a)) == a hold, as it does for compressed-tensors' own dumps.
  if (!has_zp_dtype || a.symmetric) a.zp_dtype = inferred_zp_dtype(a, where);
  return a;
}

nlohmann::ordered_json quant_args_to_json(const QuantArgs& a) {
  nlohmann::ordered_json j;
  j["num_bits"] = a.num_bits;
  j["type"] = to_string(a.type);
  j["symmetric"] = a.symmetric;
  j["group_size"] = a.group_size == 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(a.group_size);
  j["strategy"] = to_string(a.strategy);
  j["block_structure"] = a.strategy == Strategy::Block
                             ? nlohmann::ordered_json::array({a.block_rows, a.block_cols})
                             : nlohmann::ordered_json();
  if (a.dynamic == DynamicMode::Local) j["dynamic"] = "local";
  else j["dynamic"] = a.dynamic == DynamicMode::Dynamic;
  j["actorder"] = a.actorder == ActOrder::None ? nlohmann::ordered_json()
                                               : nlohmann::ordered_json(to_string(a.actorder));
  j["scale_dtype"] = dtype_json(a.scale_dtype).value_or(nlohmann::ordered_json());
  j["zp_dtype"] = a.symmetric ? nlohmann::ordered_json()
                              : dtype_json(a.zp_dtype).value_or(nlohmann::ordered_json());
  j["observer"] = a.observer.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(a.observer);
  j["observer_kwargs"] = a.observer_kwargs;
  return j;
}

namespace {

void validate_scheme(const QuantScheme& s, const std::string& where) {
  if (s.input_activations) {
    const Strategy st = s.input_activations->strategy;
    LOWBIT_CHECK(st == Strategy::Token || st == Strategy::Tensor || st == Strategy::Group ||
                     st == Strategy::TensorGroup || st == Strategy::AttnHead,
                 where + ".input_activations.strategy: " + to_string(st) +
                     " is not supported for activation quantization");
    LOWBIT_CHECK(s.input_activations->actorder == ActOrder::None,
                 where + ".input_activations.actorder: cannot apply actorder to input activations");
  }
  LOWBIT_CHECK(!s.output_activations || s.output_activations->actorder == ActOrder::None,
               where + ".output_activations.actorder: cannot apply actorder to output activations");
  LOWBIT_CHECK(s.format != CompressionFormat::MixedPrecision,
               where + ".format: mixed-precision cannot be the format of a QuantizationScheme");
}

}  // namespace

QuantScheme parse_quant_scheme(const nlohmann::json& j, const std::string& where) {
  LOWBIT_CHECK(j.is_object(), where + ": QuantizationScheme must be an object, got " + j.dump());
  QuantScheme s;
  bool has_targets = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    const std::string at = where + "." + key;
    if (key == "targets") {
      s.targets = json_util::get_string_list(v, at);
      has_targets = true;
    } else if (key == "weights" || key == "input_activations" || key == "output_activations") {
      std::optional<QuantArgs> args;
      if (!v.is_null()) args = parse_quant_args(v, at);
      if (key == "weights") s.weights = args;
      else if (key == "input_activations") s.input_activations = args;
      else s.output_activations = args;
    } else if (key == "format") {
      if (!v.is_null()) {
        LOWBIT_CHECK(v.is_string(), at + ": expected a string, got " + v.dump());
        s.format = parse_compression_format(v.get<std::string>(), at);
      }
    } else {
      throw InvalidArgument(where + ": unknown QuantizationScheme field '" + key +
                            "' (extra fields are forbidden)");
    }
  }
  LOWBIT_CHECK(has_targets, where + ".targets: field required");
  validate_scheme(s, where);
  return s;
}

nlohmann::ordered_json quant_scheme_to_json(const QuantScheme& s) {
  auto args = [](const std::optional<QuantArgs>& a) {
    return a ? quant_args_to_json(*a) : nlohmann::ordered_json();
  };
  nlohmann::ordered_json j;
  j["targets"] = s.targets;
  j["weights"] = args(s.weights);
  j["input_activations"] = args(s.input_activations);
  j["output_activations"] = args(s.output_activations);
  j["format"] = s.format ? nlohmann::ordered_json(to_string(*s.format)) : nlohmann::ordered_json();
  return j;
}

}  // namespace lowbit::quant
