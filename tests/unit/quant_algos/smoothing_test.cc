// SmoothQuant and AWQ against llm-compressor 0.14.0.1's SmoothQuantModifier and AWQModifier run on a
// small input_layernorm → {q,k,v}_proj block (tests/unit/quant_algos/data/{smoothquant,awq}.safetensors).
#include <gtest/gtest.h>

#include <cmath>

#include "algo_test_util.h"
#include "lowbit/error.h"
#include "quant/algos/smoothing.h"

namespace lowbit::quant {
namespace {

using testing::Golden;

const char* const kBalance[] = {"q_proj", "k_proj", "v_proj"};

struct Block {
  std::vector<std::vector<float>> weights;
  std::vector<BalanceWeight> ws;
};

Block load_balance(const Golden& g, const std::string& prefix) {
  Block b;
  for (const char* n : kBalance) b.weights.push_back(g.f32(prefix + "." + n));
  for (size_t k = 0; k < b.weights.size(); ++k) {
    const Shape s = g.shape(prefix + "." + kBalance[k]);
    b.ws.push_back({b.weights[k].data(), s[0], s[1]});
  }
  return b;
}

TEST(SmoothQuantGoldenTest, RangesAndScales) {
  const Golden g("smoothquant.safetensors");
  for (const auto& c : g.cases()) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const DType compute = c["dtype"] == "bf16" ? DType::BF16 : DType::F32;
    const std::vector<float> act = g.f32(name + ".act");
    const int64_t channels = g.shape(name + ".act")[1];
    ChannelRange range(channels);
    // The hook saw three batches; splitting the same tokens differently gives the same min/max.
    const int64_t tokens = static_cast<int64_t>(act.size()) / channels;
    range.add(act.data(), tokens / 2);
    range.add(act.data() + (tokens / 2) * channels, tokens - tokens / 2);
    EXPECT_EQ(range.min(), g.f32(name + ".min"));
    EXPECT_EQ(range.max(), g.f32(name + ".max"));
    const Block b = load_balance(g, name);
    const std::vector<float> s = smoothquant_scales(range, b.ws, c["alpha"].get<double>(),
                                                    c["algorithm"] == "log_equalization", compute);
    const std::vector<double> ref = g.f64(name + ".scales");
    // Op-by-op rounding in the model dtype; only pow may differ from torch's vectorized (Sleef,
    // <= 1 ulp) pow, i.e. 1.2e-7 relative in fp32 — and a bf16 result only if that ulp straddles
    // a bf16 rounding boundary (none here).
    EXPECT_LT(testing::max_rel_diff(std::vector<double>(s.begin(), s.end()), ref), 1e-6);
  }
}

TEST(AwqGoldenTest, StatisticsGridAndSearch) {
  const Golden g("awq.safetensors");
  for (const auto& c : g.cases()) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const QuantArgs args = testing::args_of(c["args"]);
    AwqOptions opt;
    opt.n_grid = c["n_grid"];
    opt.duo_scaling = c["duo_scaling"] == "both" ? AwqOptions::Duo::Both
                      : c["duo_scaling"] == true ? AwqOptions::Duo::On
                                                 : AwqOptions::Duo::Off;
    const Block b = load_balance(g, name);

    // x_mean: llm-compressor sums |x| in fp32 per batch; lowbit in double → ~1e-7 relative.
    const std::vector<float> act = g.f32(name + ".act");
    const int64_t channels = g.shape(name + ".act")[1];
    ChannelAbsMean mean(channels);
    mean.add(act.data(), static_cast<int64_t>(act.size()) / channels);
    const std::vector<float> x_sum = g.f32(name + ".x_sum");
    const float count = g.f32(name + ".count")[0];
    std::vector<float> x_mean(x_sum.size());
    for (size_t j = 0; j < x_sum.size(); ++j) x_mean[j] = x_sum[j] / count;  // fp32 / int64
    const std::vector<float> mine = mean.mean();
    EXPECT_LT(testing::max_rel_diff(std::vector<double>(mine.begin(), mine.end()),
                                    std::vector<double>(x_mean.begin(), x_mean.end())),
              1e-6);

    std::vector<double> w_mean;
    if (g.has(name + ".w_mean")) {  // bf16 normalisation then an f64 sum: identical up to order
      w_mean = awq_weight_mean(b.ws, args, DType::BF16);
      EXPECT_LT(testing::max_rel_diff(w_mean, g.f64(name + ".w_mean")), 1e-12);
    }

    const std::vector<AwqCandidate> grid = awq_grid(opt);
    const std::vector<double> ratios = g.f64(name + ".cand_ratio");
    const std::vector<float> duos = g.f32(name + ".cand_duo");
    ASSERT_EQ(grid.size(), ratios.size());
    for (size_t k = 0; k < grid.size(); ++k) {
      EXPECT_EQ(grid[k].ratio, ratios[k]) << k;
      EXPECT_EQ(grid[k].duo, duos[k] != 0.0f) << k;
    }

    // The search on the reference statistics: each candidate's scales within 1e-6 (pow ulps),
    // the loss the library measured for it fed back, and the same winner picked.
    const std::vector<double> cand = g.f64(name + ".cand_scales"), losses = g.f64(name + ".cand_loss");
    size_t call = 0;
    double worst = 0.0;
    const AwqResult r = awq_search(
        x_mean, b.ws, args, opt,
        [&](const std::vector<double>& s) {
          const std::vector<double> ref(cand.begin() + call * s.size(),
                                        cand.begin() + (call + 1) * s.size());
          worst = std::max(worst, testing::max_rel_diff(s, ref));
          return losses[call++];
        },
        DType::BF16);
    EXPECT_EQ(call, grid.size());
    EXPECT_LT(worst, 1e-6);
    EXPECT_EQ(r.losses, losses);
    EXPECT_LT(testing::max_rel_diff(r.scales, g.f64(name + ".best_scales")), 1e-6);

    // Q(W·s)/s for kept candidates, from the library's own scales: bit-identical bf16 weights.
    for (int idx : c["kept_candidates"].get<std::vector<int>>()) {
      const std::vector<double> s(cand.begin() + idx * channels,
                                  cand.begin() + (idx + 1) * channels);
      for (size_t k = 0; k < b.ws.size(); ++k) {
        const std::vector<float> q = quantize_scaled(b.ws[k], s, args, DType::BF16);
        const std::string key = name + ".cand" + std::to_string(idx) + "." + kBalance[k];
        EXPECT_EQ(testing::count_mismatches(q, g.f32(key)), 0u) << key;
      }
    }
  }
}

