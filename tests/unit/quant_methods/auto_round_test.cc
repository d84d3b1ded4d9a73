// quant_method "auto-round" (src/quant/methods/auto_round.cc): the packing_format names the layout
// (GPTQ v1 / v2 zeros, AutoAWQ GEMM), extra_config and block_name_to_quantize choose the layers,
// unsupported exports fail naming the field. Layers here are hand-packed from the layouts of
// FORMATS.md §3; the checkpoints auto-round itself writes are in tests/golden/quant_formats/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"
#include "quant/methods/resolve.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

nlohmann::json base_config(const std::string& packing) {
  return {{"quant_method", "auto-round"}, {"bits", 4},        {"group_size", 8},
          {"sym", true},                  {"data_type", "int"}, {"packing_format", packing},
          {"block_name_to_quantize", "model.layers"}};
}

LayerInfo linear(const std::string& prefix, LayerKind kind = LayerKind::Linear) {
  LayerInfo info;
  info.kind = kind;
  info.prefix = prefix;
  info.in_features = 8;
  info.out_features = 8;
  info.params_dtype = DType::F32;
  return info;
}

Tensor i32(std::vector<int32_t> v, Shape shape) {
  Tensor t = Tensor::zeros(DType::I32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

Tensor f16(float value, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n), value);
  return Tensor::from_f32(v.data(), shape, DType::F16);
}

// Dequantized weight [8, 8] of one layer built from `tensors` under `config`.
std::vector<float> dequantize(const nlohmann::json& config, const std::map<std::string, Tensor>& tensors) {
  auto c = make_quantization_config("auto-round", config, "test");
  const LayerInfo info = linear("model.layers.0.mlp.up_proj");
  std::unique_ptr<LinearMethod> m = c->get_quant_method(info);
  if (!m) throw std::runtime_error("layer not quantized");
  LayerParams p(info);
  p.source = "test.safetensors";
  m->create_weights(p);
  for (const auto& [name, t] : tensors) p.set(name, t);
  m->process_weights_after_loading(p);
  const Tensor w = m->dequantized_weight();
  return std::vector<float>(w.data_as<const float>(), w.data_as<const float>() + w.numel());
}

// GPTQ layout, every column's word 0xFEDCBA98: input row k holds code 8 + k (FORMATS.md §3.1);
// qzeros 0x77777777 (every zero stored as 7); scales 0.5.
std::map<std::string, Tensor> gptq_tensors() {
  return {{"qweight", i32(std::vector<int32_t>(8, static_cast<int32_t>(0xFEDCBA98u)), {1, 8})},
          {"qzeros", i32({0x77777777}, {1, 1})},
          {"scales", f16(0.5f, {1, 8})}};
}

TEST(AutoRound, RegisteredUnderItsNames) {
  for (const char* name : {"auto-round", "intel/auto-round", "auto_round"}) {
    ASSERT_TRUE(is_registered_quantization(name)) << name;
    const MethodDescription d = describe_quantization(name);
    EXPECT_EQ(d.name, "auto-round");
    EXPECT_FALSE(d.kernels.empty());
    EXPECT_EQ(d.config_filenames, std::vector<std::string>{"quantization_config.json"});
  }
}

TEST(AutoRound, GptqPackingV1AddsOneToTheStoredZero) {
  // auto_round:auto_gptq (what symmetric schemes get): zero = 7 + 1, w[n][k] = (8 + k - 8) * 0.5.
  for (const char* packing : {"auto_round:auto_gptq", "auto_round:gptq", "auto"}) {
    const std::vector<float> w = dequantize(base_config(packing), gptq_tensors());
    for (int n = 0; n < 8; ++n) {
      for (int k = 0; k < 8; ++k) EXPECT_EQ(w[n * 8 + k], 0.5f * k) << packing << " " << n << "," << k;
    }
  }
}

TEST(AutoRound, PlainPackingKeepsTheStoredZero) {
  // "auto_round" / "auto_round:gptqmodel" (asymmetric exports): zero = 7, w = (8 + k - 7) * 0.5.
  for (const char* packing : {"auto_round", "auto_round:gptqmodel"}) {
    nlohmann::json cfg = base_config(packing);
    cfg["sym"] = false;
    const std::vector<float> w = dequantize(cfg, gptq_tensors());
    for (int k = 0; k < 8; ++k) EXPECT_EQ(w[3 * 8 + k], 0.5f * (k + 1)) << packing;
  }
}

TEST(AutoRound, AwqPackingUsesTheGemmOrder) {
  // FORMATS.md §3 example 8: columns 0..7 holding codes 0..7 pack to 0x75316420; zero 0, scale 1.
  nlohmann::json cfg = base_config("auto_round:auto_awq");
  cfg["sym"] = false;
  const std::vector<float> w =
      dequantize(cfg, {{"qweight", i32(std::vector<int32_t>(8, 0x75316420), {8, 1})},
                       {"qzeros", i32({0}, {1, 1})},
                       {"scales", f16(1.0f, {1, 8})}});
  for (int n = 0; n < 8; ++n) {
    for (int k = 0; k < 8; ++k) EXPECT_EQ(w[n * 8 + k], static_cast<float>(n)) << n << "," << k;
  }
}

