// quant_method "torchao" (src/quant/methods/torchao.cc): hand-made layers in the layouts
// transformers 5.17 + torchao 0.18 save (Int4Tensor, Int8Tensor, IntxUnpackedToInt8Tensor,
// flattened into `_weight_*` tensors), config parsing (FqnToConfig precedence, skips) and errors
// naming the field or tensor. Real checkpoints are in tests/golden/quant_formats/torchao_*.
#include <gtest/gtest.h>

#include <cmath>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"
#include "quant/methods/kernel_linear.h"

namespace lowbit::quant {
namespace {

nlohmann::json ao(const std::string& type, nlohmann::json data) {
  return {{"_type", type}, {"_version", 2}, {"_data", std::move(data)}};
}

nlohmann::json granularity(const std::string& type,
                           nlohmann::json data = nlohmann::json::object()) {
  return {{"_type", type}, {"_version", 1}, {"_data", std::move(data)}};
}

nlohmann::json config(nlohmann::json quant_type) {
  return {{"quant_method", "torchao"},
          {"quant_type", {{"default", std::move(quant_type)}}},
          {"modules_to_not_convert", nullptr},
          {"include_input_output_embeddings", false},
          {"untie_embedding_weights", false}};
}

nlohmann::json int4(int64_t group, const std::string& packing = "PLAIN") {
  return ao("Int4WeightOnlyConfig",
            {{"group_size", group},
             {"int4_packing_format", {{"_type", "Int4PackingFormat"}, {"_data", packing}}},
             {"int4_choose_qparams_algorithm",
              {{"_type", "Int4ChooseQParamsAlgorithm"}, {"_data", "TINYGEMM"}}},
             {"set_inductor_config", true}});
}

nlohmann::json int8_dynamic(nlohmann::json gran = granularity("PerRow", {{"dim", -1}})) {
  return ao("Int8DynamicActivationInt8WeightConfig",
            {{"act_mapping_type", {{"_type", "MappingType"}, {"_data", "SYMMETRIC"}}},
             {"granularity", std::move(gran)},
             {"reduce_range", false},
             {"weight_only_decode", false}});
}

LayerInfo linear(const std::string& prefix, int64_t out, int64_t in) {
  LayerInfo info;
  info.prefix = prefix;
  info.out_features = out;
  info.in_features = in;
  info.params_dtype = DType::F32;
  return info;
}

template <typename T>
Tensor tensor(DType dtype, std::vector<T> v, Shape shape) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<T>());
  return t;
}

Tensor f32(std::vector<float> v, Shape shape, DType dtype = DType::F32) {
  return Tensor::from_f32(v.data(), std::move(shape), dtype);
}

struct Loaded {
  std::unique_ptr<LinearMethod> method;
  std::vector<float> weight;
};

Loaded load(const nlohmann::json& cfg, const LayerInfo& info,
            std::map<std::string, Tensor> tensors) {
  auto c = make_quantization_config("torchao", cfg, "test");
  Loaded out;
  out.method = c->get_quant_method(info);
  LayerParams p(info);
  p.source = "test.safetensors";
  out.method->create_weights(p);
  for (auto& [n, t] : tensors) p.set(n, t);
  out.method->process_weights_after_loading(p);
  const Tensor w = out.method->dequantized_weight();
  out.weight.assign(w.data_as<const float>(), w.data_as<const float>() + w.numel());
  return out;
}

TEST(TorchAo, Int4PlainHasFloatZeroPoints) {
  // Row 0 holds q = 0, 1, -1, 7 (bytes 0x10, 0x7F: element 2j in the low nibble), row 1 holds
  // -8, 2, 3, -2 (0x28, 0xE3). One group of 2 columns per scale; scale and zero are [K/g, N]:
  // group 0 of both rows scale 0.5 / 0.25, zeros 1.0 / -2.0; group 1 scale 2 / 1, zeros 0.5 / 0.
  const LayerInfo info = linear("model.layers.0.mlp.up_proj", 2, 4);
  const Loaded l =
      load(config(int4(2)), info,
           {{"_weight_qdata", tensor<uint8_t>(DType::I8, {0x10, 0x7F, 0x28, 0xE3}, {2, 2})},
            {"_weight_scale", f32({0.5f, 0.25f, 2.0f, 1.0f}, {2, 2}, DType::BF16)},
            {"_weight_zero_point", f32({1.0f, -2.0f, 0.5f, 0.0f}, {2, 2}, DType::BF16)}});
  EXPECT_EQ(l.method->kernel_name().rfind("dequant", 0), 0u) << l.method->kernel_name();
  const std::vector<float> want = {0 * 0.5f + 1,   1 * 0.5f + 1,  -1 * 2.0f + 0.5f, 7 * 2.0f + 0.5f,
                                   -8 * 0.25f - 2, 2 * 0.25f - 2, 3 * 1.0f,         -2 * 1.0f};
  EXPECT_EQ(l.weight, want);
}

