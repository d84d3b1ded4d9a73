// The CPU forward pass against transformers 5.17 (fp32 forward of the stored bf16 weights):
// - ref-llama-19m: logits at every position of the three golden prompts, the same logits again
//   through prefill + one-token decode steps (KV cache), and the 48-token greedy continuations;
// - every fixture under tests/golden/arch/ (random tiny models of each architecture): logits of
//   both input rows and the 16-token greedy continuation (made with min_new_tokens=16, so EOS
//   never stops it).
// Tolerance: max |ours − golden| ≤ 1e-3 · max |golden| per compared block (the project's
// criterion). Both sides compute in fp32 from identical weights; only summation order differs,
// which costs ~1e-6 relative here (measured: ≤ 1.5e-6 on every fixture), so 1e-3 catches any
// wrong formula without flaking on rounding. The arch fixtures also get a tight bound of 2e-5:
// some real semantic choices move their logits by only ~1.5e-4 relative (gemma-both-act-keys:
// erf vs tanh GELU, 5.8e-4 on logits of magnitude ~4, see tests/golden/arch/README.md), which
// 1e-3 alone would let through; 2e-5 is still >10x the observed rounding error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "models/model.h"

namespace lowbit::models {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = LOWBIT_SOURCE_DIR;
constexpr double kRelativeTolerance = 1e-3;
constexpr double kStrictRelativeTolerance = 2e-5;

std::vector<int32_t> ids_of(const Tensor& t, int64_t row = 0) {
  const int64_t n = t.dim(-1);
  const int64_t* data = t.data_as<const int64_t>() + row * n;
  return std::vector<int32_t>(data, data + n);
}

int64_t argmax(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;  // first maximal index, as torch.argmax
}

// Compares `rows` rows of logits; returns an empty string on success, else a description.
std::string compare_logits(const float* ours, const float* golden, int64_t rows, int64_t vocab,
                           int64_t first_position = 0, double tolerance = kRelativeTolerance) {
  float max_abs = 0.0f, max_diff = 0.0f;
  for (int64_t i = 0; i < rows * vocab; ++i) {
    max_abs = std::max(max_abs, std::fabs(golden[i]));
    max_diff = std::max(max_diff, std::fabs(ours[i] - golden[i]));
  }
  if (!(max_diff <= tolerance * max_abs)) {
    return "max |diff| " + std::to_string(max_diff) + " > " + std::to_string(tolerance) +
           " * max |logit| " + std::to_string(max_abs);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t a = argmax(ours + r * vocab, vocab);
    const int64_t b = argmax(golden + r * vocab, vocab);
    if (a != b) {
      return "argmax differs at position " + std::to_string(first_position + r) + ": ours " +
             std::to_string(a) + ", golden " + std::to_string(b) + " (golden logits " +
             std::to_string(golden[r * vocab + a]) + " vs " +
             std::to_string(golden[r * vocab + b]) + ")";
    }
  }
  return "";
}

// Greedy decoding as transformers' generate: prefill, then one token per step through the KV
// cache (re-running the whole sequence where the model asks for it, as Phi3's generate does for
// longrope). Once an id in `eos` is produced (unless ignore_eos), later slots hold `pad`. The raw
// logits of every step are appended to `step_logits` when it is not null.
std::vector<int32_t> greedy(const Model& model, std::vector<int32_t> ids, int steps,
                            const std::vector<int32_t>& eos, int32_t pad, bool ignore_eos,
                            std::vector<float>* step_logits = nullptr) {
  KvCache cache = model.new_cache();
  const int64_t vocab = model.config().vocab_size;
  bool finished = false;
  for (int step = 0; step < steps; ++step) {
    if (finished) {
      ids.push_back(pad);
      continue;
    }
    Tensor logits;
    const int64_t total = static_cast<int64_t>(ids.size());
    if (cache.length() == 0 || model.needs_reprefill(cache.length(), total)) {
      cache.clear();
      logits = model.forward(ids, cache, false);
    } else {
      logits = model.forward(std::span<const int32_t>(&ids.back(), 1), cache, false);
    }
    const float* row = logits.data_as<const float>();
    if (step_logits != nullptr) step_logits->insert(step_logits->end(), row, row + vocab);
    const int32_t next = static_cast<int32_t>(argmax(row, vocab));
    ids.push_back(next);
    finished = !ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end();
  }
  return ids;
}

// Our RoPE table against the one transformers held (same fp32 formulas; a few ulps apart at most).
std::string compare_inv_freq(const RopeFrequencies& ours, const Tensor& inv_freq,
                             const Tensor* scaling) {
  if (static_cast<int64_t>(ours.inv_freq.size()) != inv_freq.numel()) {
    return "inv_freq has " + std::to_string(ours.inv_freq.size()) + " values, golden " +
           std::to_string(inv_freq.numel());
  }
  for (int64_t i = 0; i < inv_freq.numel(); ++i) {
    const float expected = inv_freq.data_as<const float>()[i];
    if (std::fabs(ours.inv_freq[static_cast<size_t>(i)] - expected) > 1e-6f * std::fabs(expected)) {
      return "inv_freq[" + std::to_string(i) + "] = " + std::to_string(ours.inv_freq[i]) +
             ", golden " + std::to_string(expected);
    }
  }
  if (scaling != nullptr &&
      std::fabs(ours.attention_scaling - scaling->data_as<const float>()[0]) > 1e-6f) {
    return "attention_scaling " + std::to_string(ours.attention_scaling) + ", golden " +
           std::to_string(scaling->data_as<const float>()[0]);
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// ref-llama-19m

class RefLlamaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load((kSourceDir / "models/ref-llama-19m").string()).release();
    golden_ = formats::SafetensorsFile::open(
        (kSourceDir / "tests/golden/ref-llama-19m/reference_logits.safetensors").string());
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    golden_.reset();
  }
  static Tensor golden(int prompt, const std::string& what) {
    return golden_->get("prompt" + std::to_string(prompt) + "." + what);
  }

  static Model* model_;
  static std::shared_ptr<formats::SafetensorsFile> golden_;
};

Model* RefLlamaTest::model_ = nullptr;
std::shared_ptr<formats::SafetensorsFile> RefLlamaTest::golden_;

TEST_F(RefLlamaTest, PrefillLogitsMatchTransformersAtEveryPosition) {
  const int64_t vocab = model_->config().vocab_size;
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> ids = ids_of(golden(p, "input_ids"));
    const Tensor expected = golden(p, "logits");
    ASSERT_EQ(expected.dim(0), static_cast<int64_t>(ids.size()));
    KvCache cache = model_->new_cache();
    const Tensor logits = model_->forward(ids, cache, /*all_logits=*/true);
    ASSERT_EQ(logits.shape(), expected.shape());
    EXPECT_EQ(cache.length(), static_cast<int64_t>(ids.size()));
    EXPECT_EQ(compare_logits(logits.data_as<const float>(), expected.data_as<const float>(),
                             expected.dim(0), vocab),
              "")
        << "prompt " << p;
  }
}

