// Which quantization config a model is built with, as the seed states it: the checkpoint's own
// method first (config.json's quantization_config.quant_method, or a method's own config file such
// as quantize_config.json), online quantization (--quantization NAME) for an unquantized
// checkpoint, and online quantization of the layers a partly quantized checkpoint left in float.
#pragma once

#include <memory>
#include <string>

#include "lowbit/quant_method.h"

namespace lowbit::quant {

struct QuantizationRequest {
  std::string quantization;  // --quantization: a registered name, or empty
};

struct ResolvedQuantization {
  std::unique_ptr<QuantizationConfig> config;  // null: an unquantized model
  std::string checkpoint_method;               // "" when the checkpoint is unquantized
  std::string online_method;                   // "" when no online quantization applies
  std::string describe() const;                // "compressed-tensors (checkpoint)", ...
};

// quantization_config_json: config.json's quantization_config (or compression_config) as JSON
// text, empty when absent; where: "DIR/config.json" for messages. Throws InvalidArgument when
// --quantization contradicts the checkpoint or a config file is ambiguous, Unsupported for an
// unknown method.
ResolvedQuantization resolve_quantization(const std::string& model_dir,
                                          const std::string& quantization_config_json,
                                          const std::string& where,
                                          const QuantizationRequest& request);

// Throws Unsupported when none of the method's kernels runs on `platform`, naming what each needs
// (e.g. a method with only Hopper kernels on a CPU-only machine).
void require_supported(const MethodDescription& method, const Platform& platform);

// "compressed_tensors" → "compressed-tensors", lower case: vLLM's normalisation of quant_method.
std::string normalize_method_name(const std::string& name);

}  // namespace lowbit::quant
