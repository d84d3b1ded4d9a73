// The model-level `quantization_config` block (compressed-tensors quantization/quant_config.py and
// ModelCompressor.update_config, 0.19.0).
#include <set>

#include "lowbit/error.h"
#include "quant/scheme/compressed_tensor.h"
#include "quant/scheme/json_util.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {
namespace {

const std::set<std::string> kStatuses = {"initialized", "calibration", "frozen", "compressed",
                                         "decompressed"};

// compressed-tensors' _flatten_formats over the groups' (given or inferred) formats.
CompressionFormat model_format(const CompressedTensorsConfig& c) {
  std::set<CompressionFormat> formats;
  for (const auto& [name, scheme] : c.config_groups) {
    const CompressionFormat f = scheme.format.value_or(infer_format(scheme));
    if (f != CompressionFormat::Dense) formats.insert(f);
  }
  if (formats.empty()) return CompressionFormat::Dense;
  return formats.size() == 1 ? *formats.begin() : CompressionFormat::MixedPrecision;
}

void parse_groups(const nlohmann::json& v, CompressedTensorsConfig* c, const std::string& where) {
  LOWBIT_CHECK(v.is_object(), where + ": expected an object of config groups, got " + v.dump());
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string at = where + "." + it.key();
    if (it.value().is_array()) {  // {PRESET_NAME: [targets]} shorthand
      std::vector<std::string> targets = json_util::get_string_list(it.value(), at);
      try {
        c->config_groups.emplace_back(it.key(), preset_scheme(it.key(), std::move(targets)));
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(at + ": " + e.what());
      }
    } else {
      c->config_groups.emplace_back(it.key(), parse_quant_scheme(it.value(), at));
    }
  }
}

}  // namespace

CompressedTensorsConfig parse_quantization_config(const nlohmann::json& j, const std::string& where) {
  LOWBIT_CHECK(j.is_object(), where + ": quantization_config must be an object");
  CompressedTensorsConfig c;
  LOWBIT_CHECK(j.contains("config_groups"), where + ".config_groups: field required");
  parse_groups(j.at("config_groups"), &c, where + ".config_groups");
  // compressed-tensors' default status is "initialized" when the key is absent.
  c.quantization_status = "initialized";
  bool has_format = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    const std::string at = where + "." + key;
    if (key == "ignore") {
      if (!v.is_null()) c.ignore = json_util::get_string_list(v, at);
    } else if (key == "kv_cache_scheme") {
      if (!v.is_null()) c.kv_cache_scheme = parse_quant_args(v, at);
    } else if (key == "format") {
      LOWBIT_CHECK(v.is_string(), at + ": expected a string, got " + v.dump());
      // "fakequant" is the pydantic default: nothing was compressed into a real format, so the
      // groups' formats (or their inference) decide, as for a missing key.
      has_format = v.get<std::string>() != "fakequant";
      if (has_format) c.format = parse_compression_format(v.get<std::string>(), at);
    } else if (key == "quantization_status") {
      LOWBIT_CHECK(v.is_string() && kStatuses.count(v.get<std::string>()),
                   at + ": expected one of initialized, calibration, frozen, compressed, "
                        "decompressed; got " + v.dump());
      c.quantization_status = v.get<std::string>();
    } else if (key == "version") {
      LOWBIT_CHECK(v.is_string(), at + ": expected a string");
      c.version = v.get<std::string>();
    } else if (key == "transform_config") {
      LOWBIT_CHECK(v.is_object() || v.is_null(), at + ": expected an object");
      if (v.is_object()) c.transform_config = nlohmann::ordered_json::parse(v.dump());
    }
    // Other keys (quant_method, sparsity_config, global_compression_ratio, run_compressed, ...)
    // are ignored, as the pydantic model does (extra="ignore").
  }
  if (!has_format) c.format = model_format(c);
  return c;
}

nlohmann::ordered_json quantization_config_to_json(const CompressedTensorsConfig& c) {
  // ModelCompressor.update_config writes json.dump(..., sort_keys=True): every level sorted.
  // nlohmann::json keeps its keys in a std::map, i.e. sorted bytewise (= code point order).
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [name, scheme] : c.config_groups)
    groups[name] = nlohmann::json::parse(quant_scheme_to_json(scheme).dump());
  nlohmann::json j;
  j["config_groups"] = groups;
  j["format"] = to_string(c.format);
  j["global_compression_ratio"] = nullptr;
  j["ignore"] = c.ignore;
  j["kv_cache_scheme"] = c.kv_cache_scheme
                             ? nlohmann::json::parse(quant_args_to_json(*c.kv_cache_scheme).dump())
                             : nlohmann::json();
  j["quant_method"] = "compressed-tensors";
  j["quantization_status"] = c.quantization_status;
  j["sparsity_config"] = nlohmann::json::object();
  j["transform_config"] = nlohmann::json::parse(c.transform_config.dump());
  j["version"] = c.version;
  return nlohmann::ordered_json::parse(j.dump());
}

}  // namespace lowbit::quant
