#include "eval/layer_error.h"

#include <cmath>

#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "models/model.h"

namespace lowbit::eval {

namespace {

double relative_error(const Tensor& original, const Tensor& quantized, const std::string& name) {
  const Tensor w = original.to_f32();
  LOWBIT_CHECK(w.numel() == quantized.numel(),
               name + ": the quantized weight has " + std::to_string(quantized.numel()) +
                   " elements, the baseline's " + std::to_string(w.numel()));
  const float* a = w.data_as<const float>();
  const float* b = quantized.data_as<const float>();
  double diff = 0, norm = 0;  // fp64: sums of ~10^7 squares
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(a[i]) * a[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

}  // namespace

std::vector<LayerError> layer_errors(const models::Model& quantized, const std::string& baseline_dir) {
  const formats::Checkpoint baseline = formats::Checkpoint::open(baseline_dir);
  std::vector<LayerError> errors;
  const auto& layers = quantized.weights().layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    const models::LayerWeights& layer = layers[i];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    const std::pair<const models::Linear*, const char*> modules[] = {
        {&layer.attention.q, "self_attn.q_proj"}, {&layer.attention.k, "self_attn.k_proj"},
        {&layer.attention.v, "self_attn.v_proj"}, {&layer.attention.o, "self_attn.o_proj"},
        {&layer.mlp.gate, "mlp.gate_proj"},       {&layer.mlp.up, "mlp.up_proj"},
        {&layer.mlp.down, "mlp.down_proj"}};
    for (const auto& [linear, suffix] : modules) {
      if (!linear->method) continue;  // dense, or absent (an MoE layer's mlp)
      const std::string name = prefix + suffix;
      const Tensor q = linear->method->dequantized_weight().to_f32();
      errors.push_back({name, relative_error(baseline.get(name + ".weight"), q, name)});
    }
  }
  return errors;
}

}  // namespace lowbit::eval