TEST(TorchAo, Int4SkipsLayersTorchaoLeftInFloat) {
  auto c = make_quantization_config("torchao", config(int4(64)), "test");
  EXPECT_EQ(c->get_quant_method(linear("model.layers.0.mlp.down_proj", 8, 96)), nullptr);
  EXPECT_NE(c->get_quant_method(linear("model.layers.0.mlp.down_proj", 8, 128)), nullptr);
  LayerInfo head = linear("lm_head", 8, 128);
  head.kind = LayerKind::LmHead;
  EXPECT_EQ(c->get_quant_method(head), nullptr);
}

TEST(TorchAo, Int8WeightOnlyPerRowRunsOnWna16) {
  const LayerInfo info = linear("model.layers.0.self_attn.q_proj", 2, 4);
  const Loaded l = load(
      config(ao("Int8WeightOnlyConfig",
                {{"granularity", granularity("PerRow", {{"dim", -1}})}, {"group_size", nullptr}})),
      info,
      {{"_weight_qdata", tensor<int8_t>(DType::I8, {-128, -1, 0, 127, 5, -5, 64, -64}, {2, 4})},
       {"_weight_scale", f32({0.5f, 0.125f}, {2, 1})},
       {"_weight_zero_point", tensor<int8_t>(DType::I8, {0, 0}, {2, 1})}});
  EXPECT_EQ(l.method->kernel_name().rfind("wna16", 0), 0u) << l.method->kernel_name();
  EXPECT_EQ(l.weight, (std::vector<float>{-64, -0.5f, 0, 63.5f, 0.625f, -0.625f, 8, -8}));
}

TEST(TorchAo, Int8PerTensorAndPerGroupScales) {
  const std::vector<int8_t> q = {1, 2, 3, 4, -1, -2, -3, -4};
  const Loaded tensor_scale =
      load(config(ao("Int8WeightOnlyConfig", {{"granularity", granularity("PerTensor")}})),
           linear("m", 2, 4),
           {{"_weight_qdata", tensor<int8_t>(DType::I8, q, {2, 4})},
            {"_weight_scale", f32({0.25f}, {1, 1})},
            {"_weight_zero_point", tensor<int8_t>(DType::I8, {0}, {1, 1})}});
  EXPECT_EQ(tensor_scale.weight,
            (std::vector<float>{0.25f, 0.5f, 0.75f, 1, -0.25f, -0.5f, -0.75f, -1}));
  const Loaded groups =
      load(config(ao("Int8WeightOnlyConfig",
                     {{"granularity", granularity("PerGroup", {{"group_size", 2}})}})),
           linear("m", 2, 4),
           {{"_weight_qdata", tensor<int8_t>(DType::I8, q, {2, 4})},
            {"_weight_scale", f32({1, 2, 4, 8}, {2, 2})},
            {"_weight_zero_point", tensor<int8_t>(DType::I8, {0, 1, 0, -1}, {2, 2})}});
  EXPECT_EQ(groups.weight, (std::vector<float>{1, 2, 4, 6, -4, -8, -16, -24}));
}

