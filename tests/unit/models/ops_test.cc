// The fp32 decoder ops (kernels/ops.h) against straightforward double-precision definitions, over
// awkward shapes: one query (decode path) and many (matmul path), GQA groups, sliding windows,
// queries after a cached prefix, partial rotary dims.
#include "kernels/ops.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/attention_group_impl.h"

namespace lowbit::kernels {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// softmax(q·k·scale) · v over visible keys, in double.
std::vector<double> reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, const AttentionShape& s) {
  const int64_t hd = s.head_dim;
  const int group = s.heads / s.kv_heads;
  std::vector<double> out(static_cast<size_t>(s.queries * s.heads * hd), 0.0);
  for (int64_t i = 0; i < s.queries; ++i) {
    const int64_t p = s.past + i;
    const int64_t lo = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / group;
      std::vector<double> w;
      double max_score = -1e300;
      for (int64_t j = lo; j <= p; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) {
          dot += double(q[(i * s.heads + h) * hd + d]) * double(k[(j * s.kv_heads + g) * hd + d]);
        }
        w.push_back(dot * s.scale);
        max_score = std::max(max_score, w.back());
      }
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - max_score));
      for (int64_t j = lo; j <= p; ++j) {
        for (int64_t d = 0; d < hd; ++d) {
          out[(i * s.heads + h) * hd + d] +=
              w[j - lo] / sum * double(v[(j * s.kv_heads + g) * hd + d]);
        }
      }
    }
  }
  return out;
}

struct AttentionCase {
  int64_t queries, past;
  int heads, kv_heads, head_dim;
  int64_t window;
};

// The kernel's shape of a case, scores scaled by 1/sqrt(head_dim) as the models do.
AttentionShape shape_of(const AttentionCase& c) {
  AttentionShape s;
  s.queries = c.queries;
  s.past = c.past;
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.window = c.window;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return s;
}

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, MatchesDoubleReference) {
  const AttentionCase c = GetParam();
  const AttentionShape s = shape_of(c);
  const int64_t total = c.past + c.queries;
  const auto q = random_vector(static_cast<size_t>(c.queries * c.heads * c.head_dim), 1, 2.0f);
  const auto k = random_vector(static_cast<size_t>(total * c.kv_heads * c.head_dim), 2, 2.0f);
  const auto v = random_vector(static_cast<size_t>(total * c.kv_heads * c.head_dim), 3);
  std::vector<float> out(q.size(), -7.0f);
  attention(q.data(), k.data(), v.data(), s, out.data());
  const std::vector<double> expected = reference_attention(q, k, v, s);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - expected[i]));
  // Outputs are convex combinations of N(0,1) values; fp32 accumulation over <= 300 keys.
  EXPECT_LT(worst, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(AttentionCase{1, 0, 4, 2, 16, 0},      // first decode step
                      AttentionCase{1, 37, 6, 2, 64, 0},     // decode after a prefix
                      AttentionCase{3, 5, 4, 4, 8, 0},       // few queries, no GQA
                      AttentionCase{1, 37, 4, 1, 32, 8},     // decode in a sliding window
                      AttentionCase{12, 0, 4, 2, 32, 0},     // prefill (matmul path)
                      AttentionCase{150, 0, 6, 2, 64, 0},    // two query blocks
                      AttentionCase{40, 20, 8, 2, 16, 0},    // prefill after cached tokens
                      AttentionCase{50, 10, 4, 2, 16, 7},    // prefill in a sliding window
                      AttentionCase{200, 100, 2, 1, 48, 33}  // blocks, window and prefix
                      ));

