// Model loading errors (missing, mis-shaped, wrongly typed tensors), forward-pass argument checks,
// KV cache behaviour (fixed capacity, truncation, growth, chunking) and the checkpoint summary.
// Uses the llama-gqa fixture (transformers-written, bf16) and variants of it written here.
#include "models/model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>

#include "core/float_convert.h"
#include "formats/safetensors.h"
#include "lowbit/error.h"

namespace lowbit::models {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const fs::path kFixture = fs::path(LOWBIT_SOURCE_DIR) / "tests/golden/arch/llama-gqa";

// A scratch copy of the fixture whose tensors can be edited before loading.
class EditedCheckpoint {
 public:
  EditedCheckpoint() {
    dir_ =
        fs::temp_directory_path() /
        ("lowbit-model-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(kFixture / "config.json", dir_ / "config.json");
    auto file = formats::SafetensorsFile::open((kFixture / "model.safetensors").string());
    for (const std::string& name : file->names()) tensors_[name] = file->get(name);
    source_ = file;
  }
  ~EditedCheckpoint() { fs::remove_all(dir_); }

  std::map<std::string, Tensor>& tensors() { return tensors_; }
  std::string write() {
    formats::write_safetensors((dir_ / "model.safetensors").string(), tensors_);
    return dir_.string();
  }

 private:
  fs::path dir_;
  std::map<std::string, Tensor> tensors_;
  std::shared_ptr<formats::SafetensorsFile> source_;
};

template <typename Exception>
std::string load_error(const std::string& dir) {
  try {
    Model::load(dir);
  } catch (const Exception& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

TEST(ModelLoadTest, MissingTensorIsNamed) {
  EditedCheckpoint ckpt;
  ckpt.tensors().erase("model.layers.1.mlp.up_proj.weight");
  const std::string message = load_error<InvalidArgument>(ckpt.write());
  EXPECT_THAT(message, HasSubstr("tensor 'model.layers.1.mlp.up_proj.weight' is missing"));
  EXPECT_THAT(message, HasSubstr("lowbit-model-test"));  // the checkpoint directory
}

TEST(ModelLoadTest, MisshapedTensorIsNamedWithBothShapes) {
  EditedCheckpoint ckpt;
  Tensor& q = ckpt.tensors()["model.layers.0.self_attn.q_proj.weight"];
  q = Tensor::zeros(DType::BF16, {64, 128});
  const std::string message = load_error<InvalidArgument>(ckpt.write());
  EXPECT_THAT(message,
              HasSubstr("model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight' "
                        "has shape [64, 128], expected [128, 128]"));
}

TEST(ModelLoadTest, IntegerWeightIsUnsupported) {
  EditedCheckpoint ckpt;
  ckpt.tensors()["model.norm.weight"] = Tensor::zeros(DType::I32, {128});
  EXPECT_THAT(load_error<Unsupported>(ckpt.write()),
              HasSubstr("tensor 'model.norm.weight' has dtype I32"));
}

TEST(ModelLoadTest, UntiedModelWithoutLmHeadIsAnError) {
  EditedCheckpoint ckpt;
  ckpt.tensors().erase("lm_head.weight");
  EXPECT_THAT(load_error<InvalidArgument>(ckpt.write()),
              HasSubstr("tensor 'lm_head.weight' is missing and"));
}

TEST(ModelLoadTest, ExtraTensorsAreReportedNotFatal) {
  EditedCheckpoint ckpt;
  ckpt.tensors()["model.layers.0.self_attn.rotary_emb.inv_freq"] = Tensor::zeros(DType::F32, {16});
  ckpt.tensors()["model.extra.weight"] = Tensor::zeros(DType::BF16, {4});
  std::unique_ptr<Model> model = Model::load(ckpt.write());
  EXPECT_EQ(model->summary().unused_tensors, std::vector<std::string>{"model.extra.weight"});
}

float max_abs_diff(const float* a, const float* b, int64_t n) {
  float d = 0.0f;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

float max_abs(const float* a, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i]));
  return m;
}

Tensor to_f16(const Tensor& t) {
  const Tensor f32 = t.to_f32();
  Tensor out = Tensor::zeros(DType::F16, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    out.data_as<uint16_t>()[i] = f32_to_f16(f32.data_as<const float>()[i]);
  }
  return out;
}

// The same checkpoint stored as F32 (exact) or F16 (the bf16 values of this fixture are within
// fp16's range, so nearly exact) must give the bf16 checkpoint's golden logits: weights are used
// in their stored dtype, whichever it is.
class WeightDtypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(WeightDtypeTest, GivesTheGoldenLogits) {
  EditedCheckpoint ckpt;
  for (auto& [name, tensor] : ckpt.tensors()) {
    tensor = GetParam() == DType::F32 ? tensor.to_f32() : to_f16(tensor);
  }
  std::unique_ptr<Model> model = Model::load(ckpt.write());
  EXPECT_EQ(model->weights().embed.dtype(), GetParam());
  auto golden = formats::SafetensorsFile::open((kFixture / "golden.safetensors").string());
  const Tensor ids = golden->get("input_ids");
  const Tensor expected = golden->get("logits");
  std::vector<int32_t> row(12);
  for (int i = 0; i < 12; ++i)
    row[static_cast<size_t>(i)] = static_cast<int32_t>(ids.data_as<int64_t>()[i]);
  KvCache cache = model->new_cache();
  const Tensor logits = model->forward(row, cache, true);
  const float scale = max_abs(expected.data_as<float>(), 12 * 512);
  // fp32 rounding only (see tests/golden/model_logits_test.cc for the tolerance).
  EXPECT_LE(max_abs_diff(logits.data_as<float>(), expected.data_as<float>(), 12 * 512),
            1e-4f * scale);
}

INSTANTIATE_TEST_SUITE_P(StoredDtypes, WeightDtypeTest, ::testing::Values(DType::F32, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

class LlamaGqaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = Model::load(kFixture.string()).release(); }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static std::vector<int32_t> tokens(int n, int seed) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 37 + seed * 101 + 5) % 512;
    return ids;
  }
  static Model* model_;
};
Model* LlamaGqaTest::model_ = nullptr;

