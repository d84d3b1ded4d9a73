// quant_method "deepspeedfp" (src/quant/methods/deepspeedfp.cc): DeepSpeed's FP8 / FP6 encoding on
// hand-computed groups (codes, packed bytes, dequantized values, including the kernel's rounding
// ties, its clamp of tiny values and its code for exact zeros), the packed bytes of the fixtures
// in tests/golden/quant_formats/deepspeedfp_* (written by scripts/fixtures/
// make_deepspeedfp_fixtures.py, an independent value-domain re-implementation), config parsing,
// detection, and errors that name the field or tensor.
#include "quant/methods/deepspeedfp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/float_convert.h"
#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "lowbit/quant_method.h"
#include "quant/methods/resolve.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

std::vector<uint16_t> bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(f32_to_bf16(f));
  return out;
}

// FP8 group, A = 3.75: the multiplier 480 / A = 128 and the scale A / 480 = 2^-7 are exact, so
// each value's code follows by hand (v = 128 x):
//   1.0 → 128 = 2^7 (e 14, m 0) 0x70;  -0.5 → -64 (e 13) 0xE8;  0.0 → 0x40, exponent field 8 from
//   the kernel's wrapped rebias, which dequantizes to 2 · 2^-7;  0.25 → 32 (e 12) 0x60;
//   3.75 → 480 = 1.875 · 2^8 (e 15, m 7) 0x7F, an ordinary value in this format (NaN in e4m3fn);
//   2^-14 → 2^-7, below the smallest normal 2^-6: clamped to it (e 1, m 0) 0x08;
//   1.0625 → 136 = 128 · (1 + 0.5/8): a tie, rounded away from zero to m 1 (0x71, 144), where
//   round-to-nearest-even would give 128;  -1.3125 → -168 = -128 · (1 + 2.5/8): tie, m 3, 0xF3.
const std::vector<float> kFp8Group = {1.0f, -0.5f, 0.0f, 0.25f, 3.75f, 0x1p-14f, 1.0625f, -1.3125f};
const std::vector<uint8_t> kFp8Packed = {
    0x70, 0xE8, 0x40, 0x60, 0x7F, 0x08,
    0x71, 0xF3, 0x00, 0x00, 0x00, 0x3C};  // + 2^-7 as fp32, little-endian
const std::vector<float> kFp8Dequant = {1.0f,  -0.5f,    0.015625f, 0.25f,
                                        3.75f, 0x1p-13f, 1.125f,    -1.375f};

// FP6 group, A = 3.5: multiplier 28 / A = 8, scale 0.125. v = 8 x:
//   3.5 → 28 = 1.75 · 2^4 (e 7, m 3) 0x1F;  1.0 → 8 (e 6) 0x18;  -0.5 → -4 (e 5) 0x34;
//   0.0 → 0x10 (exponent field 4: 2 · 0.125);  1.125 → 9: tie, away from zero, m 1, 0x19 (10);
//   ±2^-6 → ±2^-3, below 2^-2: clamped, 0x04 / 0x24;  0.375 → 3 = 1.5 · 2 (e 4, m 2) 0x12.
// Packed as a little-endian stream of 6-bit codes: 8 codes in 6 bytes.
const std::vector<float> kFp6Group = {3.5f, 1.0f, -0.5f, 0.0f, 1.125f, 0x1p-6f, -0x1p-6f, 0.375f};
const std::vector<uint8_t> kFp6Packed = {0x1F, 0x46, 0x43, 0x19, 0x41,
                                         0x4A, 0x00, 0x00, 0x00, 0x3E};  // + 0.125
const std::vector<float> kFp6Dequant = {3.5f,  1.0f,     -0.5f,     0.25f,
                                        1.25f, 0.03125f, -0.03125f, 0.375f};

void expect_group(const std::vector<float>& group, int bits, const std::vector<uint8_t>& packed,
                  const std::vector<float>& dequant) {
  const deepspeedfp::FpFormat f = deepspeedfp::format_for_bits(bits);
  const std::vector<uint16_t> x = bf16(group);
  const std::vector<uint8_t> got = deepspeedfp::quantize(x.data(), 8, 8, f);
  EXPECT_EQ(got, packed);
  const std::vector<uint16_t> back = deepspeedfp::dequantize(got.data(), 8, 8, f);
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(bf16_to_f32(back[i]), dequant[i]) << "value " << i;
  }
}

