// fp8 KV-cache quantization against transformers' fp32 forward with keys (after RoPE) and values
// rounded to fp8 as they enter the cache (tests/golden/kv_cache/README.md). The rounding moves
// these logits by 0.17-0.39; fp32 summation order by ~3e-6, and no cached value lies within 1e-6
// relative of an fp8 rounding tie, so 1e-4 separates right from wrong (a rounding placed before
// RoPE is off by 0.15).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "models/model.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(LOWBIT_SOURCE_DIR) / "tests/golden/arch/llama-gqa";
const fs::path kGolden = fs::path(LOWBIT_SOURCE_DIR) / "tests/golden/kv_cache";

// The model plus one scales file, as one checkpoint directory (links, nothing copied).
fs::path model_with(const std::string& scales_file) {
  const fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "kv-cache-scratch" / (scales_file.empty() ? "none" : scales_file);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kModel / "config.json", dir / "config.json");
  fs::create_symlink(kModel / "model.safetensors", dir / "weights.safetensors");
  if (!scales_file.empty()) fs::create_symlink(kGolden / scales_file, dir / "scales.safetensors");
  return dir;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a.data_as<const float>()[i] -
                                                         b.data_as<const float>()[i])));
  }
  return worst;
}

Tensor logits_of(const models::Model& model) {
  const auto golden = formats::SafetensorsFile::open((kGolden / "golden.safetensors").string());
  const Tensor ids = golden->get("input_ids");
  models::KvCache cache = model.new_cache();
  return model.forward(std::span<const int32_t>(ids.data_as<const int32_t>(), ids.numel()), cache,
                       /*all_logits=*/true);
}

Tensor golden(const std::string& key) {
  return formats::SafetensorsFile::open((kGolden / "golden.safetensors").string())->get(key);
}

struct Case {
  const char* name;
  const char* scales_file;  // "" = the checkpoint has no scales (1.0)
  const char* dtype;
  const char* key;
};

class KvCacheGolden : public ::testing::TestWithParam<Case> {};

TEST_P(KvCacheGolden, MatchesTransformersWithRoundedCache) {
  const Case c = GetParam();
  models::LoadOptions options;
  options.kv_cache.dtype = c.dtype;
  const auto model = models::Model::load(model_with(c.scales_file).string(), options);
  ASSERT_NE(model->kv_cache_quantizer(), nullptr);
  EXPECT_LE(max_abs_diff(logits_of(*model), golden(c.key)), 1e-4) << c.name;
  // The golden really differs from a full-precision cache (the check above means something).
  EXPECT_GE(max_abs_diff(golden(c.key), golden("logits_full")), 0.1) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Variants, KvCacheGolden,
    ::testing::Values(Case{"e4m3_tensor", "scales.safetensors", "fp8", "logits_fp8_e4m3_tensor"},
                      Case{"e4m3_head", "scales_per_head.safetensors", "fp8_e4m3",
                           "logits_fp8_e4m3_head"},
                      Case{"e5m2_tensor", "scales.safetensors", "fp8_e5m2", "logits_fp8_e5m2_tensor"},
                      Case{"e4m3_unit", "", "fp8", "logits_fp8_e4m3_unit"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(KvCache, FullPrecisionAndSkippedLayersMatchTheUnroundedForward) {
  const auto plain = models::Model::load(model_with("scales.safetensors").string());
  EXPECT_EQ(plain->kv_cache_quantizer(), nullptr);
  EXPECT_LE(max_abs_diff(logits_of(*plain), golden("logits_full")), 1e-4);
  models::LoadOptions options;
  options.kv_cache.dtype = "fp8";
  options.kv_cache.skip_layers = {"0", "1"};
  const auto skipped = models::Model::load(model_with("scales.safetensors").string(), options);
  EXPECT_LE(max_abs_diff(logits_of(*skipped), golden("logits_full")), 1e-4);
  options.kv_cache.skip_layers = {"1"};
  const auto one = models::Model::load(model_with("scales.safetensors").string(), options);
  const double partial = max_abs_diff(logits_of(*one), golden("logits_full"));
  EXPECT_GT(partial, 1e-3) << "layer 0 is still rounded";
}

TEST(KvCache, CalculatedScalesComeFromTheFirstBatch) {
  // vLLM's rule: k_scale = max|k| / 200, v_scale = max|v| / 100 over the first forward's rows.
  // Layer 0's keys and values depend only on the embeddings, so a full-precision run gives them.
  const fs::path dir = model_with("");
  const auto plain = models::Model::load(dir.string());
  const auto ids = golden("input_ids");
  models::KvCache cache = plain->new_cache();
  plain->forward(std::span<const int32_t>(ids.data_as<const int32_t>(), ids.numel()), cache, false);
  float kmax = 0, vmax = 0;
  for (int64_t i = 0; i < ids.numel() * cache.row_size(); ++i) {
    kmax = std::max(kmax, std::fabs(cache.keys(0)[i]));
    vmax = std::max(vmax, std::fabs(cache.values(0)[i]));
  }
  models::LoadOptions options;
  options.kv_cache.dtype = "fp8";
  options.kv_cache.calculate_scales = true;
  const auto model = models::Model::load(dir.string(), options);
  logits_of(*model);
  EXPECT_EQ(model->kv_cache_quantizer()->k_scale(0), std::vector<float>{kmax / 200.0f});
  EXPECT_EQ(model->kv_cache_quantizer()->v_scale(0), std::vector<float>{vmax / 100.0f});
  // Fixed after the first batch: a second forward does not change them.
  logits_of(*model);
  EXPECT_EQ(model->kv_cache_quantizer()->k_scale(0), std::vector<float>{kmax / 200.0f});
}

TEST(KvCache, BadOptionsAndScalesAreClearErrors) {
  models::LoadOptions options;
  options.kv_cache.dtype = "int4";
  EXPECT_THROW(models::Model::load(model_with("").string(), options), InvalidArgument);
  options.kv_cache.dtype = "fp8";
  options.kv_cache.skip_layers = {"7"};
  EXPECT_THROW(models::Model::load(model_with("").string(), options), InvalidArgument);
  options.kv_cache.skip_layers = {};
  options.kv_cache.dtype = "auto";
  options.kv_cache.calculate_scales = true;
  EXPECT_THROW(models::Model::load(model_with("").string(), options), InvalidArgument);
}

}  // namespace
}  // namespace lowbit
