// Observers against llm-compressor 0.14.0.1's MemorylessMSEObserver, StaticMinMaxObserver and
// MinMaxObserver (tests/unit/quant_algos/data/observers.safetensors).
#include <gtest/gtest.h>

#include "algo_test_util.h"
#include "lowbit/error.h"
#include "quant/algos/observers.h"

namespace lowbit::quant {
namespace {

using testing::Golden;

TEST(ObserversGoldenTest, MseSearchKeepsTheSameRanges) {
  const Golden g("observers.safetensors");
  for (const auto& c : g.cases()) {
    if (!c.contains("weight")) continue;
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const QuantArgs args = testing::args_of(c["args"]);
    const std::string wname = c["weight"];
    const DType compute = wname == "w" ? DType::BF16 : DType::F32;
    const std::vector<float> w = g.f32(wname);
    const int64_t rows = g.shape(wname)[0], cols = g.shape(wname)[1];
    ASSERT_TRUE(observer_is_mse(args));
    const SlotRange r = mse_weight_range(w.data(), rows, cols, args, compute,
                                         MseOptions::from_args(args));
    // Same candidates, same per-op rounding, same strict "<" and global patience: the kept
    // ranges are identical. (torch's vectorized pow may differ from std::pow by an ulp in fp32,
    // which could only matter for an exact tie between two steps; none occurs here.)
    EXPECT_EQ(r.min, g.f32(name + ".min"));
    EXPECT_EQ(r.max, g.f32(name + ".max"));
    const QParams qp = observe_weight(w.data(), rows, cols, args, compute);
    EXPECT_EQ(qp.scale, g.f32(name + ".scale"));
    if (!args.symmetric) {
      EXPECT_EQ(qp.zero_point, g.f32(name + ".zero_point"));
    }
  }
}

TEST(ObserversGoldenTest, ActivationObserversPerBatch) {
  const Golden g("observers.safetensors");
  const Shape s = g.shape("acts");  // [3 batches, 2, 8, 64]
  const std::vector<float> acts = g.f32("acts");
  const int64_t tokens = s[1] * s[2], channels = s[3];
  for (const auto& c : g.cases()) {
    if (c.contains("weight")) continue;
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const QuantArgs args = testing::args_of(c["args"]);
    const bool ema = c["observer"] == "minmax";
    StaticMinMax stat;
    EmaMinMax avg(0.01, DType::BF16);
    const std::vector<float> mins = g.f32(name + ".min"), maxs = g.f32(name + ".max");
    const size_t slots = mins.size() / static_cast<size_t>(s[0]);
    // Per-tensor cases also go through the quantize pipeline's observer (one slot).
    QuantArgs named = args;
    named.observer = c["observer"];
    InputRangeObserver pipeline(named, DType::BF16, name);
    for (int64_t b = 0; b < s[0]; ++b) {
      const float* batch_values = acts.data() + b * tokens * channels;
      const SlotRange batch = activation_slot_range(batch_values, tokens, channels, args);
      ema ? avg.update(batch) : stat.update(batch);
      const SlotRange& r = ema ? avg.range() : stat.range();
      ASSERT_EQ(r.min.size(), slots);
      // bf16 lerp op by op as torch does it: identical values.
      for (size_t k = 0; k < slots; ++k) {
        EXPECT_EQ(r.min[k], mins[b * slots + k]) << "batch " << b << " slot " << k;
        EXPECT_EQ(r.max[k], maxs[b * slots + k]) << "batch " << b << " slot " << k;
      }
      if (slots == 1) {
        pipeline.observe(batch_values, static_cast<size_t>(tokens * channels));
        EXPECT_EQ(pipeline.min(), mins[b]) << "batch " << b;
        EXPECT_EQ(pipeline.max(), maxs[b]) << "batch " << b;
      }
    }
  }
}

TEST(ObserversTest, InputRangeObserverKinds) {
  QuantArgs a;  // int8 per tensor, static
  const std::vector<float> first = {-1.0f, 2.0f}, second = {-3.0f, 1.0f};
  auto run = [&](const std::string& observer) {
    a.observer = observer;
    InputRangeObserver o(a, DType::F32, "test");
    EXPECT_TRUE(o.empty());
    o.observe(first.data(), first.size());
    o.observe(second.data(), second.size());
    return std::pair{o.min(), o.max()};
  };
  EXPECT_EQ(run("static_minmax"), (std::pair{-3.0f, 2.0f}));
  EXPECT_EQ(run("memoryless_minmax"), (std::pair{-3.0f, 1.0f}));
  // compressed-tensors' default for static inputs is minmax: -1·0.99 + -3·0.01, 2·0.99 + 1·0.01.
  const auto ema = run("");
  EXPECT_FLOAT_EQ(ema.first, -1.02f);
  EXPECT_FLOAT_EQ(ema.second, 1.99f);
  a.observer = "mse";
  EXPECT_THROW(InputRangeObserver(a, DType::F32, "test"), Unsupported);
}

TEST(ObserversTest, ObserverNamesAndKwargs) {
  QuantArgs a;
  a.num_bits = 4;
  a.strategy = Strategy::Channel;
  EXPECT_FALSE(observer_is_mse(a));
  a.observer = "static_minmax";  // forced to memoryless for weights
  EXPECT_FALSE(observer_is_mse(a));
  a.observer = "mse";
  EXPECT_TRUE(observer_is_mse(a));
  a.observer = "imatrix_mse";
  EXPECT_THROW(observer_is_mse(a), Unsupported);
  a.observer = "nvfp4_expanded_mse";
  a.observer_kwargs = {{"patience", 7}};
  const MseOptions o = MseOptions::from_args(a);
  EXPECT_EQ(o.expand, 1.8);
  EXPECT_EQ(o.grid, 200.0);
  EXPECT_EQ(o.patience, 7);
  a.observer_kwargs = {{"expand", 0.5}};
  EXPECT_THROW(MseOptions::from_args(a), InvalidArgument);
  a.observer_kwargs = {{"grid", "many"}};
  EXPECT_THROW(MseOptions::from_args(a), InvalidArgument);
}

TEST(ObserversTest, BlockRangesIncludeThePadding) {
  QuantArgs a;
  a.type = QuantType::Float;
  a.strategy = Strategy::Block;
  a.block_rows = a.block_cols = 2;
  const std::vector<float> w = {1, 2, 3,   //
                                4, 5, 6,   //
                                7, 8, 9};  // 3x3 → 2x2 blocks, three of them padded with zeros
  const SlotRange r = weight_slot_range(w.data(), 3, 3, a);
  EXPECT_EQ(r.min, (std::vector<float>{1, 0, 0, 0}));
  EXPECT_EQ(r.max, (std::vector<float>{5, 6, 8, 9}));
}

TEST(ObserversTest, RejectsMismatchedBatches) {
  QuantArgs a;
  a.strategy = Strategy::Tensor;
  SlotRange one;
  one.min = {0.0f};
  one.max = {1.0f};
  SlotRange two = one;
  two.min.push_back(0.0f);
  two.max.push_back(1.0f);
  StaticMinMax s;
  s.update(one);
  EXPECT_THROW(s.update(two), InvalidArgument);
  a.strategy = Strategy::Token;
  const float x[4] = {1, 2, 3, 4};
  EXPECT_THROW(activation_slot_range(x, 2, 2, a), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::quant
