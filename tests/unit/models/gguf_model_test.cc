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
// The Llama 3.1-RoPE fixture (scripts/fixtures/make_gguf_rope_freqs_fixture.py, the same tools) has
// a rope_freqs.weight tensor; its golden is transformers' llama3 RoPE on the file's own weights.
// Q4_0 / Q8_0 projections and LM heads run on the int kernels (quant/methods/gguf.cc); the Q4_0
// fixture (scripts/fixtures/make_gguf_q4_0_fixture.py, gguf-py's quantizer) has no transformers
// golden: its int path is checked against the same file decoded to F32 (--linear-backend dequant,
// gguf-py's values), and the weights of both int fixtures against formats' decoder bit for bit.
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
#include <map>

#include "formats/gguf_dequant.h"
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
const fs::path kQ4_0 = kDir / "ref-llama-2l-q4_0.gguf";
const fs::path kRope = kDir / "ref-llama-2l-llama3rope-q8_0.gguf";
constexpr double kRelativeTolerance = 1e-3;
// --dtype bfloat16 rounds every decoded weight to 8 significant bits (relative error <= 2^-9),
// which moved these logits by <= 1.7e-3 relative (measured on Q8_0 when it was decoded; on
// Q4_K_M, whose Q8_0 tensors now stay exact on the int kernels: <= 1.2e-3; the exact comparisons
// measure <= 8e-7). 1e-2 leaves 6x room; a wrong q/k row order moves them by 0.13 (measured).
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

// max |a - b| <= tolerance * max |b|, and (at the default tolerance) the same argmax per position.
void expect_close(const Tensor& ours, const Tensor& ref, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(ours.shape(), ref.shape()) << what;
  const float* a = ours.data_as<const float>();
  const float* b = ref.data_as<const float>();
  float max_abs = 0.0f, max_diff = 0.0f;
  for (int64_t k = 0; k < ref.numel(); ++k) {
    max_abs = std::max(max_abs, std::fabs(b[k]));
    max_diff = std::max(max_diff, std::fabs(a[k] - b[k]));
  }
  EXPECT_LE(max_diff, tolerance * max_abs) << what;
  if (tolerance != kRelativeTolerance) return;
  const int64_t vocab = ref.dim(-1);
  for (int64_t r = 0; r < ref.dim(0); ++r) {
    EXPECT_EQ(std::max_element(a + r * vocab, a + (r + 1) * vocab) - (a + r * vocab),
              std::max_element(b + r * vocab, b + (r + 1) * vocab) - (b + r * vocab))
        << what << " position " << r;
  }
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
    expect_close(ours, ref, tolerance, logits_prefix + "prompt" + std::to_string(i));
  }
}

// The model's projections and LM head by Hugging Face module name.
std::map<std::string, const Linear*> projections(const Model& model) {
  const DecoderWeights& w = model.weights();
  std::map<std::string, const Linear*> out = {{"lm_head", &w.lm_head}};
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const LayerWeights& layer = w.layers[l];
    out[p + "self_attn.q_proj"] = &layer.attention.q;
    out[p + "self_attn.k_proj"] = &layer.attention.k;
    out[p + "self_attn.v_proj"] = &layer.attention.v;
    out[p + "self_attn.o_proj"] = &layer.attention.o;
    out[p + "mlp.gate_proj"] = &layer.mlp.gate;
    out[p + "mlp.up_proj"] = &layer.mlp.up;
    out[p + "mlp.down_proj"] = &layer.mlp.down;
  }
  return out;
}

// The kernel each projection runs ("" for a dense, decoded one): a silent fallback to decoding, or
// to the dequant kernel, shows here.
std::map<std::string, std::string> kernels_of(const Model& model) {
  std::map<std::string, std::string> out;
  for (const auto& [name, linear] : projections(model)) {
    out[name] = linear->method ? linear->method->kernel_name() : "";
  }
  return out;
}

bool is_wna16(const std::string& kernel) { return kernel.rfind("wna16_", 0) == 0; }