TEST(TorchAo, Int8DynamicActivationsRunOnW8a8PerToken) {
  const Loaded l =
      load(config(int8_dynamic()), linear("m", 2, 4),
           {{"_weight_qdata", tensor<int8_t>(DType::I8, {1, 2, 3, 4, -1, -2, -3, -4}, {2, 4})},
            {"_weight_scale", f32({0.5f, 0.25f}, {2, 1})},
            {"_weight_zero_point", tensor<int8_t>(DType::I8, {0, 0}, {2, 1})}});
  EXPECT_EQ(l.method->kernel_name().rfind("w8a8", 0), 0u) << l.method->kernel_name();
  const auto* k = dynamic_cast<const KernelLinear*>(l.method.get());
  ASSERT_NE(k, nullptr);
  ASSERT_TRUE(k->input_quant().has_value());
  EXPECT_EQ(k->input_quant()->args.strategy, Strategy::Token);
  EXPECT_TRUE(k->input_quant()->args.symmetric);
  // x = [127.5, 0, 0, 0]: scale absmax / 127.5 = 1, and 127.5 rounds to 128, clamped to 127 (as
  // torchao's quantize_affine does): y = 127 · w[:, 0].
  const float x[4] = {127.5f, 0, 0, 0};
  float y[2];
  l.method->apply(x, 1, nullptr, y);
  EXPECT_EQ(y[0], 127 * 0.5f);
  EXPECT_EQ(y[1], -127 * 0.25f);
}

TEST(TorchAo, Int8DynamicPerTensorOrAsymmetricActivationsAreEmulated) {
  nlohmann::json cfg = int8_dynamic(
      nlohmann::json::array({granularity("PerTensor"), granularity("PerRow", {{"dim", -1}})}));
  cfg["_data"]["act_mapping_type"]["_data"] = "ASYMMETRIC";
  const Loaded l =
      load(config(cfg), linear("m", 2, 4),
           {{"_weight_qdata", tensor<int8_t>(DType::I8, {1, 2, 3, 4, -1, -2, -3, -4}, {2, 4})},
            {"_weight_scale", f32({0.5f, 0.25f}, {2, 1})}});
  const auto* k = dynamic_cast<const KernelLinear*>(l.method.get());
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->kernel_name().rfind("wna16", 0), 0u) << k->kernel_name();
  EXPECT_EQ(k->input_quant()->args.strategy, Strategy::Tensor);
  EXPECT_FALSE(k->input_quant()->args.symmetric);
}

TEST(TorchAo, IntxUnpackedInt4GroupsWithZeroPoints) {
  nlohmann::json cfg = ao(
      "IntxWeightOnlyConfig",
      {{"weight_dtype", {{"_type", "torch.dtype"}, {"_data", "int4"}}},
       {"granularity", granularity("PerGroup", {{"group_size", 2}})},
       {"mapping_type", {{"_type", "MappingType"}, {"_data", "ASYMMETRIC"}}},
       {"intx_packing_format", {{"_type", "IntxPackingFormat"}, {"_data", "UNPACKED_TO_INT8"}}}});
  const Loaded l = load(config(cfg), linear("m", 1, 4),
                        {{"_weight_qdata", tensor<int8_t>(DType::I8, {-8, 7, 0, 3}, {1, 4})},
                         {"_weight_scale", f32({0.5f, 2.0f}, {1, 2}, DType::BF16)},
                         {"_weight_zero_point", tensor<int8_t>(DType::I8, {-8, 1}, {1, 2})}});
  EXPECT_EQ(l.method->kernel_name().rfind("wna16", 0), 0u) << l.method->kernel_name();
  EXPECT_EQ(l.weight, (std::vector<float>{0, 7.5f, -2, 4}));
  // A value outside int4 names the tensor.
  try {
    load(config(cfg), linear("m", 1, 4),
         {{"_weight_qdata", tensor<int8_t>(DType::I8, {-9, 7, 0, 3}, {1, 4})},
          {"_weight_scale", f32({0.5f, 2.0f}, {1, 2}, DType::BF16)},
          {"_weight_zero_point", tensor<int8_t>(DType::I8, {0, 0}, {1, 2})}});
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'m._weight_qdata' holds -9"), std::string::npos)
        << e.what();
  }
}

