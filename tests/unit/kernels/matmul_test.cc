// Every CPU matmul kernel this machine can run (each ISA, each path, selected explicitly) against
// the naive ref::matmul over awkward shapes, all weight dtypes, with and without bias.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels {
namespace {

using cpu::MatmulKernel;
using cpu::MatmulPath;

struct Variant {
  MatmulKernel kernel;
  MatmulPath path;
  std::string name() const {
    const char* p = path == MatmulPath::AUTO ? "auto" : path == MatmulPath::STREAMING ? "streaming" : "blocked";
    return std::string(cpu::matmul_kernel_name(kernel)) + "/" + p;
  }
};

std::vector<Variant> supported_variants() {
  std::vector<Variant> out;
  for (MatmulKernel k : cpu::matmul_supported_kernels()) {
    for (MatmulPath p : {MatmulPath::AUTO, MatmulPath::STREAMING, MatmulPath::BLOCKED}) out.push_back({k, p});
  }
  return out;
}

// A small fast generator (splitmix64): the tests draw tens of millions of values.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// Random non-zero values, magnitude in [0.1, 1) (or spread over 2^±12 when `spread`), random sign.
std::vector<float> random_values(size_t count, Rng& rng, bool spread = false) {
  std::vector<float> v(count);
  for (float& f : v) {
    uint64_t r = rng.next();
    float magnitude = 0.1f + 0.9f * static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
    if (spread) magnitude = std::ldexp(magnitude, static_cast<int>((r >> 8) % 25) - 12);
    f = (r & 1) ? -magnitude : magnitude;
  }
  return v;
}

// A weight tensor of `dtype` holding `values` (rounded to the dtype first).
Tensor make_weight(DType dtype, int64_t n, int64_t k, const std::vector<float>& values) {
  Tensor w = Tensor::zeros(dtype, {n, k});
  for (int64_t i = 0; i < n * k; ++i) {
    float f = values[static_cast<size_t>(i)];
    if (dtype == DType::F32) w.data_as<float>()[i] = f;
    if (dtype == DType::BF16) w.data_as<uint16_t>()[i] = f32_to_bf16(f);
    if (dtype == DType::F16) w.data_as<uint16_t>()[i] = f32_to_f16(f);
  }
  return w;
}

// The same tensor with every element's sign cleared (exact in every dtype).
Tensor abs_weight(const Tensor& w) {
  Tensor out = Tensor::zeros(w.dtype(), w.shape());
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (w.dtype() == DType::F32) {
      out.data_as<float>()[i] = std::fabs(w.data_as<float>()[i]);
    } else {
      out.data_as<uint16_t>()[i] = w.data_as<uint16_t>()[i] & 0x7FFF;
    }
  }
  return out;
}

// Tolerance. Any fp32 evaluation of s = b + Σ_p x_p·w_p (any order, with or without FMA) is within
// γ(k+1)·(|b| + Σ|x_p·w_p|) of the exact value, γ(n) = n·u / (1 - n·u), u = 2^-24 (Higham,
// "Accuracy and Stability", §3.1). A kernel and ref differ only in order, so they are within twice
// that. `magnitude` = ref::matmul(|x|, |W|) is itself computed in fp32 (relative error ≤ γ(k)),
// hence the factor 1.01. A kernel that drops, repeats or misplaces even one term of a k=1024 sum
// is off by ~Σ|x·w|/k ≈ 1e-3·Σ|x·w|, far above the 1.2e-4·Σ|x·w| allowed.
float tolerance(int64_t k, float magnitude, float bias) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = (k + 1) * u / (1.0 - (k + 1) * u);
  return static_cast<float>(2.0 * gamma * 1.01 * (magnitude + std::fabs(bias))) + 1e-30f;
}

struct Problem {
  int64_t m, k, n;
  Tensor w;
  std::vector<float> x, bias, y_ref, magnitude;
};

