// Per-module quantization error for `lowbit compare`'s heat strip: ||W - Q(W)||_F / ||W||_F of
// every quantized Linear of the decoder layers ("weight_rel_fro"), Q(W) being what the quantized
// model's kernels compute with (LinearMethod::dequantized_weight) and W the original checkpoint's
// weight. Algorithms that rescale weights before quantizing (AWQ, SmoothQuant) change W itself, so
// the figure would mix rescaling with rounding: compare does not measure it for them.
#pragma once

#include <string>
#include <vector>

#include "eval/compare_result.h"

namespace lowbit::models {
class Model;
}

namespace lowbit::eval {

inline constexpr const char* kLayerErrorMetric = "weight_rel_fro";

// `quantized` was loaded from a checkpoint made from `baseline_dir`. Modules run densely (not
// quantized) are skipped. Names are the Hugging Face module names of Llama-style decoders
// ("model.layers.3.mlp.down_proj"); MoE experts are not listed.
std::vector<LayerError> layer_errors(const models::Model& quantized, const std::string& baseline_dir);

}  // namespace lowbit::eval
