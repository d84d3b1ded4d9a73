// GGUF files as models (models/gguf_model.h, through Model::load), against transformers.
// Fixtures (scripts/fixtures/make_gguf_model_fixtures.py): a 2-layer copy of ref-llama-19m
// converted by llama.cpp's convert_hf_to_gguf.py (BF16) and quantized by llama-quantize (Q8_0,
// Q4_K_M); golden logits from transformers 5.17: for the quantized files, transformers' own GGUF
// loading (gguf-py dequantization, its own undoing of the q/k permutation) in fp32; for BF16, the
// Hugging Face copy (bf16 weights, fp32 forward).
// Tolerance: max |ours - golden| <= 1e-3 * max |golden|, the criterion of
// tests/golden/model_logits_test.cc, for the same reason: both sides compute in fp32 from
// identical weights (our dequantization is bit-exact with gguf-py, tests/unit/formats), so only
// summation order differs (~1e-6 relative); a wrong permutation, name or config field moves the
// logits by O(1) (measured with the permutation left undone: max |diff| 2.4 on logits of max
// magnitude 18, i.e. 0.13 relative; with it: <= 8e-7 relative on every prompt).
// The BF16 files (19 and 38 MB) are not committed (repository size): the script's run checked them
// against the same goldens (2-layer: <= 5.3e-7 relative; the whole model against
// tests/golden/ref-llama-19m: <= 8e-7); in CI the zero-copy F32 path is exercised by the quantized
// files' F32 norm tensors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "models/gguf_model.h"
#include "models/model.h"

