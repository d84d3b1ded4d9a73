// quant_method "gguf" (src/quant/methods/gguf.cc): Q4_0 / Q8_0 blocks built by hand become int
// weights whose dequantized values are gguf-py's (q - 8) * d and q * d exactly, on a wna16 kernel
// (group size 32); only the modules the loader lists get a method; the method's description (the
// matrix row of `lowbit methods`) and what from_config refuses. The model-level tests (the GGUF
// fixtures against transformers and against the file decoded to F32) are in
// tests/unit/models/gguf_model_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::unique_ptr<QuantizationConfig> config() {
  return make_quantization_config(
      "gguf",
      {{"quant_method", "gguf"},
       {"modules", {{"model.layers.0.mlp.up_proj", "Q4_0"}, {"lm_head", "Q8_0"}}}},
      "x.gguf: quantization_config");
}

LayerInfo info(const std::string& prefix, int64_t out, int64_t in,
               LayerKind kind = LayerKind::Linear) {
  LayerInfo i;
  i.kind = kind;
  i.prefix = prefix;
  i.out_features = out;
  i.in_features = in;
  i.params_dtype = DType::F32;
  return i;
}

// Runs the method on `blocks` (a row of blocks per output feature) and returns its dequantized
// weight and kernel.
std::pair<std::vector<float>, std::string> run(const LayerInfo& layer_info,
                                               std::vector<uint8_t> blocks) {
  std::unique_ptr<LinearMethod> m = config()->get_quant_method(layer_info);
  EXPECT_NE(m, nullptr);
  LayerParams layer(layer_info);
  m->create_weights(layer);
  EXPECT_EQ(layer.declared().size(), 1u);
  EXPECT_EQ(layer.declared()[0].name, "qweight");
  const Shape shape = layer.declared()[0].shape;
  EXPECT_EQ(shape[0] * shape[1], static_cast<int64_t>(blocks.size()));
  Tensor t = Tensor::zeros(DType::U8, shape);
  std::memcpy(t.data(), blocks.data(), blocks.size());
  layer.set("qweight", std::move(t));
  m->process_weights_after_loading(layer);
  Tensor w = m->dequantized_weight();
  const float* p = w.data_as<const float>();
  return {std::vector<float>(p, p + w.numel()), m->kernel_name()};
}

void put_f16(std::vector<uint8_t>& out, float v) {
  const uint16_t h = f32_to_f16(v);
  out.push_back(static_cast<uint8_t>(h & 0xFF));
  out.push_back(static_cast<uint8_t>(h >> 8));
}

// Q4_0 [2 rows, 64 columns]: block (r, b) has d = 0.25 * (1 + r + 2b) (exact in fp16) and
// q[j] = (j + 5r + 3b) mod 16, so element j of the block is (q[j] - 8) * d.
TEST(GgufMethod, Q4_0BlocksAreIntWeightsExactly) {
  std::vector<uint8_t> bytes;
  std::vector<float> expected(2 * 64);
  for (int r = 0; r < 2; ++r) {
    for (int b = 0; b < 2; ++b) {
      const float d = 0.25f * static_cast<float>(1 + r + 2 * b);
      put_f16(bytes, d);
      auto q = [&](int j) { return (j + 5 * r + 3 * b) % 16; };
      for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(q(j) | (q(j + 16) << 4)));
      for (int j = 0; j < 32; ++j) expected[r * 64 + b * 32 + j] = static_cast<float>(q(j) - 8) * d;
    }
  }
  const auto [w, kernel] = run(info("model.layers.0.mlp.up_proj", 2, 64), bytes);
  EXPECT_EQ(w, expected);
  EXPECT_EQ(kernel.rfind("wna16_", 0), 0u) << kernel;
}

// Q8_0 [1 row, 32 columns] on the LM head: d = -0.5 (a negative scale, which ggml allows), int8
// q from -128 to 127 at both ends.
TEST(GgufMethod, Q8_0BlocksAreIntWeightsExactly) {
  std::vector<uint8_t> bytes;
  put_f16(bytes, -0.5f);
  std::vector<float> expected;
  for (int j = 0; j < 32; ++j) {
    const int8_t q = static_cast<int8_t>(j == 0 ? -128 : j == 1 ? 127 : j * 7 - 100);
    bytes.push_back(static_cast<uint8_t>(q));
    expected.push_back(static_cast<float>(q) * -0.5f);
  }
  const auto [w, kernel] = run(info("lm_head", 1, 32, LayerKind::LmHead), bytes);
  EXPECT_EQ(w, expected);
  EXPECT_EQ(kernel.rfind("wna16_", 0), 0u) << kernel;
}

TEST(GgufMethod, OnlyListedProjectionsGetAMethod) {
  auto c = config();
  EXPECT_NE(c->get_quant_method(info("model.layers.0.mlp.up_proj", 64, 64)), nullptr);
  EXPECT_NE(c->get_quant_method(info("lm_head", 64, 64, LayerKind::LmHead)), nullptr);
  // Decoded at load (another type), or not a projection: dense.
  EXPECT_EQ(c->get_quant_method(info("model.layers.0.mlp.down_proj", 64, 64)), nullptr);
  EXPECT_EQ(c->get_quant_method(info("model.embed_tokens", 64, 64, LayerKind::Embedding)),
            nullptr);
  LayerParams odd(info("model.layers.0.mlp.up_proj", 64, 48));
  EXPECT_NE(error_of([&] { c->get_quant_method(odd.info())->create_weights(odd); })
                .find("needs in_features divisible by 32"),
            std::string::npos);
}

TEST(GgufMethod, DescribesItsKernelsAndRefusesAHandWrittenConfig) {
  const MethodDescription d = describe_quantization("gguf");
  EXPECT_TRUE(d.unsupported.empty());
  std::vector<std::string> cpu;
  for (const KernelSpec& k : d.kernels) {
    if (k.isa != KernelSpec::Isa::Cuda) cpu.push_back(k.name);
  }
  EXPECT_EQ(cpu, (std::vector<std::string>{"wna16", "w8a8", "dequant", "gguf_decode"}));
  for (const KernelSpec& k : d.kernels) {
    if (k.isa != KernelSpec::Isa::Cuda) {
      EXPECT_TRUE(k.runs_on(Platform::current())) << k.name;
    }
  }
  // A config.json naming gguf without the loader's module list.
  const std::string e = error_of([] {
    make_quantization_config("gguf", {{"quant_method", "gguf"}},
                             "DIR/config.json: quantization_config");
  });
  EXPECT_NE(e.find("DIR/config.json: quantization_config: quant_method 'gguf' is a file format"),
            std::string::npos)
      << e;
  const std::string q5 = error_of([] {
    make_quantization_config("gguf", {{"quant_method", "gguf"}, {"modules", {{"lm_head", "Q5_0"}}}},
                             "cfg");
  });
  EXPECT_NE(q5.find("cfg.modules.lm_head: GGUF type Q5_0 does not run on the int kernels"),
            std::string::npos)
      << q5;
}

}  // namespace
}  // namespace lowbit::quant
