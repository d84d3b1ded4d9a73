// quant_method "modelopt" (src/quant/methods/modelopt.cc): both config shapes ModelOpt writes,
// hand-checked FP8 and NVFP4 layers (values from FORMATS.md §3 examples 5 and 6), the exclusion
// list, detection from hf_quant_config.json, and errors that name the tensor or field. The
// checkpoints ModelOpt itself exports are in tests/golden/quant_formats/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"
#include "quant/methods/resolve.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

const nlohmann::json kFp8Config = {{"quant_method", "modelopt"},
                                   {"quant_algo", "FP8"},
                                   {"ignore", {"lm_head", "model.embed_tokens"}},
                                   {"producer", {{"name", "modelopt"}, {"version", "0.47.0"}}}};
const nlohmann::json kNvfp4HfQuantConfig = {
    {"producer", {{"name", "modelopt"}, {"version", "0.47.0"}}},
    {"quantization",
     {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"kv_cache_quant_algo", nullptr},
      {"exclude_modules", {"lm_head", "model.layers.1", "*mlp.gate"}}}}};

LayerInfo linear(const std::string& prefix, int64_t out, int64_t in) {
  LayerInfo info;
  info.prefix = prefix;
  info.out_features = out;
  info.in_features = in;
  info.params_dtype = DType::F32;
  return info;
}

Tensor bytes(std::vector<uint8_t> v, Shape shape, DType dtype) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<uint8_t>());
  return t;
}

Tensor scalar(float v) { return Tensor::from_f32(&v, {}, DType::F32); }

std::unique_ptr<LinearMethod> load(const nlohmann::json& config, const LayerInfo& info,
                                   const std::map<std::string, Tensor>& tensors) {
  auto c = make_quantization_config("modelopt", config, "test");
  std::unique_ptr<LinearMethod> m = c->get_quant_method(info);
  if (!m) throw std::runtime_error("layer not quantized");
  LayerParams p(info);
  p.source = "test.safetensors";
  m->create_weights(p);
  for (const auto& [name, t] : tensors) p.set(name, t);
  m->process_weights_after_loading(p);
  return m;
}

// FORMATS.md example 5: e4m3 bytes [0x68, 0xFE, 0x72, 0x7B] x 0.0078125 = [0.5, -3.5, 1.25, 2.75].
std::map<std::string, Tensor> fp8_tensors(float input_scale) {
  return {{"weight", bytes({0x68, 0xFE, 0x72, 0x7B}, {1, 4}, DType::F8_E4M3)},
          {"weight_scale", scalar(0.0078125f)},
          {"input_scale", scalar(input_scale)}};
}

TEST(ModelOpt, RegisteredWithItsConfigFile) {
  for (const char* name : {"modelopt", "modelopt_fp4"}) {
    const MethodDescription d = describe_quantization(name);
    EXPECT_EQ(d.name, "modelopt");
    EXPECT_EQ(d.config_filenames, std::vector<std::string>{"hf_quant_config.json"});
    EXPECT_FALSE(d.kernels.empty());
  }
}

TEST(ModelOptFp8, WeightTimesScaleAndStaticInputs) {
  const auto m = load(kFp8Config, linear("model.layers.0.mlp.up_proj", 1, 4), fp8_tensors(1.0f / 64));
  const Tensor w = m->dequantized_weight();
  const std::vector<float> expected = {0.5f, -3.5f, 1.25f, 2.75f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.data_as<const float>()[i], expected[i]);
  // input_scale 1/64: 1, 2, 3 are e4m3 values after x/s; 10/s = 640 saturates at 448 → 7.
  // Without the static input quantization y would be 24.75.
  const float x[4] = {1, 2, 3, 10};
  float y = 0;
  m->apply(x, 1, nullptr, &y);
  EXPECT_FLOAT_EQ(y, 0.5f - 7.0f + 3.75f + 7 * 2.75f);
}

TEST(ModelOptFp8, BadScalesNameTheTensor) {
  auto tensors = fp8_tensors(0.01f);
  const float two[2] = {0.1f, 0.2f};
  tensors["weight_scale"] = Tensor::from_f32(two, {2}, DType::F32);
  try {
    load(kFp8Config, linear("model.layers.0.mlp.up_proj", 1, 4), tensors);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.up_proj.weight_scale"),
              std::string::npos)
        << e.what();
  }
  tensors = fp8_tensors(0.01f);
  tensors.erase("input_scale");
  EXPECT_THROW(load(kFp8Config, linear("model.layers.0.mlp.up_proj", 1, 4), tensors),
               InvalidArgument);
  tensors = fp8_tensors(-1.0f);
  EXPECT_THROW(load(kFp8Config, linear("model.layers.0.mlp.up_proj", 1, 4), tensors),
               InvalidArgument);
}