TEST_F(RefLlamaTest, DecodeStepsMatchFullPrefixLogits) {
  const int64_t vocab = model_->config().vocab_size;
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> ids = ids_of(golden(p, "input_ids"));
    const Tensor expected = golden(p, "logits");
    // Prefill the first two tokens, then feed the rest one at a time through the cache.
    KvCache cache = model_->new_cache(static_cast<int64_t>(ids.size()));
    Tensor logits = model_->forward(std::span<const int32_t>(ids.data(), 2), cache, false);
    EXPECT_EQ(compare_logits(logits.data_as<const float>(),
                             expected.data_as<const float>() + 1 * vocab, 1, vocab, 1),
              "")
        << "prompt " << p << " after prefill";
    for (size_t t = 2; t < ids.size(); ++t) {
      logits = model_->forward(std::span<const int32_t>(&ids[t], 1), cache, false);
      EXPECT_EQ(
          compare_logits(logits.data_as<const float>(), expected.data_as<const float>() + t * vocab,
                         1, vocab, static_cast<int64_t>(t)),
          "")
          << "prompt " << p << " decode step at position " << t;
    }
    EXPECT_EQ(cache.length(), static_cast<int64_t>(ids.size()));
  }
}

TEST_F(RefLlamaTest, GreedyContinuationsMatchTransformers) {
  const ModelConfig& c = model_->config();
  const int32_t pad = c.generation.pad_token_id.value_or(0);
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> prompt = ids_of(golden(p, "input_ids"));
    const std::vector<int32_t> expected = ids_of(golden(p, "greedy_ids"));
    ASSERT_EQ(expected.size(), prompt.size() + 48);
    const std::vector<int32_t> ours = greedy(*model_, prompt, 48, c.eos_token_ids, pad, false);
    EXPECT_EQ(ours, expected) << "prompt " << p;
  }
}

// ---------------------------------------------------------------------------------------------
// Architecture fixtures: every directory under tests/golden/arch with a golden.safetensors.

// Fixtures that must be present (a missing one fails ArchFixtures.ExpectedFixturesPresent);
// directories added later are picked up without editing this list.
const std::vector<std::string> kRequiredArchFixtures = {"gemma",
                                                        "gemma-both-act-keys",
                                                        "llama-gqa",
                                                        "llama-rope-dynamic",
                                                        "llama-rope-linear",
                                                        "llama-rope-yarn",
                                                        "llama3-ropescaled-tied",
                                                        "mistral",
                                                        "mistral-sliding-window",
                                                        "mixtral-moe",
                                                        "phi3-fused",
                                                        "phi3-partial-rotary-longrope",
                                                        "qwen2-bias-tied",
                                                        "qwen2-legacy-rope-keys",
                                                        "qwen3-moe",
                                                        "qwen3-moe-hub-config",
                                                        "qwen3-qknorm"};