// Prefill attention runs its (KV head, query block) items in parallel when there are at least two
// per thread, and parallelizes inside the products otherwise; each item computes the same values
// either way, so the thread count changes no bit. 1 thread: the serial path; 2: items (8 of them
// here); 16: fewer items than 2 per thread, the products' own threads.
TEST(AttentionTest, PrefillBitsDoNotDependOnTheThreadCount) {
  const AttentionShape s = shape_of(AttentionCase{250, 30, 6, 2, 64, 0});
  const int64_t total = s.past + s.queries;
  const auto q = random_vector(static_cast<size_t>(s.queries * 6 * 64), 11, 2.0f);
  const auto k = random_vector(static_cast<size_t>(total * 2 * 64), 12, 2.0f);
  const auto v = random_vector(static_cast<size_t>(total * 2 * 64), 13);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 16}) {
    omp_set_num_threads(threads);
    outs.emplace_back(q.size(), -7.0f);
    attention(q.data(), k.data(), v.data(), s, outs.back().data());
  }
  omp_set_num_threads(saved);
  const std::vector<double> expected = reference_attention(q, k, v, s);
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, std::fabs(outs[0][i] - expected[i]));
  EXPECT_LT(worst, 2e-5);  // as MatchesDoubleReference: convex combinations, <= 280 keys
  for (size_t t = 1; t < outs.size(); ++t)
    EXPECT_EQ(std::memcmp(outs[t].data(), outs[0].data(), outs[0].size() * sizeof(float)), 0) << t;
}

// Every ISA build of the decode kernel this CPU can run, against the double reference.
TEST(GroupAttentionTest, EveryIsaVariantMatchesReference) {
  const AttentionShape s = shape_of(AttentionCase{1, 70, 8, 2, 64, 0});
  const int64_t total = s.past + 1;
  const auto q = random_vector(8 * 64, 7, 2.0f);
  const auto k = random_vector(static_cast<size_t>(total * 2 * 64), 8, 2.0f);
  const auto v = random_vector(static_cast<size_t>(total * 2 * 64), 9);
  const std::vector<double> expected = reference_attention(q, k, v, s);
  const cpu::CpuFeatures& f = cpu::cpu_features();
  std::vector<std::pair<const char*, detail::GroupAttentionFn>> kernels = {
      {"baseline", detail::group_attention_baseline}};
  if (f.has_avx2_kernels()) kernels.push_back({"avx2", detail::group_attention_avx2});
  if (f.has_avx512_kernels()) kernels.push_back({"avx512", detail::group_attention_avx512});
  for (const auto& [name, kernel] : kernels) {
    std::vector<float> out(8 * 64), scores(4 * total);
    for (int g = 0; g < 2; ++g) {
      detail::GroupAttentionArgs a{q.data() + g * 4 * 64,
                                   k.data() + g * 64,
                                   v.data() + g * 64,
                                   128,
                                   0,
                                   total,
                                   4,
                                   64,
                                   s.scale,
                                   scores.data(),
                                   out.data() + g * 4 * 64};
      kernel(a);
    }
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_NEAR(out[i], expected[i], 2e-5) << name << " " << i;
  }
}

TEST(ExpApproxTest, RelativeErrorLikeLibm) {
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(detail::exp_approx(x) - exact) / exact);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(detail::exp_approx(0.0f), 1.0f);
  EXPECT_GT(detail::exp_approx(-1000.0f), 0.0f);       // clamped, still a normal number
  EXPECT_GT(detail::exp_approx(std::nanf("")), 0.0f);  // no undefined conversion
}

TEST(RmsNormTest, MatchesDefinitionInPlace) {
  const int64_t rows = 3, dim = 37;
  auto x = random_vector(rows * dim, 4, 3.0f);
  const auto w = random_vector(dim, 5);
  const auto original = x;
  rmsnorm(x.data(), w.data(), 1e-5f, rows, dim, x.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < dim; ++i) ms += double(original[r * dim + i]) * original[r * dim + i];
    const double inv = 1.0 / std::sqrt(ms / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(x[r * dim + i], original[r * dim + i] * inv * w[i], 1e-5);
    }
  }
}