Problem make_problem(DType dtype, int64_t m, int64_t k, int64_t n, Rng& rng, bool spread) {
  Problem p{m, k, n, Tensor(), random_values(static_cast<size_t>(m * k), rng, spread),
            random_values(static_cast<size_t>(n), rng), {}, {}};
  p.w = make_weight(dtype, n, k, random_values(static_cast<size_t>(n * k), rng, spread));
  p.y_ref.resize(static_cast<size_t>(m * n));
  p.magnitude.resize(p.y_ref.size());
  ref::matmul(p.x.data(), m, k, p.w, nullptr, p.y_ref.data());
  std::vector<float> abs_x(p.x.size());
  for (size_t i = 0; i < abs_x.size(); ++i) abs_x[i] = std::fabs(p.x[i]);
  ref::matmul(abs_x.data(), m, k, abs_weight(p.w), nullptr, p.magnitude.data());
  return p;
}

// Runs `variant` on `p` with or without bias; returns how many outputs were out of tolerance
// (and reports the first few).
int check_variant(const Problem& p, const Variant& variant, bool with_bias) {
  std::vector<float> y(p.y_ref.size(), std::numeric_limits<float>::quiet_NaN());
  const float* bias = with_bias ? p.bias.data() : nullptr;
  cpu::matmul_with(variant.kernel, variant.path, p.x.data(), p.m, p.k, p.w, bias, y.data());
  int bad = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      size_t at = static_cast<size_t>(i * p.n + j);
      float b = with_bias ? p.bias[static_cast<size_t>(j)] : 0.0f;
      float expected = p.y_ref[at] + b;  // ref::matmul adds the bias to the finished sum, like this
      float tol = tolerance(p.k, p.magnitude[at], b);
      if (!(std::fabs(y[at] - expected) <= tol) && ++bad <= 3) {
        ADD_FAILURE() << variant.name() << " " << dtype_name(p.w.dtype()) << " m=" << p.m
                      << " k=" << p.k << " n=" << p.n << " bias=" << with_bias << " y[" << i
                      << "][" << j << "] = " << y[at] << ", ref " << expected << ", tolerance " << tol;
      }
    }
  }
  return bad;
}

class MatmulDTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulDTypeTest, EveryKernelMatchesReferenceOnAwkwardShapes) {
  Rng rng(1234);
  const std::vector<Variant> variants = supported_variants();
  int shape_index = 0;
  for (int64_t m : {1, 2, 3, 5, 17, 64, 130}) {
    for (int64_t k : {1, 7, 16, 33, 384, 1000, 1024}) {
      for (int64_t n : {1, 3, 17, 64, 1000}) {
        if (m * k * n > 8'000'000) continue;  // keeps the naive reference fast; see next loop
        Problem p = make_problem(GetParam(), m, k, n, rng, /*spread=*/false);
        for (const Variant& v : variants) {
          // Both bias settings on every shape would double the time without new code paths:
          // alternate, and cover both on the small shapes.
          bool both = m * k * n < 100'000;
          if (both || shape_index % 2 == 0) {
            EXPECT_EQ(check_variant(p, v, true), 0);
          }
          if (both || shape_index % 2 == 1) {
            EXPECT_EQ(check_variant(p, v, false), 0);
          }
        }
        ++shape_index;
      }
    }
  }
  // The largest shapes of the grid (several k and n blocks, a ragged last sliver), once each.
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{130, 1000, 1000}, {64, 1024, 1000},
                         {130, 1024, 64}, {17, 1000, 1000}}) {
    Problem p = make_problem(GetParam(), m, k, n, rng, false);
    for (const Variant& v : variants) EXPECT_EQ(check_variant(p, v, true), 0);
  }
}

TEST_P(MatmulDTypeTest, MagnitudesSpreadOverManyBinades) {
  Rng rng(99);
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1000, 17}, {3, 384, 64},
                         {64, 1024, 33}, {130, 33, 1000}}) {
    Problem p = make_problem(GetParam(), m, k, n, rng, /*spread=*/true);
    for (const Variant& v : supported_variants()) EXPECT_EQ(check_variant(p, v, true), 0);
  }
}