// Logits against a fixture golden: the project criterion and the tight bound.
std::string compare_fixture_logits(const float* ours, const float* golden, int64_t rows,
                                   int64_t vocab) {
  std::string loose = compare_logits(ours, golden, rows, vocab);
  if (!loose.empty()) return loose;
  return compare_logits(ours, golden, rows, vocab, 0, kStrictRelativeTolerance);
}

std::vector<std::string> arch_fixture_names() {
  std::vector<std::string> names;
  const fs::path root = kSourceDir / "tests/golden/arch";
  if (!fs::is_directory(root)) return names;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && fs::exists(entry.path() / "golden.safetensors") &&
        fs::exists(entry.path() / "config.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(ArchFixtures, ExpectedFixturesPresent) {
  const std::vector<std::string> present = arch_fixture_names();
  for (const std::string& name : kRequiredArchFixtures) {
    EXPECT_NE(std::find(present.begin(), present.end(), name), present.end())
        << "missing fixture tests/golden/arch/" << name;
  }
}

class ArchFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchFixtureTest, LogitsAndGreedyMatchTransformers) {
  const fs::path dir = kSourceDir / "tests/golden/arch" / GetParam();
  std::unique_ptr<Model> model = Model::load(dir.string());
  auto golden = formats::SafetensorsFile::open((dir / "golden.safetensors").string());
  const Tensor input_ids = golden->get("input_ids");
  const Tensor expected = golden->get("logits");
  const int64_t vocab = model->config().vocab_size;
  const int64_t seq = input_ids.dim(1);
  ASSERT_EQ(expected.shape(), (Shape{input_ids.dim(0), seq, vocab}));
  for (int64_t row = 0; row < input_ids.dim(0); ++row) {
    KvCache cache = model->new_cache();
    const Tensor logits = model->forward(ids_of(input_ids, row), cache, true);
    EXPECT_EQ(
        compare_fixture_logits(logits.data_as<const float>(),
                               expected.data_as<const float>() + row * seq * vocab, seq, vocab),
        "")
        << GetParam() << " row " << row;
  }
  // Optional keys of the newer fixtures: a 40-token input crossing RoPE thresholds and windows,
  // the RoPE tables transformers held, and the logits behind every greedy step.
  if (golden->has("long_input_ids")) {
    const Tensor long_ids = golden->get("long_input_ids");
    const Tensor long_expected = golden->get("long_logits");
    KvCache cache = model->new_cache();
    const Tensor logits = model->forward(ids_of(long_ids), cache, true);
    EXPECT_EQ(compare_fixture_logits(logits.data_as<const float>(),
                                     long_expected.data_as<const float>(), long_ids.dim(1), vocab),
              "")
        << GetParam() << " long input";
  }
  if (golden->has("rope_inv_freq")) {
    const Tensor scaling = golden->get("rope_attention_scaling");
    EXPECT_EQ(compare_inv_freq(compute_rope_frequencies(model->config(), 0),
                               golden->get("rope_inv_freq"), &scaling),
              "")
        << GetParam() << " RoPE at load";
  }
  if (golden->has("rope_inv_freq_after_long")) {
    const int64_t long_length = golden->get("long_input_ids").dim(1);
    EXPECT_EQ(compare_inv_freq(compute_rope_frequencies(model->config(), long_length),
                               golden->get("rope_inv_freq_after_long"), nullptr),
              "")
        << GetParam() << " RoPE for a " << long_length << "-token call";
  }
  const std::vector<int32_t> greedy_expected = ids_of(golden->get("greedy_ids"));
  const int steps = static_cast<int>(greedy_expected.size() - static_cast<size_t>(seq));
  std::vector<float> step_logits;
  const std::vector<int32_t> ours =
      greedy(*model, ids_of(input_ids, 0), steps, {}, 0, true, &step_logits);
  EXPECT_EQ(ours, greedy_expected) << GetParam();
  if (golden->has("greedy_logits")) {
    const Tensor expected_steps = golden->get("greedy_logits");
    ASSERT_EQ(expected_steps.numel(), static_cast<int64_t>(step_logits.size()));
    for (int step = 0; step < steps; ++step) {
      EXPECT_EQ(
          compare_fixture_logits(step_logits.data() + step * vocab,
                                 expected_steps.data_as<const float>() + step * vocab, 1, vocab),
          "")
          << GetParam() << " greedy step " << step;
    }
  }
  if (golden->has("nocache_greedy_ids")) {
    // The stateless variant (llama-rope-dynamic): every step a fresh full forward of the prefix.
    std::vector<int32_t> ids = ids_of(input_ids, 0);
    for (int step = 0; step < steps; ++step) {
      KvCache fresh = model->new_cache();
      const Tensor logits = model->forward(ids, fresh, false);
      ids.push_back(static_cast<int32_t>(argmax(logits.data_as<const float>(), vocab)));
    }
    EXPECT_EQ(ids, ids_of(golden->get("nocache_greedy_ids"))) << GetParam() << " no-cache greedy";
  }
}

std::string fixture_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Golden, ArchFixtureTest, ::testing::ValuesIn(arch_fixture_names()),
                         fixture_test_name);

}  // namespace
}  // namespace lowbit::models
