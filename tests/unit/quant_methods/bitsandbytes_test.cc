// quant_method "bitsandbytes" (src/quant/methods/bitsandbytes.cc): config parsing, hand-packed
// NF4 / FP4 layers (with and without double quantization) in bitsandbytes' layout, LLM.int8()
// weights and its input decomposition on hand-computed values, module skipping, and errors that
// name the tensor or field. Checkpoints transformers + bitsandbytes wrote are in
// tests/golden/quant_formats/bnb_*.
#include <gtest/gtest.h>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {
namespace {

// What transformers 5.17 writes (BitsAndBytesConfig.to_dict()), for NF4 with compute dtype bf16.
nlohmann::json config4(const std::string& type = "nf4") {
  return {{"_load_in_4bit", true},
          {"_load_in_8bit", false},
          {"bnb_4bit_compute_dtype", "bfloat16"},
          {"bnb_4bit_quant_storage", "uint8"},
          {"bnb_4bit_quant_type", type},
          {"bnb_4bit_use_double_quant", false},
          {"llm_int8_enable_fp32_cpu_offload", false},
          {"llm_int8_has_fp16_weight", false},
          {"llm_int8_skip_modules", nullptr},
          {"llm_int8_threshold", 6.0},
          {"load_in_4bit", true},
          {"load_in_8bit", false},
          {"quant_method", "bitsandbytes"}};
}

nlohmann::json config8(double threshold) {
  nlohmann::json j = config4("fp4");
  j["_load_in_4bit"] = j["load_in_4bit"] = false;
  j["_load_in_8bit"] = j["load_in_8bit"] = true;
  j["llm_int8_threshold"] = threshold;
  return j;
}

LayerInfo linear(const std::string& prefix, int64_t out, int64_t in) {
  LayerInfo info;
  info.prefix = prefix;
  info.out_features = out;
  info.in_features = in;
  info.params_dtype = DType::F32;
  return info;
}

Tensor u8(std::vector<uint8_t> v, Shape shape) {
  Tensor t = Tensor::zeros(DType::U8, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<uint8_t>());
  return t;
}

Tensor json_bytes(const nlohmann::json& j) {
  const std::string s = j.dump();
  return u8(std::vector<uint8_t>(s.begin(), s.end()), {static_cast<int64_t>(s.size())});
}

Tensor f32(std::vector<float> v) {
  return Tensor::from_f32(v.data(), {static_cast<int64_t>(v.size())}, DType::F32);
}

// bitsandbytes' codebooks (functional.get_4bit_type), the values quant_map holds.
const std::vector<float> kNf4 = {-1.0f,
                                 -0.6961928009986877f,
                                 -0.5250730514526367f,
                                 -0.39491748809814453f,
                                 -0.28444138169288635f,
                                 -0.18477343022823334f,
                                 -0.09105003625154495f,
                                 0.0f,
                                 0.07958029955625534f,
                                 0.16093020141124725f,
                                 0.24611230194568634f,
                                 0.33791524171829224f,
                                 0.44070982933044434f,
                                 0.5626170039176941f,
                                 0.7229568362236023f,
                                 1.0f};
std::vector<float> fp4_book() {
  std::vector<float> v = {0, 0.0625f, 8, 12, 4, 6, 2, 3};
  for (float& x : v) x /= 12;
  for (int i = 0; i < 8; ++i) v.push_back(-v[static_cast<size_t>(i)]);
  return v;
}

const char* kPrefix = "model.layers.0.mlp.down_proj";

std::unique_ptr<LinearMethod> load(const nlohmann::json& cfg, const LayerInfo& info,
                                   const std::map<std::string, Tensor>& tensors) {
  auto c = make_quantization_config("bitsandbytes", cfg, "ckpt/config.json: quantization_config");
  std::unique_ptr<LinearMethod> m = c->get_quant_method(info);
  if (!m) throw std::runtime_error("layer not quantized");
  LayerParams p(info);
  p.source = "ckpt/model.safetensors";
  m->create_weights(p);
  for (const auto& [name, t] : tensors) p.set(name, t);
  m->process_weights_after_loading(p);
  return m;
}

std::vector<float> weights(const LinearMethod& m) {
  const Tensor w = m.dequantized_weight();
  return std::vector<float>(w.data_as<const float>(), w.data_as<const float>() + w.numel());
}

// A [3, 3] NF4 layer, blocksize 4: the 9 codes flattened row-major (two per byte, the first in
// the high nibble, the last byte padded), blocks of the flat index: {0..3}, {4..7}, {8}.
const std::vector<int> kCodes = {15, 0, 7, 8, 14, 1, 2, 13, 3};
std::map<std::string, Tensor> nf4_tensors() {
  nlohmann::json state = {
      {"quant_type", "nf4"}, {"blocksize", 4}, {"dtype", "bfloat16"}, {"shape", {3, 3}}};
  return {{"weight", u8({0xF0, 0x78, 0xE1, 0x2D, 0x30}, {5, 1})},
          {"weight.absmax", f32({2.0f, 0.5f, 4.0f})},
          {"weight.quant_map", f32(kNf4)},
          {"weight.quant_state.bitsandbytes__nf4", json_bytes(state)}};
}

TEST(BitsAndBytes, Registered) {
  const MethodDescription d = describe_quantization("bitsandbytes");
  EXPECT_EQ(d.name, "bitsandbytes");
  EXPECT_EQ(d.min_capability, 70);
  std::vector<std::string> cpu;  // CUDA builds add the GPU kernels (gpu_linear_kernels_test.cc)
  for (const KernelSpec& k : d.kernels) {
    if (k.isa != KernelSpec::Isa::Cuda) cpu.push_back(k.name);
  }
  EXPECT_EQ(cpu, (std::vector<std::string>{"wna16", "dequant"}));
}

TEST(BitsAndBytes, Nf4CodebookTimesFlatBlockAbsmax) {
  const auto m = load(config4(), linear(kPrefix, 3, 3), nf4_tensors());
  const std::vector<float> absmax = {2.0f, 2.0f, 2.0f, 2.0f, 0.5f, 0.5f, 0.5f, 0.5f, 4.0f};
  const std::vector<float> w = weights(*m);
  ASSERT_EQ(w.size(), 9u);
  for (size_t i = 0; i < 9; ++i)
    EXPECT_EQ(w[i], kNf4[static_cast<size_t>(kCodes[i])] * absmax[i]) << i;
  EXPECT_EQ(m->kernel_name().rfind("dequant", 0), 0u);
}

TEST(BitsAndBytes, Fp4WithDoubleQuantizedAbsmax) {
  // nested_quant_map[c] = c / 256, nested_absmax 2, offset 0.25: absmax codes 10 and 200 give
  // 10/128 + 0.25 = 0.328125 and 200/128 + 0.25 = 1.8125 (exact). FP4 codes 3, 11, 5, 13 | 7, 15,
  // 0, 8 are 1, -1, 0.5, -0.5 | 0.25, -0.25, 0, -0.
  std::vector<float> map(256);
  for (int i = 0; i < 256; ++i) map[static_cast<size_t>(i)] = static_cast<float>(i) / 256;
  nlohmann::json state = {{"quant_type", "fp4"},     {"blocksize", 4},
                          {"dtype", "float16"},      {"shape", {1, 8}},
                          {"nested_blocksize", 256}, {"nested_dtype", "float32"},
                          {"nested_offset", 0.25}};
  const auto m = load(config4("fp4"), linear(kPrefix, 1, 8),
                      {{"weight", u8({0x3B, 0x5D, 0x7F, 0x08}, {4, 1})},
                       {"weight.absmax", u8({10, 200}, {2})},
                       {"weight.quant_map", f32(fp4_book())},
                       {"weight.nested_absmax", f32({2.0f})},
                       {"weight.nested_quant_map", f32(map)},
                       {"weight.quant_state.bitsandbytes__fp4", json_bytes(state)}});
  const std::vector<float> expected = {0.328125f, -0.328125f, 0.1640625f, -0.1640625f,
                                       0.453125f, -0.453125f, 0.0f,       -0.0f};
  const std::vector<float> w = weights(*m);
  ASSERT_EQ(w.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(w[i], expected[i]) << i;
}

// The error `tensors` cause names `needle` (a tensor or field) and has type E.
template <typename E>
void expect_error(const std::map<std::string, Tensor>& tensors, const std::string& needle,
                  const nlohmann::json& cfg = config4(), Shape shape = {3, 3}) {
  try {
    load(cfg, linear(kPrefix, shape[0], shape[1]), tensors);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BitsAndBytes, BadQuantStatesNameTheTensor) {
  const std::string state = std::string(kPrefix) + ".weight.quant_state.bitsandbytes__nf4";
  auto t = nf4_tensors();
  t.erase("weight.quant_state.bitsandbytes__nf4");
  expect_error<InvalidArgument>(t, state + "' is missing");
  // The fp4 state where the config says nf4.
  t["weight.quant_state.bitsandbytes__fp4"] =
      nf4_tensors().at("weight.quant_state.bitsandbytes__nf4");
  expect_error<InvalidArgument>(
      t, "bitsandbytes__fp4': the layer is fp4 but quantization_config.bnb_4bit_quant_type is nf4");
  t = nf4_tensors();
  t["weight.quant_state.bitsandbytes__nf4"] = json_bytes({{"quant_type", "nf3"}, {"blocksize", 4}});
  expect_error<Unsupported>(t, state + "': quant_type 'nf3'");
  t["weight.quant_state.bitsandbytes__nf4"] = u8({'{', 'x'}, {2});
  expect_error<InvalidArgument>(t, state + "' is not valid JSON");
  t["weight.quant_state.bitsandbytes__nf4"] = json_bytes(
      {{"quant_type", "nf4"}, {"blocksize", 4}, {"dtype", "bfloat16"}, {"shape", {3, 4}}});
  expect_error<InvalidArgument>(t, state + "': shape [3,4], the layer is [3,3]");
  t["weight.quant_state.bitsandbytes__nf4"] = json_bytes(
      {{"quant_type", "nf4"}, {"blocksize", 0}, {"dtype", "bfloat16"}, {"shape", {3, 3}}});
  expect_error<InvalidArgument>(t, "'blocksize' is missing or not a positive integer");
}

TEST(BitsAndBytes, BadTensorsNameTheTensor) {
  auto t = nf4_tensors();
  t["weight.absmax"] = f32({2.0f, 0.5f});
  expect_error<InvalidArgument>(t,
                                std::string(kPrefix) + ".weight.absmax' has 2 values, expected 3");
  t = nf4_tensors();
  t["weight"] = u8({0xF0, 0x78, 0xE1, 0x2D}, {4, 1});
  expect_error<InvalidArgument>(t, std::string(kPrefix) + ".weight' has shape [4, 1]");
  t = nf4_tensors();
  t["weight.quant_map"] = f32(fp4_book());  // the fp4 codebook on an nf4 layer
  expect_error<InvalidArgument>(
      t, std::string(kPrefix) + ".weight.quant_map' is not bitsandbytes' nf4 codebook");
  t = nf4_tensors();
  t["weight.absmax"] = u8({1, 2, 3}, {3});  // U8 codes without the nested_* state fields
  expect_error<InvalidArgument>(t, ".weight.absmax' must be F32 without double quantization");
  t = nf4_tensors();
  t["weight.quant_state.bitsandbytes__nf4"] = json_bytes({{"quant_type", "nf4"},
                                                          {"blocksize", 4},
                                                          {"dtype", "bfloat16"},
                                                          {"shape", {3, 3}},
                                                          {"nested_blocksize", 256},
                                                          {"nested_offset", 0.5}});
  t["weight.absmax"] = u8({1, 2, 3}, {3});
  expect_error<InvalidArgument>(t, std::string(kPrefix) + ".weight.nested_quant_map' is missing");
}

TEST(BitsAndBytes, ConfigErrorsNameTheField) {
  nlohmann::json j = config4("int4");
  expect_error<Unsupported>(nf4_tensors(), "quantization_config.bnb_4bit_quant_type 'int4'", j);
  j = config4();
  j["bnb_4bit_quant_storage"] = "bfloat16";
  expect_error<Unsupported>(nf4_tensors(),
                            "quantization_config.bnb_4bit_quant_storage \"bfloat16\"", j);
  j = config4();
  j["load_in_8bit"] = true;
  expect_error<InvalidArgument>(nf4_tensors(), "exactly one of load_in_4bit and load_in_8bit", j);
  j = config8(-1.0);
  expect_error<InvalidArgument>(nf4_tensors(),
                                "quantization_config.llm_int8_threshold must be a number >= 0", j);
  j = config8(6.0);
  j["llm_int8_has_fp16_weight"] = true;
  expect_error<Unsupported>(nf4_tensors(), "quantization_config.llm_int8_has_fp16_weight", j);
}

TEST(BitsAndBytes, SkippedModulesAndLmHeadStayInFloat) {
  nlohmann::json j = config4();
  j["llm_int8_skip_modules"] = {"mlp", "model.layers.1", "o_proj"};
  auto c = make_quantization_config("bitsandbytes", j, "test");
  EXPECT_NE(c->get_quant_method(linear("model.layers.0.self_attn.q_proj", 8, 8)), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("model.layers.0.mlp.up_proj", 8, 8)), nullptr);  // component
  EXPECT_EQ(c->get_quant_method(linear("model.layers.1.self_attn.q_proj", 8, 8)),
            nullptr);  // prefix
  EXPECT_NE(c->get_quant_method(linear("model.layers.10.self_attn.q_proj", 8, 8)), nullptr);
  EXPECT_EQ(c->get_quant_method(linear("model.layers.0.self_attn.o_proj", 8, 8)),
            nullptr);  // suffix
  LayerInfo head = linear("lm_head", 8, 8);
  head.kind = LayerKind::LmHead;
  EXPECT_EQ(make_quantization_config("bitsandbytes", config4(), "test")->get_quant_method(head),
            nullptr);
}

// LLM.int8(): weight [1, 4] = [1, 2, 3, 4] (codes 1..4, SCB 127 → scale 1).
std::unique_ptr<LinearMethod> int8_layer(double threshold,
                                         std::map<std::string, Tensor> extra = {}) {
  Tensor q = Tensor::zeros(DType::I8, {1, 4});
  for (int i = 0; i < 4; ++i) q.data_as<int8_t>()[i] = static_cast<int8_t>(i + 1);
  std::map<std::string, Tensor> t = {{"weight", q}, {"SCB", f32({127.0f})}};
  for (auto& [k, v] : extra) t[k] = v;
  return load(config8(threshold), linear(kPrefix, 1, 4), t);
}

TEST(BitsAndBytesInt8, WeightsAreCodesTimesScbOver127) {
  Tensor q = Tensor::zeros(DType::I8, {2, 2});
  const int8_t codes[4] = {127, -127, 5, -3};
  std::copy(codes, codes + 4, q.data_as<int8_t>());
  const auto m =
      load(config8(6.0), linear(kPrefix, 2, 2),
           {{"weight", q}, {"SCB", f32({127.0f, 254.0f})}, {"weight_format", u8({0}, {})}});
  EXPECT_EQ(weights(*m), (std::vector<float>{127, -127, 10, -6}));
  EXPECT_EQ(m->kernel_name().rfind("wna16", 0), 0u);
}

TEST(BitsAndBytesInt8, InputsQuantizedPerRowWithOutlierColumnsInFloat) {
  const auto m = int8_layer(6.0);
  // Row 0: 8 >= 6 makes column 3 an outlier column (kept in float); the row absmax of the rest
  // is 1 → codes round(0.5·127) = 64 (half to even), -127, round(31.75) = 32.
  // Row 1 has no outlier, but column 3 is one for the whole batch; its value 1.0 still counts
  // in the row absmax (bitsandbytes zeroes outlier values, not columns, before it): codes 32, 64,
  // -16 of 1/127.
  const float x[8] = {0.5f, -1.0f, 0.25f, 8.0f, 0.25f, 0.5f, -0.125f, 1.0f};
  float y[2];
  m->apply(x, 2, nullptr, y);
  EXPECT_NEAR(y[0], (64 - 2 * 127 + 3 * 32) / 127.0f + 32, 1e-5);  // weight-only: 31.25
  EXPECT_NEAR(y[1], (32 + 2 * 64 - 3 * 16) / 127.0f + 4, 1e-5);    // weight-only: 4.875
  // One row alone gives its own first row the same result.
  m->apply(x, 1, nullptr, y);
  EXPECT_NEAR(y[0], (64 - 2 * 127 + 3 * 32) / 127.0f + 32, 1e-5);
}

TEST(BitsAndBytesInt8, ThresholdZeroQuantizesEveryColumn) {
  // absmax 8 → 127/8 per unit: codes 8, -16, 4, 127 of 8/127.
  const auto m = int8_layer(0.0);
  const float x[4] = {0.5f, -1.0f, 0.25f, 8.0f};
  float y = 0;
  m->apply(x, 1, nullptr, &y);
  EXPECT_NEAR(y, (8 - 2 * 16 + 3 * 4 + 4 * 127) * 8 / 127.0f, 1e-5);
}

TEST(BitsAndBytesInt8, BadTensorsNameTheTensor) {
  try {
    int8_layer(6.0, {{"weight_format", u8({1}, {})}});
    ADD_FAILURE() << "no error";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(kPrefix) + ".weight_format' is 1"),
              std::string::npos)
        << e.what();
  }
  try {
    int8_layer(6.0, {{"SCB", f32({1.0f, 2.0f})}});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(kPrefix) + ".SCB' has 2 values"),
              std::string::npos)
        << e.what();
  }
  auto c = make_quantization_config("bitsandbytes", config8(6.0), "test");
  LayerParams p(linear(kPrefix, 3, 5));
  c->get_quant_method(p.info())->create_weights(p);
  EXPECT_EQ(p.declared()[0].shape, (Shape{3, 5}));
  EXPECT_EQ(p.declared()[0].dtypes, std::vector<DType>{DType::I8});
  EXPECT_EQ(p.declared()[1].shape, (Shape{3}));
}

}  // namespace
}  // namespace lowbit::quant