TEST(RopeApplyTest, RotatesHalfSplitPairsAndPassesTheRest) {
  const int heads = 2, head_dim = 12, rotary = 8, half = rotary / 2;
  const int64_t rows = 2, stride = heads * head_dim + 3;  // rows padded: stride honoured
  auto x = random_vector(static_cast<size_t>(rows * stride), 6);
  const auto original = x;
  std::vector<float> cos(rows * half), sin(rows * half);
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < half; ++j) {
      cos[r * half + j] = std::cos(0.3f * (r + 1) * (j + 1));
      sin[r * half + j] = std::sin(0.3f * (r + 1) * (j + 1));
    }
  }
  rope_apply(x.data(), rows, stride, heads, head_dim, rotary, cos.data(), sin.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* in = original.data() + r * stride + h * head_dim;
      const float* out = x.data() + r * stride + h * head_dim;
      for (int j = 0; j < half; ++j) {
        const float c = cos[r * half + j], s = sin[r * half + j];
        EXPECT_NEAR(out[j], in[j] * c - in[j + half] * s, 1e-6);
        EXPECT_NEAR(out[j + half], in[j + half] * c + in[j] * s, 1e-6);
      }
      for (int j = rotary; j < head_dim; ++j) EXPECT_EQ(out[j], in[j]);
    }
    for (int64_t pad = heads * head_dim; pad < stride; ++pad) {
      EXPECT_EQ(x[r * stride + pad], original[r * stride + pad]);
    }
  }
}

TEST(GatedActivationTest, SiluAndTanhGeluFormulas) {
  const std::vector<float> gate = {-3.0f, -0.5f, 0.0f, 0.7f, 4.0f};
  const std::vector<float> up = {1.0f, 2.0f, 3.0f, -1.0f, 0.5f};
  std::vector<float> out(5);
  gated_activation(gate.data(), 5, up.data(), 5, 1, 5, Activation::SILU, out.data());
  for (int i = 0; i < 5; ++i) {
    const double z = gate[i];
    EXPECT_NEAR(out[i], z / (1 + std::exp(-z)) * up[i], 1e-6);
  }
  gated_activation(gate.data(), 5, up.data(), 5, 1, 5, Activation::GELU_TANH, out.data());
  for (int i = 0; i < 5; ++i) {
    const double z = gate[i];
    const double g = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    EXPECT_NEAR(out[i], g * up[i], 1e-6);
  }
  gated_activation(gate.data(), 5, up.data(), 5, 1, 5, Activation::GELU, out.data());
  for (int i = 0; i < 5; ++i) {
    const double z = gate[i];
    EXPECT_NEAR(out[i], 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))) * up[i], 1e-6);
  }
}

TEST(EmbeddingTest, DecodesEachStoredDtypeAndScales) {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 0.0078125f, -2.0f, 1.0f};
  std::vector<uint16_t> bf16(6), f16(6);
  for (int i = 0; i < 6; ++i) {
    bf16[i] = f32_to_bf16(values[i]);
    f16[i] = f32_to_f16(values[i]);
  }
  std::vector<float> f32 = values;
  const std::vector<int32_t> ids = {2, 0};
  for (const Tensor& table : {Tensor::view(DType::BF16, {3, 2}, bf16.data(), nullptr),
                              Tensor::view(DType::F16, {3, 2}, f16.data(), nullptr),
                              Tensor::view(DType::F32, {3, 2}, f32.data(), nullptr)}) {
    std::vector<float> out(4);
    embedding_lookup(table, ids.data(), 2, 2.0f, out.data());
    EXPECT_EQ(out, (std::vector<float>{-4.0f, 2.0f, 1.0f, -2.5f}));
  }
}

TEST(SoftmaxTest, SumsToOneAndIsStable) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f};
  softmax_inplace(x.data(), 3);
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0, 1e-6);
  EXPECT_NEAR(x[1], std::exp(1.0) / (1 + std::exp(1.0) + std::exp(-1.0)), 1e-6);
}

}  // namespace
}  // namespace lowbit::kernels