// Every projection and the LM head of a Q4_0 / Q8_0 file run on a wna16 kernel.
void expect_all_on_wna16(const Model& model) {
  for (const auto& [name, kernel] : kernels_of(model)) {
    EXPECT_TRUE(is_wna16(kernel)) << name << " runs on '" << kernel << "'";
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
  // Hugging Face names. Q8_0 projections and LM head kept as their blocks (qweight: 34 bytes per
  // 32 weights) for the int kernels, the Q8_0 embedding decoded to F32, norms as stored (F32).
  EXPECT_EQ(model->quantization(), "gguf (checkpoint)");
  EXPECT_FALSE(model->checkpoint().has("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_EQ(model->checkpoint().get("model.layers.1.self_attn.q_proj.qweight").dtype(), DType::U8);
  EXPECT_EQ(model->checkpoint().get("lm_head.qweight").shape(), (Shape{8192, 384 / 32 * 34}));
  EXPECT_EQ(model->checkpoint().get("model.layers.1.mlp.down_proj.qweight").shape(),
            (Shape{384, 1024 / 32 * 34}));
  EXPECT_EQ(model->checkpoint().get("model.embed_tokens.weight").dtype(), DType::F32);
  EXPECT_EQ(model->checkpoint().get("model.norm.weight").dtype(), DType::F32);
  EXPECT_TRUE(model->summary().unused_tensors.empty());
}

TEST(GgufModel, Q8_0LogitsMatchTransformersGgufLoading) {
  auto model = Model::load(kQ8.string());
  expect_all_on_wna16(*model);
  expect_logits_match(*model, golden(), "q8_0.");
}

// --linear-backend w8a8 (opt-in): every projection and the LM head on the int8-activation kernels,
// x quantized per token to int8. That rounds each activation by up to absmax / 255 of its row (a
// large step for the many small entries of a row with outliers), so the logits move far more than
// the fp32 path's summation order does: measured 1.6e-2 .. 2.1e-2 of max |logit| against transformers on the three
// prompts. 4e-2 leaves 2x room; a block scale applied to the wrong group or a wrong code offset
// moves the logits by the order of the logits themselves. Argmax is not compared (a 2 % move can
// swap near-ties).
constexpr double kInt8ActivationTolerance = 4e-2;
TEST(GgufModel, Q8_0OnTheInt8ActivationKernelsWhenAsked) {
  LoadOptions w8a8;
  w8a8.linear_backend = "w8a8";
  auto model = Model::load(kQ8.string(), w8a8);
  for (const auto& [name, kernel] : kernels_of(*model)) {
    EXPECT_EQ(kernel.rfind("w8a8_", 0), 0u) << name << " runs on '" << kernel << "'";
  }
  expect_logits_match(*model, golden(), "q8_0.", kInt8ActivationTolerance);
}

TEST(GgufModel, Q4KMLogitsMatchTransformersGgufLoading) {
  auto model = Model::load(kQ4.string());
  // llama-quantize's Q4_K_M of this model: output and blk.1.attn_v are Q8_0 and blk.1.ffn_down is
  // Q6_K (int kernels), the rest Q5_0 / Q4_K (decoded to F32, dense).
  const auto file = formats::GgufFile::open(kQ4.string());
  EXPECT_EQ(file->find_tensor("blk.1.ffn_down.weight")->type, formats::GgmlType::Q6_K);
  bool bf16dot = false;
  for (const auto& [name, kernel] : kernels_of(*model)) {
    if (name == "lm_head" || name == "model.layers.1.self_attn.v_proj" ||
        name == "model.layers.1.mlp.down_proj") {
      EXPECT_TRUE(is_wna16(kernel)) << name << " runs on '" << kernel << "'";
      bf16dot = bf16dot || kernel.find("bf16dot") != std::string::npos;
    } else {
      EXPECT_EQ(kernel, "") << name;
      EXPECT_EQ(model->checkpoint().get(name + ".weight").dtype(), DType::F32) << name;
    }
  }
  // The Q6_K layer runs wna16_g16_avx512_bf16dot on AVX512_BF16 CPUs, which rounds x to bf16
  // (<= 2^-9 relative per product, as --dtype bfloat16 rounds weights): kBf16Tolerance there.
  expect_logits_match(*model, golden(), "q4_k_m.", bf16dot ? kBf16Tolerance : kRelativeTolerance);
}

// Q4_0 on the int kernels against the same file decoded to F32 (--linear-backend dequant: the
// dequant kernel over (q - 8) * d, gguf-py's values): the products are the same exact numbers,
// only the summation order differs, so the criterion of the exact comparisons above holds
// (kRelativeTolerance, and argmax). Except where the CPU runs wna16_avx512_bf16dot, whose decode
// path (m <= 8 rows, wna16_matmul.h) rounds x to bf16: that is a relative error <= 2^-9 per
// product, the bound of --dtype bfloat16's rounding of the weights, so kBf16Tolerance applies to
// the prompts of <= 8 tokens there (the 10- and 12-token prompts run the exact AVX-512 kernel).
// Measured on an AVX512_BF16 CPU: 1.5e-3 relative on the 6-token prompt, 0 on the other two.
TEST(GgufModel, Q4_0IntKernelsMatchTheFileDecodedToFloat) {
  auto int_model = Model::load(kQ4_0.string());
  LoadOptions dequant;
  dequant.linear_backend = "dequant";
  auto decoded = Model::load(kQ4_0.string(), dequant);
  expect_all_on_wna16(*int_model);
  bool bf16dot = false;
  for (const auto& [name, kernel] : kernels_of(*int_model)) {
    bf16dot = bf16dot || kernel.find("bf16dot") != std::string::npos;
  }
  for (const auto& [name, kernel] : kernels_of(*decoded)) {
    EXPECT_EQ(kernel.rfind("dequant_", 0), 0u) << name << " runs on '" << kernel << "'";
  }
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> ids = prompt_ids(golden(), i);
    KvCache a = int_model->new_cache();
    KvCache b = decoded->new_cache();
    const double tolerance =
        bf16dot && ids.size() <= 8 ? kBf16Tolerance : kRelativeTolerance;
    expect_close(int_model->forward(ids, a, true), decoded->forward(ids, b, true), tolerance,
                 "q4_0 prompt" + std::to_string(i));
  }
}

// HF row h*d + i*d/2 + j of a permuted GGUF matrix is GGUF row h*d + 2*j + i (gguf_model.h).
Tensor unpermute(const Tensor& t, int64_t heads) {
  const int64_t rows = t.dim(0), cols = t.dim(1), d = rows / heads;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const float* src = t.data_as<const float>();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < d / 2; ++j) {
        std::copy_n(src + (h * d + 2 * j + i) * cols, cols,
                    out.data() + (h * d + i * d / 2 + j) * cols);
      }
    }
  }
  return Tensor::from_f32(out.data(), t.shape(), DType::F32);
}