TEST(AwqTest, RejectsDuoScalingWithTensorStrategyAndAllNanLosses) {
  const std::vector<float> w(8 * 4, 0.5f);
  const std::vector<BalanceWeight> ws = {{w.data(), 8, 4}};
  const std::vector<float> x_mean(4, 1.0f);
  QuantArgs tensor;
  tensor.num_bits = 4;
  tensor.strategy = Strategy::Tensor;
  auto ok = [](const std::vector<double>&) { return 1.0; };
  EXPECT_THROW(awq_search(x_mean, ws, tensor, AwqOptions{}, ok), InvalidArgument);
  AwqOptions off;
  off.duo_scaling = AwqOptions::Duo::Off;
  EXPECT_NO_THROW(awq_search(x_mean, ws, tensor, off, ok));
  auto nan = [](const std::vector<double>&) { return std::nan(""); };
  EXPECT_THROW(awq_search(x_mean, ws, tensor, off, nan), Internal);
  const std::vector<float> x_short(3, 1.0f);
  EXPECT_THROW(awq_search(x_short, ws, tensor, off, ok), InvalidArgument);
}

TEST(AwqTest, CandidateScalesAreNormalisedAndFinite) {
  const std::vector<float> x_mean = {0.5f, 2.0f, 8.0f, 0.0f};
  const std::vector<double> s = awq_candidate_scales(x_mean, {}, {0.5, false});
  // sqrt(x) clamped to 1e-4, divided by sqrt(max·min) = sqrt(sqrt(8)·1e-4).
  const double denom = std::sqrt(static_cast<double>(std::sqrt(8.0f)) * 1e-4f);
  EXPECT_NEAR(s[2], std::sqrt(8.0) / denom, 1e-3);
  EXPECT_NEAR(s[3], 1e-4 / denom, 1e-6);
  const std::vector<double> ones = awq_candidate_scales(x_mean, {}, {0.0, false});
  for (double v : ones) EXPECT_EQ(v, 1.0);
}

}  // namespace
}  // namespace lowbit::quant
