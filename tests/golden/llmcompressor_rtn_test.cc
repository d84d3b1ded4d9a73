// lowbit's round-to-nearest checkpoints against llm-compressor's (tests/golden/llmcompressor: made
// by scripts/reference/run_llmcompressor.py with llm-compressor 0.14.0.1 / compressed-tensors
// 0.19.0 on the embedded model): every tensor identical (name, dtype, shape and SHA-256 of its
// bytes), layer 0 compared element by element so that a failure says where, and the
// quantization_config identical.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "quant/pipeline/oneshot.h"
#include "quant/pipeline/recipe_plan.h"
#include "quant/recipe/recipe.h"
#include "sha256.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

const std::string kRoot = LOWBIT_SOURCE_DIR;
const std::string kGolden = kRoot + "/tests/golden/llmcompressor/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::string torch_dtype_name(DType d) {
  switch (d) {
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F32: return "float32";
    case DType::F8_E4M3: return "float8_e4m3fn";
    case DType::I8: return "int8";
    case DType::U8: return "uint8";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    default: return std::string(dtype_name(d));
  }
}

const std::string kEmbeddedModel = kRoot + "/models/ref-llama-19m";

std::string quantize_with_lowbit(const std::string& name, QuantizeFlags flags,
                                 const std::string& model_dir = kEmbeddedModel) {
  flags.algo = "rtn";
  const Recipe recipe = recipe_from_flags(flags);
  OneshotOptions o;
  o.model_dir = model_dir;
  o.output_dir = (fs::path(LOWBIT_BINARY_DIR) / "llmc-compare" / name).string();
  fs::remove_all(o.output_dir);
  fs::remove_all(o.output_dir + ".tmp");
  o.plan = plan_from_recipe(recipe);
  o.recipe_yaml = recipe_to_yaml(recipe);
  o.progress = false;
  run_oneshot(o);
  return o.output_dir;
}

// Elements of layer 0's tensors that differ (0 when identical), as a readable report.
std::string layer0_differences(const std::string& golden_dir, const formats::Checkpoint& ours) {
  const auto ref = formats::SafetensorsFile::open(golden_dir + "/layer0.safetensors");
  std::string report;
  for (const std::string& name : ref->names()) {
    const Tensor a = ref->get(name);
    if (!ours.has(name)) {
      report += name + " missing; ";
      continue;
    }
    const Tensor b = ours.get(name);
    if (a.nbytes() != b.nbytes()) {
      report += name + " size differs; ";
      continue;
    }
    const size_t elem = dtype_size(a.dtype());
    int64_t differing = 0;
    for (size_t i = 0; i < a.nbytes(); i += elem) {
      differing += std::memcmp(static_cast<const char*>(a.data()) + i,
                               static_cast<const char*>(b.data()) + i, elem) != 0;
    }
    if (differing > 0) report += name + ": " + std::to_string(differing) + " elements differ; ";
  }
  return report;
}

QuantizeFlags scheme_flags(const std::string& scheme) {
  QuantizeFlags flags;
  flags.scheme = scheme;
  return flags;
}

// Every tensor of the golden tensors.json, byte for byte, and nothing more.
void expect_same_tensors(const std::string& golden_dir, const formats::Checkpoint& ours) {
  const nlohmann::json expected = read_json(golden_dir + "/tensors.json");
  size_t compared = 0;
  for (const nlohmann::json& t : expected.at("tensors")) {
    const std::string name = t.at("name");
    ASSERT_TRUE(ours.has(name)) << name;
    const Tensor mine = ours.get(name);
    EXPECT_EQ(torch_dtype_name(mine.dtype()), t.at("dtype").get<std::string>()) << name;
    EXPECT_EQ(mine.shape(), t.at("shape").get<Shape>()) << name;
    EXPECT_EQ(testing::sha256_hex(mine.data(), mine.nbytes()), t.at("sha256").get<std::string>())
        << name;
    ++compared;
  }
  EXPECT_EQ(ours.names().size(), compared) << "lowbit wrote tensors llm-compressor did not";
}

void expect_identical(const std::string& golden_name, const std::string& scheme) {
  SCOPED_TRACE(golden_name);
  const std::string golden_dir = kGolden + golden_name;
  const std::string out = quantize_with_lowbit(golden_name, scheme_flags(scheme));
  const formats::Checkpoint ours = formats::Checkpoint::open(out);
  expect_same_tensors(golden_dir, ours);
  EXPECT_EQ(layer0_differences(golden_dir, ours), "");
  const nlohmann::json theirs = read_json(golden_dir + "/config.json").at("quantization_config");
  const nlohmann::json mine = read_json(out + "/config.json").at("quantization_config");
  EXPECT_EQ(mine, theirs) << "lowbit:\n" << mine.dump(1) << "\nllm-compressor:\n" << theirs.dump(1);
}

TEST(LlmCompressorRtnTest, W4A16) { expect_identical("rtn_w4a16", "W4A16"); }
TEST(LlmCompressorRtnTest, W4A16Asym) { expect_identical("rtn_w4a16_asym", "W4A16_ASYM"); }
TEST(LlmCompressorRtnTest, W8A8) { expect_identical("rtn_w8a8", "W8A8"); }
TEST(LlmCompressorRtnTest, Fp8Dynamic) { expect_identical("rtn_fp8_dynamic", "FP8_DYNAMIC"); }
TEST(LlmCompressorRtnTest, Fp8Block) { expect_identical("rtn_fp8_block", "FP8_BLOCK"); }

// A tied lm_head reached by the targets (nothing ignored): llm-compressor unties the embeddings
// (a bf16 embed_tokens stays, lm_head gets its own quantized tensors) and writes
// tie_word_embeddings false with an empty ignore list (scripts/reference/
// run_llmcompressor_tied_head.py, on the tiny tied Llama of the architecture fixtures).
TEST(LlmCompressorRtnTest, TiedLmHead) {
  const std::string golden_dir = kGolden + "rtn_w4a16_tied_head";
  QuantizeFlags flags = scheme_flags("W4A16");
  flags.ignore.clear();
  const std::string out = quantize_with_lowbit(
      "rtn_w4a16_tied_head", flags, kRoot + "/tests/golden/arch/llama3-ropescaled-tied");
  expect_same_tensors(golden_dir, formats::Checkpoint::open(out));
  const nlohmann::json theirs = read_json(golden_dir + "/config.json");
  const nlohmann::json mine = read_json(out + "/config.json");
  EXPECT_EQ(mine.at("quantization_config"), theirs.at("quantization_config"))
      << "lowbit:\n" << mine.at("quantization_config").dump(1);
  EXPECT_EQ(theirs.at("tie_word_embeddings"), false);
  EXPECT_EQ(mine.at("tie_word_embeddings"), theirs.at("tie_word_embeddings"));
}

}  // namespace
}  // namespace lowbit::quant