// The weights the int kernels run are the file's: equal, bit for bit, to formats' decoding of the
// GGUF tensor (itself bit-exact with gguf-py, tests/unit/formats), rows in Hugging Face's order.
TEST(GgufModel, IntKernelWeightsAreTheDecodedTensorsExactly) {
  const std::map<std::string, std::string> gguf_names = {
      {"self_attn.q_proj", "attn_q"},  {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},  {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},   {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  for (const fs::path& path : {kQ4_0, kQ8, kQ4}) {
    auto model = Model::load(path.string());
    auto file = formats::GgufFile::open(path.string());
    for (const auto& [name, linear] : projections(*model)) {
      if (path == kQ4 && !linear->method) continue;  // Q4_K_M: only its Q8_0 / Q6_K tensors
      std::string gguf = "output.weight";
      int64_t heads = 0;
      if (name != "lm_head") {
        const std::string layer = name.substr(13, name.find('.', 13) - 13);
        const std::string module = name.substr(name.find('.', 13) + 1);
        gguf = "blk." + layer + "." + gguf_names.at(module) + ".weight";
        heads = module == "self_attn.q_proj" ? 6 : module == "self_attn.k_proj" ? 2 : 0;
      }
      ASSERT_TRUE(linear->method) << path << " " << name;
      Tensor expected = formats::dequantize_gguf_tensor(*file, *file->find_tensor(gguf));
      if (heads > 0) expected = unpermute(expected, heads);
      const Tensor ours = linear->method->dequantized_weight();
      ASSERT_EQ(ours.shape(), expected.shape()) << name;
      // Equal as numbers: Q4_0's d is negative in about half the blocks (ggml stores max / -8),
      // where gguf-py's (8 - 8) * d is -0.0 and the kernel's sum over the probe gives +0.0.
      const float* a = ours.data_as<const float>();
      const float* b = expected.data_as<const float>();
      int64_t differ = 0;
      for (int64_t i = 0; i < expected.numel(); ++i) differ += a[i] != b[i];
      EXPECT_EQ(differ, 0) << path << " " << name;
    }
  }
}

TEST(GgufModel, Bfloat16DtypeHoldsDecodedWeightsInBf16) {
  LoadOptions options;
  options.dtype = "bfloat16";
  auto model = Model::load(kQ4.string(), options);
  // Decoded tensors in bf16; the Q8_0 ones stay blocks on the int kernels, whatever the dtype.
  EXPECT_EQ(model->checkpoint().get("model.layers.0.self_attn.q_proj.weight").dtype(),
            DType::BF16);
  EXPECT_EQ(model->checkpoint().get("model.embed_tokens.weight").dtype(), DType::BF16);
  EXPECT_EQ(model->checkpoint().get("lm_head.qweight").dtype(), DType::U8);
  EXPECT_EQ(model->checkpoint().get("model.norm.weight").dtype(), DType::F32);  // stored F32
  expect_logits_match(*model, golden(), "q4_k_m.", kBf16Tolerance);
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

// Llama 3.1-style RoPE: llama.cpp's converter turned rope_type llama3 (factor 8, low 1, high 4,
// original context 32: the 32 frequencies kept, smoothed and divided by 8) into rope_freqs.weight;
// transformers' llama3 RoPE on the file's own weights is the golden
// (scripts/fixtures/make_gguf_rope_freqs_fixture.py). Ignoring the tensor moves these logits by
// up to 3.0 (the script measures it), far outside kRelativeTolerance.
TEST(GgufModel, RopeFreqsMatchTransformersLlama3Rope) {
  auto model = Model::load(kRope.string());
  const RopeConfig& rope = model->config().rope;
  EXPECT_EQ(rope.type, RopeType::LONGROPE);  // the same angles: inv_freq / factor at any length
  ASSERT_EQ(rope.short_factor.size(), 32u);
  EXPECT_EQ(rope.short_factor, rope.long_factor);
  EXPECT_DOUBLE_EQ(rope.short_factor.front(), 1.0);
  EXPECT_DOUBLE_EQ(rope.short_factor.back(), 8.0);
  EXPECT_EQ(*rope.attention_factor, 1.0);
  EXPECT_TRUE(model->summary().unused_tensors.empty());
  static auto file =
      formats::SafetensorsFile::open((kDir / "gguf_rope_freqs_logits.safetensors").string());
  expect_logits_match(*model, *file, "llama3rope.");
}

// Qwen2 (scripts/fixtures/make_gguf_qwen2_fixture.py): a tiny random Qwen2ForCausalLM with random
// q/k/v biases and tied embeddings, converted by llama.cpp's converter (BF16, then Q8_0 by
// llama-quantize). Goldens: the Hugging Face model's fp32 forward on its bf16 weights (BF16 file)
// and transformers' own loading of the Q8_0 file. Same criterion as the Llama files; measured
// 2.4e-7 on both (logits of max magnitude 0.63). Qwen2's q/k are not permuted by the converter:
// applying Llama's permutation to them moves these logits by 0.008 (13x the tolerance), losing
// the biases by 0.81 (both measured on the Hugging Face model, prompt 0).
TEST(GgufModel, Qwen2MatchesTransformers) {
  static auto file =
      formats::SafetensorsFile::open((kDir / "qwen2_golden.safetensors").string());
  auto bf16 = Model::load((kDir / "qwen2-tiny-bf16.gguf").string());
  const ModelConfig& c = bf16->config();
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.attention_qkv_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_TRUE(bf16->summary().unused_tensors.empty());
  expect_logits_match(*bf16, *file, "bf16.");
  // The Q8_0 file ties its output to a Q8_0 token_embd: the LM head runs on the int kernels from
  // the same blocks (loaded untied, "lm_head.qweight" = token_embd's bytes), the lookup reads the
  // decoded embedding.
  auto q8 = Model::load((kDir / "qwen2-tiny-q8_0.gguf").string());
  EXPECT_FALSE(q8->config().tie_word_embeddings);
  EXPECT_TRUE(q8->checkpoint().has("lm_head.qweight"));
  expect_all_on_wna16(*q8);
  EXPECT_TRUE(q8->summary().unused_tensors.empty());
  expect_logits_match(*q8, *file, "q8_0.");
}

TEST(GgufModel, BadRopeFreqsAreNamed) {
  ScratchDir dir;
  std::string bytes = read_bytes(kRope);
  {
    auto file = formats::GgufFile::open(kRope.string());
    const formats::GgufTensorInfo* info = file->find_tensor("rope_freqs.weight");
    ASSERT_NE(info, nullptr);
    const float negative = -1.0f;  // the first factor
    bytes.replace(file->data_offset() + info->offset, sizeof negative,
                  reinterpret_cast<const char*>(&negative), sizeof negative);
  }
  const fs::path path = dir.path() / "bad-rope.gguf";
  write_bytes(path, bytes);
  try {
    Model::load(path.string());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'rope_freqs.weight': factor 0 is -1"));
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