// Uneven splits between threads (more threads than cores is still correct) and the
// single-thread path for shapes that would otherwise be split.
TEST_P(MatmulDTypeTest, ThreadCountsDoNotChangeCorrectness) {
  Rng rng(7);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3, 4}) {
    omp_set_num_threads(threads);
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1024, 1000}, {4, 384, 1000},
                           {130, 384, 1000}, {130, 1000, 17}, {64, 1024, 3}}) {
      Problem p = make_problem(GetParam(), m, k, n, rng, false);
      for (const Variant& v : supported_variants()) {
        EXPECT_EQ(check_variant(p, v, true), 0) << "threads=" << threads;
      }
    }
  }
  omp_set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(AllWeightDTypes, MatmulDTypeTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// The bit pattern of +inf / NaN in each weight dtype.
uint16_t narrow_special(DType dtype, bool nan) {
  if (dtype == DType::BF16) return nan ? 0x7FC0 : 0x7F80;
  return nan ? 0x7E00 : 0x7C00;
}

void set_weight(Tensor& w, int64_t index, bool nan) {
  if (w.dtype() == DType::F32) {
    w.data_as<float>()[index] = nan ? std::numeric_limits<float>::quiet_NaN()
                                    : std::numeric_limits<float>::infinity();
  } else {
    w.data_as<uint16_t>()[index] = narrow_special(w.dtype(), nan);
  }
}

// IEEE semantics survive every kernel: a NaN in x poisons its row of y, an inf weight (times
// positive x) makes its column +inf, a NaN weight makes its column NaN; nothing else is touched.
// Positions are chosen both inside full vector chunks and in the ragged tail of k.
TEST(MatmulTest, InfAndNanPropagate) {
  Rng rng(5);
  const int64_t m = 7, k = 33, n = 40;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t p : {int64_t{3}, int64_t{32}}) {
      std::vector<float> values = random_values(static_cast<size_t>(n * k), rng);
      Tensor w = make_weight(dtype, n, k, values);
      set_weight(w, 5 * k + p, /*nan=*/false);
      set_weight(w, 37 * k + p, /*nan=*/true);
      std::vector<float> x = random_values(static_cast<size_t>(m * k), rng);
      for (float& v : x) v = std::fabs(v);
      x[static_cast<size_t>(2 * k + p)] = std::numeric_limits<float>::quiet_NaN();
      for (const Variant& v : supported_variants()) {
        std::vector<float> y(static_cast<size_t>(m * n), 0.0f);
        cpu::matmul_with(v.kernel, v.path, x.data(), m, k, w, nullptr, y.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            float got = y[static_cast<size_t>(i * n + j)];
            std::string where = v.name() + " " + std::string(dtype_name(dtype)) + " p=" +
                                std::to_string(p) + " y[" + std::to_string(i) + "][" +
                                std::to_string(j) + "]";
            if (i == 2 || j == 37) {
              EXPECT_TRUE(std::isnan(got)) << where << " = " << got;
            } else if (j == 5) {
              EXPECT_EQ(got, std::numeric_limits<float>::infinity()) << where;
            } else {
              EXPECT_TRUE(std::isfinite(got)) << where << " = " << got;
            }
          }
        }
      }
    }
  }
}

TEST(MatmulTest, EmptySumGivesBiasAndEmptyOutputsAreNoOps) {
  Tensor w = Tensor::zeros(DType::BF16, {3, 0});
  std::vector<float> bias = {1.0f, -2.0f, 3.5f};
  std::vector<float> y(6, 42.0f);
  for (const Variant& v : supported_variants()) {
    cpu::matmul_with(v.kernel, v.path, nullptr, 2, 0, w, bias.data(), y.data());
    EXPECT_EQ(y, (std::vector<float>{1.0f, -2.0f, 3.5f, 1.0f, -2.0f, 3.5f})) << v.name();
    cpu::matmul_with(v.kernel, v.path, nullptr, 2, 0, w, nullptr, y.data());
    EXPECT_EQ(y, std::vector<float>(6, 0.0f)) << v.name();
  }
  Tensor w2 = Tensor::zeros(DType::F32, {3, 4});
  std::vector<float> untouched(1, 42.0f);
  matmul(nullptr, 0, 4, w2, nullptr, untouched.data());
  EXPECT_EQ(untouched[0], 42.0f);
}

