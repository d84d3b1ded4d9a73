#include "models/compressed_linear.h"

#include <nlohmann/json.hpp>

#include "lowbit/error.h"
#include "quant/scheme/compressed_tensor.h"
#include "quant/scheme/matching.h"

namespace lowbit::models {

std::unique_ptr<CompressedLinearLoader> CompressedLinearLoader::from_config(
    const ModelConfig& config) {
  if (config.quantization_config_json.empty()) return nullptr;
  const nlohmann::json j = nlohmann::json::parse(config.quantization_config_json);
  const std::string where = config.source + ": quantization_config";
  std::string method = j.value("quant_method", std::string());
  for (char& ch : method) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (method == "compressed_tensors") method = "compressed-tensors";
  if (method != "compressed-tensors") {
    throw Unsupported(where + ".quant_method '" + j.value("quant_method", std::string()) +
                      "' cannot be loaded yet: lowbit reads compressed-tensors checkpoints");
  }
  auto loader = std::make_unique<CompressedLinearLoader>();
  loader->config_ = quant::parse_quantization_config(j, where);
  loader->source_ = config.source;
  return loader;
}

const quant::QuantScheme* CompressedLinearLoader::scheme_of(const std::string& module) const {
  const std::optional<size_t> group =
      quant::resolve_group(config_.config_groups, config_.ignore, {module, {"Linear"}});
  if (!group) return nullptr;
  const quant::QuantScheme& scheme = config_.config_groups[*group].second;
  return scheme.weights ? &scheme : nullptr;
}

Linear CompressedLinearLoader::load(const formats::Checkpoint& checkpoint,
                                    const std::string& module, int64_t out, int64_t in,
                                    DType model_dtype, std::set<std::string>& used) const {
  const quant::QuantScheme* scheme = scheme_of(module);
  if (scheme == nullptr) throw Internal("CompressedLinearLoader::load on unquantized " + module);
  quant::CompressionFormat format = scheme->format.value_or(config_.format);
  if (format == quant::CompressionFormat::MixedPrecision) format = quant::infer_format(*scheme);
  quant::TensorSource source;
  source.has = [&](const std::string& name) { return checkpoint.has(name); };
  source.get = [&](const std::string& name) {
    if (!checkpoint.has(name)) {
      throw InvalidArgument(checkpoint.path() + ": tensor '" + name + "' is missing (" + source_ +
                            " quantizes " + module + ")");
    }
    used.insert(name);
    return checkpoint.get(name);
  };
  source.description = checkpoint.path();
  const std::vector<float> values =
      quant::decompress_weight(source, module, *scheme->weights, format, out, in);
  Linear linear;
  linear.weight = Tensor::from_f32(values.data(), {out, in}, model_dtype);
  if (scheme->input_activations) {
    linear.input_quant = *scheme->input_activations;
    if (!scheme->input_activations->is_dynamic()) {
      // Static activation scale (FP8 preset): one fp32 value per tensor.
      Tensor s = source.get(module + ".input_scale").to_f32();
      linear.input_scale = s.data_as<const float>()[0];
    }
  }
  return linear;
}

}  // namespace lowbit::models
