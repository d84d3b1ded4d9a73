// Maps checkpoint tensors onto DecoderWeights by the names an ArchSpec gives, checking presence,
// dtype (F32 / F16 / BF16) and shape against the config. Matrices stay zero-copy views of the
// mapped files; fused projections (Phi3's qkv_proj and gate_up_proj, transformers 5's 3-D expert
// tensors) become row-slice views, so no weight is copied. Norm weights and biases become fp32.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "lowbit/quant_method.h"
#include "models/arch_registry.h"
#include "models/layers/decoder_weights.h"
#include "models/model_config.h"

namespace lowbit::models {

// Throws InvalidArgument naming the file and tensor for a missing or mis-shaped tensor, Unsupported
// for a weight dtype other than F32/F16/BF16. Checkpoint tensors that no layer uses are logged
// (a warning) and returned in `unused` if it is not null.
// `quantization` (may be null) gives Linear layers their methods; `linear_backend` forces a kernel
// family (empty: each method's first that can run); `dequant_dtype` overrides the dtype quantized
// layers dequantize to (default: the embedding's).
DecoderWeights load_decoder_weights(const formats::Checkpoint& checkpoint,
                                    const ModelConfig& config, const ArchSpec& spec,
                                    const quant::QuantizationConfig* quantization,
                                    const std::string& linear_backend,
                                    std::optional<DType> dequant_dtype,
                                    std::vector<std::string>* unused);

}  // namespace lowbit::models