TEST(MatmulTest, DispatchedKernelIsTheBestSupportedOne) {
  Rng rng(11);
  Problem p = make_problem(DType::BF16, 5, 100, 70, rng, false);
  std::vector<float> a(p.y_ref.size()), b(p.y_ref.size());
  matmul(p.x.data(), p.m, p.k, p.w, p.bias.data(), a.data());
  cpu::matmul_with(cpu::matmul_best_kernel(), MatmulPath::AUTO, p.x.data(), p.m, p.k, p.w,
                   p.bias.data(), b.data());
  EXPECT_EQ(a, b);  // same kernel, same order: bit-identical
  EXPECT_STREQ(matmul_kernel_name(), cpu::matmul_kernel_name(cpu::matmul_best_kernel()));
  const cpu::CpuFeatures& f = cpu::cpu_features();
  EXPECT_EQ(cpu::matmul_kernel_supported(MatmulKernel::AVX512), f.has_avx512_kernels());
  EXPECT_EQ(cpu::matmul_kernel_supported(MatmulKernel::AVX2), f.has_avx2_kernels());
  EXPECT_TRUE(cpu::matmul_kernel_supported(MatmulKernel::SCALAR));
}

// The opt-in bf16-dot path equals ref::matmul on x rounded to bf16 (products of two bf16 values
// are exact in fp32, so only the summation order differs: same tolerance as above).
TEST(MatmulBf16DotTest, MatchesReferenceOnBf16RoundedActivations) {
  if (!cpu::matmul_bf16_dot_supported()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  Rng rng(21);
  for (int64_t m : {1, 5, 17, 130}) {
    for (int64_t k : {1, 7, 33, 384, 1000}) {
      for (int64_t n : {1, 17, 64, 1000}) {
        Problem p = make_problem(DType::BF16, m, k, n, rng, false);
        for (float& v : p.x) v = bf16_to_f32(f32_to_bf16(v));
        ref::matmul(p.x.data(), m, k, p.w, nullptr, p.y_ref.data());  // recompute on rounded x
        std::vector<float> y(p.y_ref.size());
        cpu::matmul_bf16_dot(p.x.data(), m, k, p.w, p.bias.data(), y.data());
        int bad = 0;
        for (size_t at = 0; at < y.size(); ++at) {
          float b = p.bias[at % static_cast<size_t>(n)];
          float expected = p.y_ref[at] + b;
          float tol = tolerance(k, p.magnitude[at], b);
          if (!(std::fabs(y[at] - expected) <= tol) && ++bad <= 3) {
            ADD_FAILURE() << "bf16_dot m=" << m << " k=" << k << " n=" << n << " at " << at << ": "
                          << y[at] << " vs " << expected << " tol " << tol;
          }
        }
      }
    }
  }
  std::vector<float> x(8), y(4);
  EXPECT_THROW(cpu::matmul_bf16_dot(x.data(), 2, 4, Tensor::zeros(DType::F32, {2, 4}), nullptr,
                                    y.data()),
               Unsupported);
}

TEST(MatmulTest, BadShapesAndDTypesThrow) {
  std::vector<float> x(8), y(8);
  Tensor w = Tensor::zeros(DType::F32, {2, 4});
  EXPECT_THROW(matmul(x.data(), 2, 3, w, nullptr, y.data()), Internal);
  EXPECT_THROW(matmul(x.data(), 2, 4, Tensor::zeros(DType::F32, {8}), nullptr, y.data()), Internal);
  EXPECT_THROW(matmul(x.data(), 2, 4, Tensor::zeros(DType::I8, {2, 4}), nullptr, y.data()),
               Unsupported);
  EXPECT_THROW(matmul(x.data(), 2, 4, Tensor::zeros(DType::F8_E4M3, {2, 4}), nullptr, y.data()),
               Unsupported);
}

}  // namespace
}  // namespace lowbit::kernels