TEST(DeepSpeedFp, Fp8GroupByHand) { expect_group(kFp8Group, 8, kFp8Packed, kFp8Dequant); }

TEST(DeepSpeedFp, Fp6GroupByHand) { expect_group(kFp6Group, 6, kFp6Packed, kFp6Dequant); }

TEST(DeepSpeedFp, DecodeCoversTheWholeFormat) {
  const deepspeedfp::FpFormat fp8 = deepspeedfp::format_for_bits(8);
  EXPECT_EQ(deepspeedfp::decode(0x7F, fp8), 480.0f);  // q_range: the largest value
  EXPECT_EQ(deepspeedfp::decode(0xFF, fp8), -480.0f);
  EXPECT_EQ(deepspeedfp::decode(0x38, fp8), 1.0f);     // e 7 = bias
  EXPECT_EQ(deepspeedfp::decode(0x00, fp8), 0x1p-7f);  // no zero code: e 0 is 2^-7
  const deepspeedfp::FpFormat fp6 = deepspeedfp::format_for_bits(6);
  EXPECT_EQ(deepspeedfp::decode(0x1F, fp6), 28.0f);
  EXPECT_EQ(deepspeedfp::decode(0x3F, fp6), -28.0f);
  EXPECT_EQ(deepspeedfp::decode(0x0C, fp6), 1.0f);
  EXPECT_THROW(deepspeedfp::format_for_bits(4), InvalidArgument);
}

TEST(DeepSpeedFp, GroupOfZerosDequantizesToZeros) {
  const deepspeedfp::FpFormat f = deepspeedfp::format_for_bits(8);
  const std::vector<uint16_t> x(8, 0);
  const std::vector<uint8_t> packed = deepspeedfp::quantize(x.data(), 8, 8, f);
  for (uint16_t v : deepspeedfp::dequantize(packed.data(), 8, 8, f))
    EXPECT_EQ(bf16_to_f32(v), 0.0f);
}

LayerInfo linear(int64_t out, int64_t in, LayerKind kind = LayerKind::Linear) {
  LayerInfo info;
  info.kind = kind;
  info.prefix = "model.layers.0.mlp.up_proj";
  info.out_features = out;
  info.in_features = in;
  info.params_dtype = DType::BF16;
  return info;
}

nlohmann::json config(int bits, int group) {
  return {{"quant_method", "deepspeedfp"}, {"bits", bits}, {"group_size", group}};
}

Tensor bf16_tensor(const std::vector<float>& v, Shape shape) {
  return Tensor::from_f32(v.data(), std::move(shape), DType::BF16);
}

std::unique_ptr<LinearMethod> load(const nlohmann::json& cfg, const LayerInfo& info, Tensor w) {
  auto c = make_quantization_config("deepspeedfp", cfg, "DIR/config.json: quantization_config");
  std::unique_ptr<LinearMethod> m = c->get_quant_method(info);
  if (!m) throw std::runtime_error("layer not quantized");
  LayerParams p(info);
  p.source = "DIR/model.safetensors";
  m->create_weights(p);
  EXPECT_EQ(p.declared().at(0).dtypes, std::vector<DType>{DType::BF16});  // FP_Quantize takes bf16
  p.set("weight", std::move(w));
  m->process_weights_after_loading(p);
  return m;
}

TEST(DeepSpeedFpMethod, QuantizesTheBf16WeightAtLoadInGroupsAcrossRows) {
  // A [2, 4] weight with group_size 8: one group holds both rows, as FP_Quantize flattens.
  for (int bits : {8, 6}) {
    const std::vector<float>& group = bits == 8 ? kFp8Group : kFp6Group;
    const auto m = load(config(bits, 8), linear(2, 4), bf16_tensor(group, {2, 4}));
    EXPECT_EQ(m->kernel_name().rfind("dequant", 0), 0u) << m->kernel_name();
    const Tensor w = m->dequantized_weight();
    ASSERT_EQ(w.shape(), (Shape{2, 4}));
    const std::vector<float>& expected = bits == 8 ? kFp8Dequant : kFp6Dequant;
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(w.data_as<const float>()[i], expected[i]) << bits << " " << i;
    // x = e_i reads column i of the weight back through apply().
    std::vector<float> x(4, 0.0f), y(2);
    x[1] = 1.0f;
    m->apply(x.data(), 1, nullptr, y.data());
    EXPECT_EQ(y[0], expected[1]);
    EXPECT_EQ(y[1], expected[5]);
  }
}

