// The compressed-tensors quantization schema as C++ values: QuantizationArgs (how one tensor is
// quantized), QuantizationScheme (a config group: targets + weight / input / output args + format),
// the named presets (W4A16, FP8_DYNAMIC, NVFP4, ...) and the model-level CompressedTensorsConfig that
// config.json's `quantization_config` holds. JSON in and out follows compressed-tensors 0.19's
// pydantic models (field names, defaults, inference and validation rules), so a config written here
// parses in compressed-tensors and vLLM, and one written there parses here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lowbit/dtype.h"

namespace lowbit::quant {

enum class QuantType { Int, Float };
enum class Strategy { Tensor, Channel, Group, Block, Token, TensorGroup, AttnHead };
enum class DynamicMode { Static, Dynamic, Local };  // false | true | "local"
enum class ActOrder { None, Group, Weight };        // null | "group" | "weight"

std::string to_string(QuantType t);
std::string to_string(Strategy s);
std::string to_string(ActOrder a);

// compressed-tensors' CompressionFormat values that lowbit reads or writes.
enum class CompressionFormat {
  Dense,
  NaiveQuantized,
  IntQuantized,
  FloatQuantized,
  PackQuantized,
  Nvfp4PackQuantized,
  Mxfp4PackQuantized,
  Mxfp8Quantized,
  MixedPrecision,
};
std::string to_string(CompressionFormat f);  // "pack-quantized", ...
// Throws InvalidArgument naming `where` for an unknown or unsupported (sparse/marlin-24) format.
CompressionFormat parse_compression_format(const std::string& s, const std::string& where);

struct QuantArgs {
  int num_bits = 8;
  QuantType type = QuantType::Int;
  bool symmetric = true;
  Strategy strategy = Strategy::Tensor;  // always resolved (inferred from group_size if absent)
  int64_t group_size = 0;  // 0 = null; > 0 for group / tensor_group; -1 = channel (as written)
  int64_t block_rows = 0, block_cols = 0;  // block_structure, for Strategy::Block
  DynamicMode dynamic = DynamicMode::Static;
  ActOrder actorder = ActOrder::None;
  std::string observer;  // "" = null (compressed-tensors' default applies)
  nlohmann::ordered_json observer_kwargs = nlohmann::ordered_json::object();
  std::optional<DType> scale_dtype;  // null: the weight's float dtype
  std::optional<DType> zp_dtype;     // inferred; only serialized when asymmetric

  bool is_dynamic() const { return dynamic != DynamicMode::Static; }
  // Integer range [qmin, qmax]; for floats ±max (fp8 e4m3 448, fp4 6).
  double qmin() const;
  double qmax() const;
  // Throws InvalidArgument(where + field) when the combination is not allowed (compressed-tensors'
  // validators: token needs dynamic, group needs group_size, asymmetric fp4, ...).
  void validate(const std::string& where) const;

  bool operator==(const QuantArgs&) const = default;
};

// Parses a QuantizationArgs JSON object; unknown keys are an error (the pydantic model forbids
// extras). `where` names the file and field in messages.
QuantArgs parse_quant_args(const nlohmann::json& j, const std::string& where);
// Serializes like compressed-tensors' model_dump (every field, in its declaration order).
nlohmann::ordered_json quant_args_to_json(const QuantArgs& a);

struct QuantScheme {
  std::vector<std::string> targets;
  std::optional<QuantArgs> weights;
  std::optional<QuantArgs> input_activations;
  std::optional<QuantArgs> output_activations;
  std::optional<CompressionFormat> format;  // per-group format, null = inferred

  bool operator==(const QuantScheme&) const = default;
};

// Preset names (case-insensitive): W2A16..W8A16, W4A16_ASYM, W8A8/INT8, W2A8..W7A8, W4AFP8,
// FP8, FP8_DYNAMIC, FP8_BLOCK, NVFP4A16, NVFP4, MXFP4A16, MXFP4, MXFP8A16, MXFP8, and the W4A8
// channel variant spelled W4A8_CHANNEL (lowbit's name: int4 per-channel weights, int8 dynamic
// per-token activations). Throws InvalidArgument listing the known names.
QuantScheme preset_scheme(const std::string& name, std::vector<std::string> targets);
std::vector<std::string> preset_names();

QuantScheme parse_quant_scheme(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json quant_scheme_to_json(const QuantScheme& s);

// The compressed-tensors release whose behaviour lowbit reproduces (and writes as `version`).
inline constexpr const char* kCompressedTensorsVersion = "0.19.0";

// config.json's `quantization_config` for quant_method "compressed-tensors".
struct CompressedTensorsConfig {
  std::vector<std::pair<std::string, QuantScheme>> config_groups;  // in file order
  std::vector<std::string> ignore;
  std::optional<QuantArgs> kv_cache_scheme;
  CompressionFormat format = CompressionFormat::Dense;  // model-level
  std::string quantization_status = "compressed";
  std::string version;  // of the compressed-tensors the writer follows
  // `transform_config` (QuIP / SpinQuant online rotations), kept verbatim; {} when none.
  nlohmann::ordered_json transform_config = nlohmann::ordered_json::object();

  bool operator==(const CompressedTensorsConfig&) const = default;
};

// Accepts the full form and the `{PRESET: [targets]}` shorthand; `compression_config` as the
// key of older checkpoints is the caller's business (config.json level).
CompressedTensorsConfig parse_quantization_config(const nlohmann::json& j, const std::string& where);
// The block written into config.json: keys sorted as compressed-tensors writes them.
nlohmann::ordered_json quantization_config_to_json(const CompressedTensorsConfig& c);

}  // namespace lowbit::quant
