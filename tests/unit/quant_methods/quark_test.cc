// quant_method "quark" (src/quant/methods/quark.cc): hand-packed 4-bit layers in Quark's
// "reorder" layout (AutoAWQ's nibble order, FORMATS.md §3 example 8), the fp8 layer, layer
// selection, and errors naming the field. Quark's own exports are in tests/golden/quant_formats/.
#include <gtest/gtest.h>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {
namespace {

nlohmann::json config(const std::string& dtype, const std::string& pack = "reorder") {
  nlohmann::json weight = {{"dtype", dtype}, {"qscheme", "per_group"}, {"group_size", 8},
                           {"symmetric", false}, {"is_dynamic", false}};
  if (dtype == "fp8_e4m3") weight = {{"dtype", dtype}, {"qscheme", "per_tensor"}};
  return {{"quant_method", "quark"},
          {"export", {{"pack_method", pack}, {"weight_format", "real_quantized"}}},
          {"global_quant_config",
           {{"weight", weight}, {"input_tensors", nullptr}, {"output_tensors", nullptr}, {"bias", nullptr}}},
          {"layer_quant_config", nlohmann::json::object()},
          {"exclude", {"lm_head", "*mlp.gate"}}};
}

LayerInfo linear(const std::string& prefix, int64_t out = 8, int64_t in = 8) {
  LayerInfo info;
  info.prefix = prefix;
  info.out_features = out;
  info.in_features = in;
  info.params_dtype = DType::F32;
  return info;
}

Tensor i32(std::vector<int32_t> v, Shape shape) {
  Tensor t = Tensor::zeros(DType::I32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

std::vector<float> dequantize(const nlohmann::json& cfg, std::map<std::string, Tensor> tensors,
                              int64_t out = 8, int64_t in = 8) {
  auto c = make_quantization_config("quark", cfg, "test");
  const LayerInfo info = linear("model.layers.0.mlp.up_proj", out, in);
  auto m = c->get_quant_method(info);
  LayerParams p(info);
  p.source = "test.safetensors";
  m->create_weights(p);
  for (auto& [n, t] : tensors) p.set(n, t);
  m->process_weights_after_loading(p);
  const Tensor w = m->dequantized_weight();
  return std::vector<float>(w.data_as<const float>(), w.data_as<const float>() + w.numel());
}

TEST(Quark, Uint4ReorderedGroupsWithZeroPoints) {
  // Columns (outputs) 0..7 hold codes 0..7 → word 0x75316420 on every input row; zero points all
  // 2 (0x22222222), scale 0.5: w[n][k] = (n - 2) * 0.5.
  const float half = 0.5f;
  std::vector<float> scales(8, half);
  const std::vector<float> w =
      dequantize(config("uint4"), {{"weight", i32(std::vector<int32_t>(8, 0x75316420), {8, 1})},
                                   {"weight_scale", Tensor::from_f32(scales.data(), {1, 8}, DType::BF16)},
                                   {"weight_zero_point", i32({0x22222222}, {1, 1})}});
  for (int n = 0; n < 8; ++n) {
    for (int k = 0; k < 8; ++k) EXPECT_EQ(w[n * 8 + k], (n - 2) * 0.5f) << n << "," << k;
  }
}

TEST(Quark, Int4CodesAreTwosComplement) {
  // Sequential packing ("order"): nibble i = output i. Codes 0xF (-1) and 0x8 (-8) alternate
  // (word 0x8F8F8F8F), zero point -1 (0xFFFFFFFF), scale 1: w = code + 1.
  std::vector<float> ones(8, 1.0f);
  const std::vector<float> w = dequantize(
      config("int4", "order"),
      {{"weight", i32(std::vector<int32_t>(8, static_cast<int32_t>(0x8F8F8F8Fu)), {8, 1})},
       {"weight_scale", Tensor::from_f32(ones.data(), {1, 8}, DType::F32)},
       {"weight_zero_point", i32({-1}, {1, 1})}});
  for (int n = 0; n < 8; ++n) EXPECT_EQ(w[n * 8], n % 2 == 0 ? 0.0f : -7.0f) << n;
}

TEST(Quark, Fp8WeightTimesScale) {
  // FORMATS.md example 5: e4m3 [0x68, 0xFE, 0x72, 0x7B] x 0.0078125 = [0.5, -3.5, 1.25, 2.75].
  Tensor codes = Tensor::zeros(DType::F8_E4M3, {1, 4});
  const uint8_t b[4] = {0x68, 0xFE, 0x72, 0x7B};
  std::copy(b, b + 4, codes.data_as<uint8_t>());
  const float s = 0.0078125f;
  const std::vector<float> w =
      dequantize(config("fp8_e4m3"), {{"weight", codes}, {"weight_scale", Tensor::from_f32(&s, {}, DType::BF16)}}, 1, 4);
  EXPECT_EQ(w, (std::vector<float>{0.5f, -3.5f, 1.25f, 2.75f}));
}

TEST(Quark, ExcludeAndPerLayerConfigs) {
  nlohmann::json cfg = config("uint4");
  cfg["layer_quant_config"] = {{"*down_proj", config("fp8_e4m3")["global_quant_config"]}};
  auto c = make_quantization_config("quark", cfg, "test");
  EXPECT_EQ(c->get_quant_method(linear("lm_head")), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("model.layers.0.mlp.gate")), nullptr);
  LayerParams p(linear("model.layers.0.mlp.down_proj", 4, 8));
  c->get_quant_method(p.info())->create_weights(p);
  EXPECT_EQ(p.declared()[0].dtypes, std::vector<DType>{DType::F8_E4M3});  // the fp8 override
}

TEST(Quark, UnsupportedSettingsNameTheField) {
  auto expect = [](nlohmann::json cfg, const std::string& needle) {
    try {
      make_quantization_config("quark", cfg, "cfg");
      ADD_FAILURE() << cfg.dump();
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nlohmann::json j = config("int8");
  expect(j, "global_quant_config.weight.dtype 'int8'");
  j = config("uint4");
  j["export"]["weight_format"] = "fake_quantized";
  expect(j, "weight_format 'fake_quantized'");
  j = config("uint4");
  j["global_quant_config"]["output_tensors"] = {{"dtype", "fp8_e4m3"}};
  expect(j, "output_tensors");
  j = config("uint4");
  j.erase("global_quant_config");
  EXPECT_THROW(make_quantization_config("quark", j, "cfg"), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::quant