TEST(DeepSpeedFpMethod, DescriptionAndLayers) {
  const MethodDescription d = describe_quantization("deepspeedfp");
  EXPECT_EQ(d.name, "deepspeedfp");
  EXPECT_EQ(d.min_capability, 60);
  EXPECT_TRUE(d.online);
  EXPECT_EQ(d.config_filenames,
            (std::vector<std::string>{"quant_config.json", "quantize_config.json"}));
  std::vector<std::string> cpu;  // CUDA builds add the GPU kernels (gpu_linear_kernels_test.cc)
  for (const KernelSpec& k : d.kernels) {
    if (k.isa != KernelSpec::Isa::Cuda) cpu.push_back(k.name);
  }
  EXPECT_EQ(cpu, (std::vector<std::string>{"dequant"}));
  auto c = make_quantization_config("deepspeedfp", config(8, 128), "cfg");
  EXPECT_NE(c->get_quant_method(linear(8, 128)), nullptr);
  for (LayerKind kind : {LayerKind::LmHead, LayerKind::Embedding, LayerKind::Experts}) {
    EXPECT_EQ(c->get_quant_method(linear(8, 128, kind)), nullptr) << layer_kind_name(kind);
  }
}

template <typename E>
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "no error; expected " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DeepSpeedFpMethod, ConfigErrorsNameTheField) {
  const std::string where = "DIR/config.json: quantization_config";
  auto make = [&](const nlohmann::json& j) { make_quantization_config("deepspeedfp", j, where); };
  expect_error<Unsupported>([&] { make(config(4, 128)); }, where + ".bits is 4");
  expect_error<InvalidArgument>(
      [&] {
        make({{"quant_method", "deepspeedfp"}, {"bits", 8}});
      },
      "'group_size'");
  expect_error<InvalidArgument>(
      [&] {
        make({{"quant_method", "deepspeedfp"}, {"group_size", 8}});
      },
      "'bits'");
  expect_error<InvalidArgument>([&] { make(config(8, 12)); }, where + ".group_size is 12");
  expect_error<InvalidArgument>([&] { make(config(8, 2048)); }, where + ".group_size is 2048");
  nlohmann::json text = config(8, 128);
  text["bits"] = "8";
  expect_error<InvalidArgument>([&] { make(text); }, where + ".bits must be an integer");
}

TEST(DeepSpeedFpMethod, WeightErrorsNameTheTensor) {
  const std::string tensor = "DIR/model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight'";
  std::vector<float> v(24, 0.5f);
  expect_error<InvalidArgument>(
      [&] {
        load(config(8, 16), linear(3, 8), bf16_tensor(v, {3, 8}));
      },
      tensor + " has 24 values, not a multiple of DeepSpeedFP's group_size 16");
  v[13] = std::nanf("");
  expect_error<InvalidArgument>(
      [&] {
        load(config(8, 8), linear(3, 8), bf16_tensor(v, {3, 8}));
      },
      tensor + " holds a non-finite value at [1, 5]");
}

