// The pitfall checks fire at their stated thresholds and not below them.
#include "eval/pitfalls.h"

#include <gtest/gtest.h>

namespace lowbit::eval {
namespace {

std::vector<std::string> kinds(const PitfallInputs& in) {
  std::vector<std::string> out;
  for (const Pitfall& p : check_pitfalls(in)) out.push_back(p.kind);
  return out;
}

PitfallInputs healthy() {
  PitfallInputs in;
  in.has_greedy = true;
  in.model = {64, 0.10, 200};
  in.baseline = {64, 0.10, 100};
  in.model_kernels = {"wna16_avx512"};
  in.model_quantization = "compressed-tensors (checkpoint)";
  return in;
}

TEST(PitfallsTest, NoneForAHealthyQuantizedModel) { EXPECT_TRUE(kinds(healthy()).empty()); }

TEST(PitfallsTest, LmHeadQuantizedOnlyWhenTheBaselinesIsNot) {
  PitfallInputs in = healthy();
  in.model_lm_head_kernel = "w8a8_avx512vnni";
  EXPECT_EQ(kinds(in), std::vector<std::string>{"lm_head_quantized"});
  in.baseline_lm_head_kernel = "w8a8_avx512vnni";
  EXPECT_TRUE(kinds(in).empty());
}

TEST(PitfallsTest, ShorterOutputsBelowEightyPercent) {
  PitfallInputs in = healthy();
  in.model.mean_length = 0.81 * 64;
  EXPECT_TRUE(kinds(in).empty());
  in.model.mean_length = 0.79 * 64;
  EXPECT_EQ(kinds(in), std::vector<std::string>{"shorter_outputs"});
}

TEST(PitfallsTest, RepetitiveOutputsAboveTenPoints) {
  PitfallInputs in = healthy();
  in.model.repeated_4grams = 0.19;
  EXPECT_TRUE(kinds(in).empty());
  in.model.repeated_4grams = 0.21;
  EXPECT_EQ(kinds(in), std::vector<std::string>{"repetitive_outputs"});
}

TEST(PitfallsTest, NotFasterOnlyForQuantizedWeights) {
  PitfallInputs in = healthy();
  in.model.decode_tokens_per_second = 100;  // equal: not faster
  const auto found = check_pitfalls(in);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "not_faster");
  EXPECT_NE(found[0].message.find("wna16_avx512"), std::string::npos) << found[0].message;
  in.model_kernels.clear();  // a dense model (e.g. only an fp8 KV cache): no speed expectation
  EXPECT_TRUE(kinds(in).empty());
}

TEST(PitfallsTest, KvCacheFp8GrowthNeedsRatioAndSize) {
  PitfallInputs in = healthy();
  in.kv_cache_fp8 = true;
  in.kv_cache = "fp8_e4m3";
  in.kld_first_quarter = 0.004;
  in.kld_last_quarter = 0.0059;  // 1.47x
  EXPECT_TRUE(kinds(in).empty());
  in.kld_last_quarter = 0.0061;  // 1.53x and above 0.005
  EXPECT_EQ(kinds(in), std::vector<std::string>{"kv_cache_fp8_long_context"});
  in.kld_first_quarter = 0.001;
  in.kld_last_quarter = 0.004;  // 4x but tiny
  EXPECT_TRUE(kinds(in).empty());
  in.kv_cache_fp8 = false;
  in.kld_last_quarter = 0.1;
  EXPECT_TRUE(kinds(in).empty());
}

}  // namespace
}  // namespace lowbit::eval