namespace lowbit::models {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const fs::path kDir = fs::path(LOWBIT_SOURCE_DIR) / "tests/golden/gguf";
const fs::path kQ8 = kDir / "ref-llama-2l-q8_0.gguf";
const fs::path kQ4 = kDir / "ref-llama-2l-q4_k_m.gguf";
constexpr double kRelativeTolerance = 1e-3;
// --dtype bfloat16 rounds every decoded weight to 8 significant bits (relative error <= 2^-9),
// which moved these logits by <= 1.7e-3 relative (measured; the exact comparisons above measure
// <= 8e-7). 1e-2 leaves 6x room; a wrong q/k row order moves them by 0.13 (measured).
constexpr double kBf16Tolerance = 1e-2;

const formats::SafetensorsFile& golden() {
  static auto file = formats::SafetensorsFile::open((kDir / "gguf_logits.safetensors").string());
  return *file;
}

std::vector<int32_t> prompt_ids(const formats::SafetensorsFile& file, int i) {
  Tensor t = file.get("prompt" + std::to_string(i) + ".input_ids");
  const int64_t* p = t.data_as<const int64_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// Every position's logits of the three prompts against `logits_prefix`prompt{i}.logits.
// `tolerance` other than the default: also rounding of the weights, so argmax is not compared.
void expect_logits_match(const Model& model, const formats::SafetensorsFile& file,
                         const std::string& logits_prefix,
                         double tolerance = kRelativeTolerance) {
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> ids = prompt_ids(file, i);
    KvCache cache = model.new_cache();
    Tensor ours = model.forward(ids, cache, true);
    Tensor ref = file.get(logits_prefix + "prompt" + std::to_string(i) + ".logits");
    ASSERT_EQ(ours.shape(), ref.shape()) << logits_prefix << i;
    const float* a = ours.data_as<const float>();
    const float* b = ref.data_as<const float>();
    float max_abs = 0.0f, max_diff = 0.0f;
    for (int64_t k = 0; k < ref.numel(); ++k) {
      max_abs = std::max(max_abs, std::fabs(b[k]));
      max_diff = std::max(max_diff, std::fabs(a[k] - b[k]));
    }
    EXPECT_LE(max_diff, tolerance * max_abs) << logits_prefix << "prompt" << i;
    if (tolerance != kRelativeTolerance) continue;
    const int64_t vocab = ref.dim(-1);
    for (int64_t r = 0; r < ref.dim(0); ++r) {
      EXPECT_EQ(std::max_element(a + r * vocab, a + (r + 1) * vocab) - (a + r * vocab),
                std::max_element(b + r * vocab, b + (r + 1) * vocab) - (b + r * vocab))
          << logits_prefix << "prompt" << i << " position " << r;
    }
  }
}

TEST(GgufModel, ConfigFromMetadata) {
  auto model = Model::load(kQ8.string());
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.hidden_size, 384);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.num_heads, 6);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 8192);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-5f);  // stored as float32
  EXPECT_EQ(c.rope.type, RopeType::DEFAULT);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{1});
  // Hugging Face names, quantized tensors decoded to F32, norms as stored (F32).
  EXPECT_TRUE(model->checkpoint().has("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_EQ(model->checkpoint().get("lm_head.weight").dtype(), DType::F32);
  EXPECT_EQ(model->checkpoint().get("model.layers.1.mlp.down_proj.weight").shape(),
            (Shape{384, 1024}));
  EXPECT_TRUE(model->summary().unused_tensors.empty());
}

TEST(GgufModel, Q8_0LogitsMatchTransformersGgufLoading) {
  expect_logits_match(*Model::load(kQ8.string()), golden(), "q8_0.");
}

TEST(GgufModel, Q4KMLogitsMatchTransformersGgufLoading) {
  expect_logits_match(*Model::load(kQ4.string()), golden(), "q4_k_m.");
}

TEST(GgufModel, Bfloat16DtypeHoldsDecodedWeightsInBf16) {
  LoadOptions options;
  options.dtype = "bfloat16";
  auto model = Model::load(kQ8.string(), options);
  EXPECT_EQ(model->checkpoint().get("lm_head.weight").dtype(), DType::BF16);
  EXPECT_EQ(model->checkpoint().get("model.norm.weight").dtype(), DType::F32);  // stored F32
  expect_logits_match(*model, golden(), "q8_0.", kBf16Tolerance);
}

// A scratch directory, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    path_ = fs::temp_directory_path() /
            ("lowbit-gguf-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The Q4_K_M fixture with one byte string replaced by another of the same length.
fs::path patched_copy(const ScratchDir& dir, const std::string& from, const std::string& to) {
  std::string bytes = read_bytes(kQ4);
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  bytes.replace(at, from.size(), to);
  const fs::path out = dir.path() / "patched.gguf";
  write_bytes(out, bytes);
  return out;
}

TEST(GgufModel, DirectoryWithOneGgufLoadsIt) {
  ScratchDir dir;
  fs::copy_file(kQ4, dir.path() / "model.gguf");
  EXPECT_EQ(find_gguf_model(dir.path().string()), (dir.path() / "model.gguf").string());
  EXPECT_EQ(Model::load(dir.path().string())->config().num_layers, 2);
  fs::copy_file(kQ4, dir.path() / "other.gguf");
  try {
    find_gguf_model(dir.path().string());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("several .gguf files"));
  }
  write_bytes(dir.path() / "model.safetensors", "");
  EXPECT_EQ(find_gguf_model(dir.path().string()), std::nullopt);  // a safetensors model
}

TEST(GgufModel, UnknownArchitectureIsUnsupported) {
  ScratchDir dir;
  // general.architecture's value: u64 length 5, then the bytes.
  const std::string value = std::string("\x05\0\0\0\0\0\0\0", 8);
  const fs::path path = patched_copy(dir, value + "llama", value + "gemma");
  try {
    Model::load(path.string());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_THAT(e.what(), HasSubstr("general.architecture 'gemma' is not supported"));
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
  }
}

TEST(GgufModel, MissingTensorIsNamed) {
  ScratchDir dir;
  const fs::path path = patched_copy(dir, "blk.1.ffn_up.weight", "blk.1.ffn_XX.weight");
  try {
    Model::load(path.string());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'blk.1.ffn_up.weight' is missing"));
  }
}

}  // namespace
}  // namespace lowbit::models