TEST_F(LlamaGqaTest, RejectsBadTokensAndLeavesCacheUnchanged) {
  KvCache cache = model_->new_cache();
  model_->forward(tokens(3, 1), cache, false);
  const std::vector<int32_t> bad = {1, 512};
  try {
    model_->forward(bad, cache, false);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 512 at index 1 is outside the vocabulary [0, 512)"));
  }
  EXPECT_THROW(model_->forward(std::vector<int32_t>{-1}, cache, false), InvalidArgument);
  EXPECT_THROW(model_->forward(std::vector<int32_t>{}, cache, false), InvalidArgument);
  EXPECT_EQ(cache.length(), 3);
  KvCache foreign;  // not made by new_cache()
  EXPECT_THROW(model_->forward(tokens(2, 1), foreign, false), InvalidArgument);
}

TEST_F(LlamaGqaTest, FixedCapacityIsEnforced) {
  KvCache cache = model_->new_cache(8);
  EXPECT_TRUE(cache.fixed_capacity());
  EXPECT_EQ(cache.capacity(), 8);
  model_->forward(tokens(6, 2), cache, false);
  EXPECT_THROW(model_->forward(tokens(3, 3), cache, false), InvalidArgument);
  EXPECT_EQ(cache.length(), 6);
  model_->forward(tokens(2, 3), cache, false);
  EXPECT_EQ(cache.length(), 8);
  EXPECT_THROW(model_->new_cache(-1), InvalidArgument);
}

TEST_F(LlamaGqaTest, TruncateRollsBackExactly) {
  const std::vector<int32_t> prefix = tokens(10, 4);
  KvCache cache = model_->new_cache();
  model_->forward(prefix, cache, false);
  const Tensor first = model_->forward(std::vector<int32_t>{7}, cache, false);
  model_->forward(std::vector<int32_t>{8, 9, 10}, cache, false);  // to be rejected
  cache.truncate(10);
  const Tensor again = model_->forward(std::vector<int32_t>{7}, cache, false);
  EXPECT_EQ(max_abs_diff(first.data_as<float>(), again.data_as<float>(), 512), 0.0f);
  EXPECT_THROW(cache.truncate(12), InvalidArgument);
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
}

TEST_F(LlamaGqaTest, LongInputsChunkedOrSplitGiveTheSameLogits) {
  // 700 tokens cross the decoder's 512-token chunk; splitting the call at 300 must agree.
  const std::vector<int32_t> ids = tokens(700, 5);
  KvCache whole = model_->new_cache();
  const Tensor all = model_->forward(ids, whole, true);
  ASSERT_EQ(all.shape(), (Shape{700, 512}));
  EXPECT_GE(whole.capacity(), 700);
  KvCache split = model_->new_cache();
  const Tensor a = model_->forward(std::span<const int32_t>(ids.data(), 300), split, true);
  const Tensor b = model_->forward(std::span<const int32_t>(ids.data() + 300, 400), split, true);
  const float* ref = all.data_as<float>();
  // Same arithmetic except the attention block boundaries: rounding-level differences only.
  const float scale = max_abs(ref, 700 * 512);
  EXPECT_LE(max_abs_diff(ref, a.data_as<float>(), 300 * 512), 1e-5f * scale);
  EXPECT_LE(max_abs_diff(ref + 300 * 512, b.data_as<float>(), 400 * 512), 1e-5f * scale);
  // The last-position-only result is the last row of the full one.
  KvCache last = model_->new_cache();
  const Tensor tail = model_->forward(ids, last, false);
  ASSERT_EQ(tail.shape(), (Shape{1, 512}));
  EXPECT_LE(max_abs_diff(ref + 699 * 512, tail.data_as<float>(), 512), 1e-5f * scale);
}

TEST_F(LlamaGqaTest, SummaryCountsEveryTensor) {
  const Model::Summary s = model_->summary();
  EXPECT_EQ(s.architecture, "LlamaForCausalLM");
  // embed + lm_head (512x128 each), 2 layers of q,o (128x128), k,v (64x128), gate,up,down
  // (256x128), two norms, and the final norm.
  const int64_t per_layer = 2 * 128 * 128 + 2 * 64 * 128 + 3 * 256 * 128 + 2 * 128;
  const int64_t expected = 2 * 512 * 128 + 2 * per_layer + 128;
  EXPECT_EQ(s.parameters, expected);
  EXPECT_EQ(s.bytes_by_dtype.at("BF16"), 2 * expected);
  EXPECT_EQ(s.tensors.size(), 2u + 2u * 9u + 1u);
  EXPECT_TRUE(std::is_sorted(s.tensors.begin(), s.tensors.end(),
                             [](const auto& x, const auto& y) { return x.name < y.name; }));
  EXPECT_TRUE(s.unused_tensors.empty());
  EXPECT_FALSE(model_->needs_reprefill(10, 11));
}

}  // namespace
}  // namespace lowbit::models