TEST(ModelOptNvfp4, BlockScaleTimesGlobalScaleTimesE2m1) {
  // FORMATS.md example 6's packed row: codes [7,13,3,1,0,8,0,2,4,9,1,5,15,0,6,11] = e2m1
  // [6,-3,1.5,0.5,0,-0,0,1,2,-0.5,0.5,3,-6,0,4,-1.5]. Row 0: weight_scale fp8 0x78 = 256,
  // row 1: 0x7E = 448; weight_scale_2 = 2^-9 → blocks 0.5 and 0.875.
  const std::vector<uint8_t> row = {0xD7, 0x13, 0x80, 0x20, 0x94, 0x51, 0x0F, 0xB6};
  std::vector<uint8_t> packed = row;
  packed.insert(packed.end(), row.begin(), row.end());
  const float inv512 = 1.0f / 512;
  const auto m = load(kNvfp4HfQuantConfig, linear("model.layers.0.self_attn.q_proj", 2, 16),
                      {{"weight", bytes(packed, {2, 8}, DType::U8)},
                       {"weight_scale", bytes({0x78, 0x7E}, {2, 1}, DType::F8_E4M3)},
                       {"weight_scale_2", scalar(inv512)},
                       {"input_scale", scalar(0.01f)}});
  const std::vector<float> e2m1 = {6, -3, 1.5f, 0.5f, 0, -0.0f, 0, 1, 2, -0.5f, 0.5f, 3, -6, 0, 4, -1.5f};
  const Tensor w = m->dequantized_weight();
  ASSERT_EQ(w.shape(), (Shape{2, 16}));
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(w.data_as<const float>()[k], e2m1[k] * 0.5f) << k;
    EXPECT_EQ(w.data_as<const float>()[16 + k], e2m1[k] * 0.875f) << k;
  }
}

TEST(ModelOptNvfp4, ShapesAndDtypesAreDeclared) {
  auto c = make_quantization_config("modelopt", kNvfp4HfQuantConfig, "test");
  LayerParams p(linear("model.layers.0.self_attn.q_proj", 4, 32));
  c->get_quant_method(p.info())->create_weights(p);
  std::map<std::string, ParamSpec> specs;
  for (const ParamSpec& s : p.declared()) specs[s.name] = s;
  EXPECT_EQ(specs.at("weight").shape, (Shape{4, 16}));
  EXPECT_EQ(specs.at("weight").dtypes, std::vector<DType>{DType::U8});
  EXPECT_EQ(specs.at("weight_scale").shape, (Shape{4, 2}));
  EXPECT_EQ(specs.at("weight_scale").dtypes, std::vector<DType>{DType::F8_E4M3});
  EXPECT_TRUE(specs.at("weight_scale_2").required);
  EXPECT_FALSE(specs.at("input_scale").required);
  // in_features not a multiple of the group size.
  LayerParams odd(linear("model.layers.0.self_attn.q_proj", 4, 24));
  EXPECT_THROW(c->get_quant_method(odd.info())->create_weights(odd), Unsupported);
}

TEST(ModelOpt, ExcludedModulesStayInFloat) {
  auto c = make_quantization_config("modelopt", kNvfp4HfQuantConfig, "test");
  EXPECT_NE(c->get_quant_method(linear("model.layers.0.mlp.up_proj", 16, 16)), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("model.layers.1.mlp.up_proj", 16, 16)), nullptr);  // prefix
  EXPECT_NE(c->get_quant_method(linear("model.layers.10.mlp.up_proj", 16, 16)), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("model.layers.0.mlp.gate", 16, 16)), nullptr);  // glob
  LayerInfo head = linear("lm_head", 16, 16);
  head.kind = LayerKind::LmHead;
  EXPECT_EQ(c->get_quant_method(head), nullptr);
}

TEST(ModelOpt, UnknownAlgorithmsNameTheField) {
  nlohmann::json j = kFp8Config;
  j["quant_algo"] = "W4A8_AWQ";
  try {
    make_quantization_config("modelopt", j, "ckpt/config.json: quantization_config");
    ADD_FAILURE() << "no error";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("quantization_config.quant_algo 'W4A8_AWQ'"),
              std::string::npos)
        << e.what();
  }
  j.erase("quant_algo");
  EXPECT_THROW(make_quantization_config("modelopt", j, "test"), InvalidArgument);
}

TEST(ModelOpt, DetectedFromConfigOrHfQuantConfig) {
  fs::path dir = fs::temp_directory_path() / "lowbit-modelopt-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  ResolvedQuantization r = resolve_quantization(dir.string(), kFp8Config.dump(), "config.json", {});
  EXPECT_EQ(r.checkpoint_method, "modelopt");
  // Older exports: only hf_quant_config.json, which has a producer but no quant_method.
  std::ofstream(dir / "hf_quant_config.json") << kNvfp4HfQuantConfig.dump();
  r = resolve_quantization(dir.string(), "", "config.json", {});
  EXPECT_EQ(r.checkpoint_method, "modelopt");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lowbit::quant
