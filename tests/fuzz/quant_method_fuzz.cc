// libFuzzer target: the quantization methods' own validation of checkpoint tensors. The first byte
// picks a method and scheme (GPTQ v1 / v2 with and without desc_act, AWQ, vLLM fp8 per-tensor and
// block, compressed-tensors W4A16 / W8A8 / FP8, GGUF Q4_0 / Q8_0 / Q6_K blocks); every declared
// tensor gets the declared dtype and shape (what the loader guarantees) and contents taken from
// the input — codes, zero points and g_idx out of range, NaN and infinite scales.
// process_weights_after_loading must accept them or throw a lowbit::Error; accepted layers must
// run apply() and dequantized_weight() cleanly.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace {

using lowbit::DType;
using lowbit::Shape;
using lowbit::Tensor;
namespace q = lowbit::quant;

struct Case {
  const char* method;
  const char* config;
};

const Case kCases[] = {
    {"gptq", R"({"bits": 4, "group_size": 32, "desc_act": false, "sym": true})"},
    {"gptq", R"({"bits": 4, "group_size": 16, "desc_act": true, "sym": false, "checkpoint_format": "gptq_v2"})"},
    {"gptq", R"({"bits": 8, "group_size": -1})"},
    {"awq", R"({"bits": 4, "group_size": 32, "zero_point": true, "version": "gemm"})"},
    {"fp8", R"({"quant_method": "fp8", "activation_scheme": "static"})"},
    {"fp8", R"({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [16, 16]})"},
    {"compressed-tensors", R"({"format": "pack-quantized", "config_groups": {"g": {"targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "int", "symmetric": false, "strategy": "group", "group_size": 16}}}})"},
    {"compressed-tensors", R"({"format": "int-quantized", "config_groups": {"g": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": true, "strategy": "token", "dynamic": true}}}})"},
    {"compressed-tensors", R"({"format": "float-quantized", "config_groups": {"g": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor"},
        "input_activations": {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor", "dynamic": false}}}})"},
    // GGUF blocks as the model loader hands them over (qweight: raw Q4_0 / Q8_0 / Q6_K blocks).
    {"gguf", R"({"modules": {"model.layers.0.mlp.down_proj": "Q4_0"}})"},
    {"gguf", R"({"modules": {"model.layers.0.mlp.down_proj": "Q8_0"}})"},
    {"gguf", R"({"modules": {"model.layers.0.mlp.down_proj": "Q6_K"}})"},
};

// 256 input features: one Q6_K super-block per row.
constexpr int64_t kIn = 256, kOut = 32;

// Shapes compressed-tensors declares loosely ({}), as the schemes above store them.
Shape ct_shape(const std::string& name, size_t c) {
  if (name == "weight_packed") return {kOut, kIn * 4 / 32};
  if (name == "weight_scale") return c == 6 ? Shape{kOut, kIn / 16} : c == 7 ? Shape{kOut, 1} : Shape{1};
  if (name == "weight_zero_point") return {kOut * 4 / 32, kIn / 16};
  if (name == "weight_shape") return {2};
  if (name == "weight_g_idx") return {kIn};
  if (name == "weight") return {kOut, kIn};
  return {1};
}

DType ct_dtype(const std::string& name, size_t c) {
  if (name == "weight_packed" || name == "weight_zero_point" || name == "weight_g_idx") return DType::I32;
  if (name == "weight_shape") return DType::I64;
  if (name == "weight") return c == 8 ? DType::F8_E4M3 : DType::I8;
  if (name == "weight_scale") return DType::BF16;
  return DType::F32;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t c = data[0] % (sizeof(kCases) / sizeof(kCases[0]));
  const uint8_t* bytes = data + 2;
  const size_t available = size - 2;
  size_t cursor = 0;
  try {
    auto config = q::make_quantization_config(kCases[c].method,
                                              nlohmann::json::parse(kCases[c].config), "fuzz");
    q::LayerInfo info;
    info.prefix = "model.layers.0.mlp.down_proj";
    info.in_features = kIn;
    info.out_features = kOut;
    std::unique_ptr<q::LinearMethod> method = config->get_quant_method(info);
    if (!method) return 0;
    q::LayerParams params(info);
    params.source = "fuzz";
    method->create_weights(params);
    for (const q::ParamSpec& spec : params.declared()) {
      if (!spec.required && (data[1] >> (cursor % 8) & 1)) continue;  // optional: sometimes absent
      const bool loose = spec.shape.empty();
      const Shape shape = loose ? ct_shape(spec.name, c) : spec.shape;
      const DType dtype = loose ? ct_dtype(spec.name, c) : spec.dtypes.front();
      Tensor t = Tensor::zeros(dtype, shape);
      auto* out = t.data_as<uint8_t>();
      for (size_t i = 0; i < t.nbytes() && available > 0; ++i) out[i] = bytes[(cursor++) % available];
      params.set(spec.name, std::move(t));
    }
    method->process_weights_after_loading(params);
    std::vector<float> x(3 * kIn), y(3 * kOut);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    method->apply(x.data(), 3, nullptr, y.data());
    method->dequantized_weight();
  } catch (const lowbit::Error&) {
  }
  return 0;
}