fs::path model_dir(const std::string& name, const std::string& config_json,
                   const std::string& extra_file = "", const std::string& extra = "") {
  fs::path dir = fs::temp_directory_path() / ("lowbit-deepspeedfp-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json;
  if (!extra_file.empty()) std::ofstream(dir / extra_file) << extra;
  return dir;
}

TEST(DeepSpeedFpMethod, DetectedFromItsConfigOrAskedForByName) {
  const fs::path plain = model_dir("plain", "{}");
  ResolvedQuantization r = resolve_quantization(plain.string(), config(6, 64).dump(), "cfg", {});
  EXPECT_EQ(r.describe(), "deepspeedfp (checkpoint)");
  // vLLM's own config files, when they say which method they are for.
  const fs::path file = model_dir("file", "{}", "quant_config.json", config(8, 128).dump());
  r = resolve_quantization(file.string(), "", "cfg", {});
  EXPECT_EQ(r.describe(), "deepspeedfp (checkpoint)");
  // By name on a bf16 checkpoint: DeepSpeedFPConfig's defaults, 8 bits in groups of 512.
  r = resolve_quantization(plain.string(), "", "cfg", {"deepspeedfp"});
  EXPECT_EQ(r.describe(), "deepspeedfp (online)");
  const auto m = r.config->get_quant_method(linear(1, 512));
  std::vector<float> w(512, 0.25f);
  w[0] = 3.75f;  // 0.25 → 32 (code 0x60), exact: 8-bit codes with 3.75 the group's maximum
  LayerParams p(linear(1, 512));
  m->create_weights(p);
  p.set("weight", bf16_tensor(w, {1, 512}));
  m->process_weights_after_loading(p);
  EXPECT_EQ(m->dequantized_weight().data_as<const float>()[1], 0.25f);
  // vLLM's style: a quant_config.json without quant_method, read when the method is asked for.
  const fs::path vllm_style =
      model_dir("vllm-style", "{}", "quant_config.json", R"({"bits": 6, "group_size": 64})");
  EXPECT_EQ(resolve_quantization(vllm_style.string(), "", "cfg", {}).config, nullptr);
  ResolvedQuantization fp6 = resolve_quantization(vllm_style.string(), "", "cfg", {"deepspeedfp"});
  const auto m6 = fp6.config->get_quant_method(linear(1, 64));
  std::vector<float> w6(64, 1.125f);
  w6[0] = 3.5f;  // FP6 (kFp6Group): the tie 1.125 → 1.25; FP8 would give 1.1640625
  LayerParams p6(linear(1, 64));
  m6->create_weights(p6);
  p6.set("weight", bf16_tensor(w6, {1, 64}));
  m6->process_weights_after_loading(p6);
  EXPECT_EQ(m6->dequantized_weight().data_as<const float>()[1], 1.25f);
  // The defaults' groups of 512 must divide the weight.
  LayerParams odd(linear(1, 100));
  odd.source = "DIR/model.safetensors";
  const auto odd_method = r.config->get_quant_method(linear(1, 100));
  odd_method->create_weights(odd);
  odd.set("weight", bf16_tensor(std::vector<float>(100, 1.0f), {1, 100}));
  expect_error<InvalidArgument>([&] { odd_method->process_weights_after_loading(odd); },
                                "not a multiple of DeepSpeedFP's group_size 512");
}

// The fixtures' packed bytes come from the Python script's own quantizer and bit packing; lowbit's
// must be identical, byte for byte, for both formats and for groups that span rows (fp6: 512).
TEST(DeepSpeedFpGolden, PackedBytesMatchTheFixtureScript) {
  const std::string root = std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/quant_formats/";
  for (const auto& [name, bits, group] :
       {std::tuple<const char*, int, int>{"deepspeedfp_fp8", 8, 128},
        {"deepspeedfp_fp6", 6, 512}}) {
    const auto model = formats::SafetensorsFile::open(root + name + "/model.safetensors");
    const auto golden = formats::SafetensorsFile::open(root + name + "/golden.safetensors");
    const deepspeedfp::FpFormat f = deepspeedfp::format_for_bits(bits);
    for (const char* module : {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"}) {
      const Tensor w = model->get(std::string(module) + ".weight");
      const Tensor expected = golden->get(std::string("packed_") + module);
      ASSERT_EQ(expected.numel(), w.numel() / group * deepspeedfp::packed_group_bytes(group, f));
      const std::vector<uint8_t> got =
          deepspeedfp::quantize(w.data_as<const uint16_t>(), w.numel(), group, f);
      const uint8_t* want = expected.data_as<const uint8_t>();
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << name << " " << module << " byte " << i;
      }
    }
  }
}

}  // namespace
}  // namespace lowbit::quant