TEST(TorchAo, FqnToConfigPrecedenceAndSkips) {
  const nlohmann::json row = ao("Int8WeightOnlyConfig", {{"granularity", granularity("PerRow")}});
  const nlohmann::json tensor_cfg =
      ao("Int8WeightOnlyConfig", {{"granularity", granularity("PerTensor")}});
  nlohmann::json map = nlohmann::json::object();
  map["_default"] = row;
  map["re:.*\\.mlp\\..*"] = int4(4);
  map["model.layers.0.mlp.up_proj"] = tensor_cfg;        // module name beats the regex
  map["model.layers.0.mlp.gate_proj.weight"] = nullptr;  // parameter name: left in float
  map["model.layers.1.self_attn.q_proj"] = nullptr;
  nlohmann::json cfg = config({{"_type", "FqnToConfig"},
                               {"_version", 1},
                               {"_data", {{"fqn_to_config", map}, {"module_fqn_to_config", map}}}});
  cfg["modules_to_not_convert"] = {"layers.1"};
  auto c = make_quantization_config("torchao", cfg, "test");
  auto declared_scale = [&](const std::string& prefix) {
    LayerParams p(linear(prefix, 8, 8));
    auto m = c->get_quant_method(p.info());
    if (!m) return Shape{-2};
    m->create_weights(p);
    return p.declared()[1].shape;
  };
  EXPECT_EQ(declared_scale("model.layers.0.self_attn.q_proj"), (Shape{8, 1}));  // _default
  EXPECT_EQ(declared_scale("model.layers.0.mlp.up_proj"), (Shape{1, 1}));
  EXPECT_EQ(declared_scale("model.layers.0.mlp.down_proj"), (Shape{2, 8}));  // int4 [K/g, N]
  EXPECT_EQ(declared_scale("model.layers.0.mlp.gate_proj"), (Shape{-2}));
  EXPECT_EQ(declared_scale("model.layers.1.mlp.up_proj"), (Shape{-2}));          // skipped
  EXPECT_EQ(declared_scale("model.layers.11.self_attn.q_proj"), (Shape{8, 1}));  // not "layers.1"
}

void expect_error(const nlohmann::json& cfg, const std::string& needle, bool unsupported = true) {
  try {
    make_quantization_config("torchao", cfg, "DIR/config.json: quantization_config");
    ADD_FAILURE() << cfg.dump();
  } catch (const Unsupported& e) {
    EXPECT_TRUE(unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const InvalidArgument& e) {
    EXPECT_FALSE(unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TorchAo, UnsupportedSettingsNameTheField) {
  expect_error(config(int4(128, "TILE_PACKED_TO_4D")),
               "quant_type.default._data.int4_packing_format 'TILE_PACKED_TO_4D'");
  nlohmann::json v1 = int4(128);
  v1["_version"] = 1;
  expect_error(config(v1), "pytorch_model.bin");
  nlohmann::json str = config(int4(128));
  str["quant_type"] = "int4_weight_only";
  expect_error(str, "pytorch_model.bin");
  expect_error(config(ao("Float8WeightOnlyConfig", nlohmann::json::object())),
               "quant_type.default._type 'Float8WeightOnlyConfig'");
  nlohmann::json rr = int8_dynamic();
  rr["_data"]["reduce_range"] = true;
  expect_error(config(rr), "_data.reduce_range");
  nlohmann::json emb = config(int4(128));
  emb["include_input_output_embeddings"] = true;
  expect_error(emb, "include_input_output_embeddings");
  nlohmann::json no_type = config(int4(128));
  no_type.erase("quant_type");
  expect_error(no_type, "quant_type", false);
  expect_error(config(ao("Int8WeightOnlyConfig", {{"granularity", granularity("PerGroup")}})),
               "granularity._data", false);
}

TEST(TorchAo, PreScaledActivationsNameTheTensor) {
  try {
    load(config(ao("Int8WeightOnlyConfig", {{"granularity", granularity("PerRow")}})),
         linear("model.layers.0.mlp.up_proj", 1, 2),
         {{"_weight_qdata", tensor<int8_t>(DType::I8, {1, 2}, {1, 2})},
          {"_weight_scale", f32({1.0f}, {1, 1})},
          {"_weight_act_pre_scale", f32({1.0f, 1.0f}, {2})}});
    ADD_FAILURE();
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "test.safetensors: tensor 'model.layers.0.mlp.up_proj._weight_act_pre_scale'"),
              std::string::npos)
        << e.what();
  }
}

TEST(TorchAo, ListedWithItsKernels) {
  const MethodDescription d = describe_quantization("torchao");
  EXPECT_EQ(d.min_capability, 75);
  std::vector<std::string> cpu;  // CUDA builds add the GPU kernels (gpu_linear_kernels_test.cc)
  for (const KernelSpec& k : d.kernels) {
    if (k.isa != KernelSpec::Isa::Cuda) cpu.push_back(k.name);
  }
  ASSERT_EQ(cpu.size(), 3u);
  EXPECT_EQ(cpu[0], "wna16");
  EXPECT_EQ(cpu[2], "dequant");
}

}  // namespace
}  // namespace lowbit::quant