TEST(AutoRound, LayersComeFromBlocksAndExtraConfig) {
  nlohmann::json cfg = base_config("auto_round:auto_gptq");
  cfg["extra_config"] = {{"model.layers.1.mlp.down_proj", {{"bits", 16}}},
                         {"lm_head", {{"bits", 8}, {"group_size", 8}}},
                         {".*self_attn\\.o_proj", {{"bits", 16}}}};
  auto c = make_quantization_config("auto-round", cfg, "test");
  EXPECT_NE(c->get_quant_method(linear("model.layers.0.mlp.down_proj")), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("model.layers.1.mlp.down_proj")), nullptr);  // bits 16
  // An exact name is not a pattern: "model.layers.1.mlp.down_proj" must not reach layer 11.
  EXPECT_NE(c->get_quant_method(linear("model.layers.11.mlp.down_proj")), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("model.layers.3.self_attn.o_proj")), nullptr);  // regex
  EXPECT_NE(c->get_quant_method(linear("lm_head", LayerKind::LmHead)), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("vision.blocks.0.fc1")), nullptr);  // outside the blocks
  EXPECT_EQ(c->get_quant_method(linear("model.embed_tokens", LayerKind::Embedding)), nullptr);
  cfg.erase("extra_config");
  c = make_quantization_config("auto-round", cfg, "test");
  EXPECT_EQ(c->get_quant_method(linear("lm_head", LayerKind::LmHead)), nullptr);
}

TEST(AutoRound, PerLayerBitsReachTheLayer) {
  // extra_config bits 8 on the layer: one code per byte, qweight [8 * 8 / 32, 8].
  nlohmann::json cfg = base_config("auto_round:auto_gptq");
  cfg["extra_config"] = {{"model.layers.0.mlp.up_proj", {{"bits", 8}}}};
  // Input rows 4j..4j+3 in word row j, 8 bits each: codes 128 + k, zeros stored 127 (v1: 128).
  std::vector<int32_t> words;
  for (int j = 0; j < 2; ++j) {
    uint32_t word = 0;
    for (int i = 0; i < 4; ++i) word |= static_cast<uint32_t>(128 + 4 * j + i) << (8 * i);
    for (int n = 0; n < 8; ++n) words.push_back(static_cast<int32_t>(word));
  }
  const std::vector<float> w =
      dequantize(cfg, {{"qweight", i32(words, {2, 8})},
                       {"qzeros", i32({0x7F7F7F7F, 0x7F7F7F7F}, {1, 2})},
                       {"scales", f16(0.25f, {1, 8})}});
  for (int k = 0; k < 8; ++k) EXPECT_EQ(w[5 * 8 + k], 0.25f * k);
}

TEST(AutoRound, UnsupportedExportsNameTheField) {
  auto expect_unsupported = [](nlohmann::json cfg, const std::string& needle) {
    try {
      make_quantization_config("auto-round", cfg, "ckpt/config.json: quantization_config");
      ADD_FAILURE() << "no error for " << cfg.dump();
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_unsupported(base_config("auto_round:fp8_static"), "packing_format 'auto_round:fp8_static'");
  nlohmann::json nv = base_config("auto_round:llm_compressor");
  expect_unsupported(nv, "packing_format");
  nlohmann::json fp = base_config("auto_round:auto_gptq");
  fp["data_type"] = "nv_fp";
  expect_unsupported(fp, "data_type 'nv_fp'");
  nlohmann::json act = base_config("auto_round:auto_gptq");
  act["act_bits"] = 8;
  expect_unsupported(act, "act_bits 8");
  nlohmann::json three = base_config("auto_round:auto_gptq");
  three["bits"] = 3;
  expect_unsupported(three, "bits 3");
  nlohmann::json missing = base_config("auto_round");
  missing.erase("bits");
  EXPECT_THROW(make_quantization_config("auto-round", missing, "test"), InvalidArgument);
  nlohmann::json bad = base_config("auto_round");
  bad["sym"] = "yes";
  EXPECT_THROW(make_quantization_config("auto-round", bad, "test"), InvalidArgument);
}

TEST(AutoRound, MissingOrMisshapenTensorsNameTheTensor) {
  auto tensors = gptq_tensors();
  tensors.erase("scales");
  try {
    dequantize(base_config("auto_round:auto_gptq"), tensors);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.up_proj.scales"), std::string::npos)
        << e.what();
  }
  // The GPTQ layer declares [K/8, N] qweight: what the loader checks against the file.
  auto c = make_quantization_config("auto-round", base_config("auto_round:auto_gptq"), "test");
  LayerParams p(linear("model.layers.0.mlp.up_proj"));
  c->get_quant_method(p.info())->create_weights(p);
  ASSERT_FALSE(p.declared().empty());
  EXPECT_EQ(p.declared()[0].name, "qweight");
  EXPECT_EQ(p.declared()[0].shape, (Shape{1, 8}));
}

fs::path model_dir(const std::string& name, const std::string& config_json) {
  fs::path dir = fs::temp_directory_path() / ("lowbit-auto-round-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json;
  return dir;
}

TEST(AutoRound, DetectedFromConfigOrItsOwnFile) {
  nlohmann::json q = base_config("auto_round:auto_gptq");
  q["quant_method"] = "intel/auto-round";
  fs::path dir = model_dir("config", "{}");
  ResolvedQuantization r = resolve_quantization(dir.string(), q.dump(), "config.json", {});
  EXPECT_EQ(r.checkpoint_method, "auto-round");
  // Without quantization_config in config.json: auto-round's quantization_config.json.
  dir = model_dir("file", "{}");
  std::ofstream(dir / "quantization_config.json") << base_config("auto_round").dump();
  r = resolve_quantization(dir.string(), "", "config.json", {});
  EXPECT_EQ(r.checkpoint_method, "auto-round");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lowbit::quant
