// Every FP8 (E4M3) weight-only CPU kernel and path this machine can run against ref::matmul_fp8:
// the decode bit for bit (all 256 codes, subnormals and NaN included) and the products within the
// fp32 bound for evaluating the same sum in another order, over per-tensor, per-channel, group and
// 128x128 block scales with partial edge blocks.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/fp8_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels {
namespace {

using cpu::Fp8Kernel;
using cpu::MatmulPath;

struct Rng {  // splitmix64
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
};

struct Variant {
  Fp8Kernel kernel;
  MatmulPath path;
  std::string name() const {
    const char* p = path == MatmulPath::AUTO        ? "auto"
                    : path == MatmulPath::STREAMING ? "streaming"
                                                    : "blocked";
    return std::string(cpu::fp8_kernel_name(kernel)) + "/" + p;
  }
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (Fp8Kernel k : cpu::fp8_supported_kernels()) {
    for (MatmulPath p : {MatmulPath::AUTO, MatmulPath::STREAMING, MatmulPath::BLOCKED})
      out.push_back({k, p});
  }
  return out;
}

struct Blocks {
  const char* name;
  int64_t block_rows;  // 0: all rows
  int64_t block_cols;  // 0: all columns
};

const Blocks kBlocks[] = {{"tensor", 0, 0},
                          {"channel", 1, 0},
                          {"group32", 1, 32},
                          {"group128", 1, 128},
                          {"block128", 128, 128}};

// Random finite codes (every code but the NaNs 0x7F / 0xFF, subnormals included) and scales.
Fp8Weights make_weights(const Blocks& b, int64_t rows, int64_t cols, Rng& rng) {
  Fp8Weights w;
  w.rows = rows;
  w.cols = cols;
  w.block_rows = b.block_rows > 0 ? b.block_rows : rows;
  w.block_cols = b.block_cols > 0 ? b.block_cols : cols;
  w.codes.resize(static_cast<size_t>(rows * cols));
  for (uint8_t& c : w.codes) {
    do {
      c = static_cast<uint8_t>(rng.next());
    } while ((c & 0x7F) == 0x7F);
  }
  const int64_t slots = (rows + w.block_rows - 1) / w.block_rows * w.scale_cols();
  w.scales.resize(static_cast<size_t>(slots));
  for (float& s : w.scales) s = rng.uniform(1e-3f, 4e-3f);
  return w;
}

// Any fp32 evaluation of b + Σ_p x_p·e_p·s_p (e_p = e4m3(code_p), exact) with at most k + 2
// roundings on any path — ref: fl(e·s), the product with x, the sum; the streaming kernels: the
// product x·e, the sum, one multiply by s per scale block — is within γ(k+2)·(|b| + Σ|x·e·s|) of
// the exact value (Higham §3.1, u = 2^-24), so kernel and ref are within twice that. `magnitude` is
// computed in fp64 from fl(e·s), which differs from e·s by a factor (1 ± u): the 1.01 covers it.
// A dropped or misplaced term (~Σ|x·w| / k) is far above the 2·γ(k+2) ≈ 1.2e-7·k allowed.
double tolerance(int64_t k, double magnitude) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = (k + 2) * u / (1.0 - (k + 2) * u);
  return 2.0 * gamma * 1.01 * magnitude + 1e-30;
}

// ref's output and the Σ|x·w| + |bias| of every output, computed once per problem.
struct Expected {
  std::vector<float> y;
  std::vector<double> magnitude;
};

Expected expected_of(const Fp8Weights& w, const std::vector<float>& x, int64_t m,
                     const float* bias) {
  const int64_t n = w.rows, k = w.cols;
  Expected e;
  e.y.resize(static_cast<size_t>(m * n));
  e.magnitude.resize(e.y.size());
  ref::matmul_fp8(x.data(), m, w, bias, e.y.data());
  std::vector<double> deq(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      deq[static_cast<size_t>(r * k + c)] =
          std::fabs(fp8_e4m3_to_f32(w.codes[static_cast<size_t>(r * k + c)]) * w.scale(r, c));
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double magnitude = bias ? std::fabs(bias[r]) : 0.0;
      for (int64_t c = 0; c < k; ++c) {
        magnitude +=
            std::fabs(x[static_cast<size_t>(i * k + c)]) * deq[static_cast<size_t>(r * k + c)];
      }
      e.magnitude[static_cast<size_t>(i * n + r)] = magnitude;
    }
  }
  return e;
}

int check(const Variant& v, const Blocks& b, const Fp8Weights& w, const std::vector<float>& x,
          int64_t m, const float* bias, const Expected& e) {
  const int64_t n = w.rows, k = w.cols;
  std::vector<float> y(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
  auto packed = cpu::pack_fp8_with(v.kernel, w);
  cpu::matmul_fp8_with(v.path, x.data(), m, *packed, bias, y.data());
  int bad = 0;
  for (size_t at = 0; at < y.size(); ++at) {
    const double tol = tolerance(k, e.magnitude[at]);
    if (!(std::fabs(static_cast<double>(y[at]) - e.y[at]) <= tol) && ++bad <= 3) {
      ADD_FAILURE() << v.name() << " " << b.name << " m=" << m << " k=" << k << " n=" << n
                    << " bias=" << (bias != nullptr) << " y[" << at / n << "][" << at % n
                    << "] = " << y[at] << ", ref " << e.y[at] << ", tolerance " << tol;
    }
  }
  return bad;
}

TEST(Fp8Test, EveryKernelMatchesReferenceOnAwkwardShapes) {
  Rng rng(77);
  int case_index = 0;
  for (const Blocks& b : kBlocks) {
    for (int64_t m : {1, 2, 3, 7, 16, 33, 128}) {
      // Odd n, k not a multiple of 16 or of the group, and 128x128 blocks with partial edges.
      for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 7}, {17, 200}, {33, 1000}, {200, 300}}) {
        if (m * n * k > 3'000'000) continue;
        Fp8Weights w = make_weights(b, n, k, rng);
        std::vector<float> x(static_cast<size_t>(m * k)), bias(static_cast<size_t>(n));
        for (float& v : x) v = rng.uniform(-2.0f, 2.0f);
        for (float& v : bias) v = rng.uniform(-1.0f, 1.0f);
        const float* b_ptr = case_index % 2 ? bias.data() : nullptr;
        const Expected e = expected_of(w, x, m, b_ptr);
        for (const Variant& v : variants()) EXPECT_EQ(check(v, b, w, x, m, b_ptr, e), 0);
        ++case_index;
      }
    }
  }
}

// Every finite code of every kernel decodes to exactly e4m3(code) · scale: with x one-hot the
// output is that single product (the other terms are exact zeros; scaling after the sum gives the
// same single rounding of e4m3 · scale).
TEST(Fp8Test, DecodeOfEveryCodeIsExact) {
  const int64_t n = 20, k = 256;
  Fp8Weights w;
  w.rows = n;
  w.cols = k;
  w.block_rows = 1;
  w.block_cols = k;
  w.codes.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      uint8_t code = static_cast<uint8_t>(c + r);
      if ((code & 0x7F) == 0x7F) code = static_cast<uint8_t>(code ^ 1);  // NaNs: next test
      w.codes[static_cast<size_t>(r * k + c)] = code;
    }
  }
  // Scales from subnormal-producing to large, and a negative one.
  w.scales = {1.0f,   0.5f,   3.0f, 1e-3f, 1e-30f, -2.5f, 100.0f, 7.0f, 1.0f, 0.1f,
              1e-38f, 448.0f, 1.0f, 0.01f, 1.0f,   1.0f,  2.0f,   1.0f, 1.0f, 1.5f};
  std::vector<float> x(static_cast<size_t>(k * k), 0.0f);
  for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(i * k + i)] = 1.0f;
  for (const Variant& v : variants()) {
    auto packed = cpu::pack_fp8_with(v.kernel, w);
    std::vector<float> y(static_cast<size_t>(k * n));
    cpu::matmul_fp8_with(v.path, x.data(), k, *packed, nullptr, y.data());
    int bad = 0;
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t r = 0; r < n; ++r) {
        const float expected = fp8_e4m3_to_f32(w.codes[static_cast<size_t>(r * k + i)]) *
                               w.scales[static_cast<size_t>(r)];
        const float got = y[static_cast<size_t>(i * n + r)];
        // == is bit equality for these finite values, except that the sum 0 + (-0) is +0.
        if (!(got == expected) && ++bad <= 3) {
          ADD_FAILURE() << v.name() << " code " << int{w.codes[static_cast<size_t>(r * k + i)]}
                        << " scale " << w.scales[static_cast<size_t>(r)] << ": " << got
                        << " != " << expected;
        }
      }
    }
    EXPECT_EQ(bad, 0) << v.name();
  }
}

// A NaN code (0x7F or 0xFF) makes its whole output row NaN, as in ref; other rows are unaffected.
TEST(Fp8Test, NanCodesGiveNanRows) {
  Rng rng(4);
  Fp8Weights w = make_weights(kBlocks[1], 40, 64, rng);
  w.codes[5 * 64 + 10] = 0x7F;
  w.codes[33 * 64 + 63] = 0xFF;
  std::vector<float> x(3 * 64);
  for (float& v : x) v = rng.uniform(-1.0f, 1.0f);
  std::vector<float> y_ref(3 * 40);
  ref::matmul_fp8(x.data(), 3, w, nullptr, y_ref.data());
  for (const Variant& v : variants()) {
    auto packed = cpu::pack_fp8_with(v.kernel, w);
    std::vector<float> y(3 * 40);
    cpu::matmul_fp8_with(v.path, x.data(), 3, *packed, nullptr, y.data());
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t r = 0; r < 40; ++r) {
        const size_t at = static_cast<size_t>(i * 40 + r);
        EXPECT_EQ(std::isnan(y[at]), r == 5 || r == 33) << v.name() << " row " << r;
        EXPECT_EQ(std::isnan(y_ref[at]), r == 5 || r == 33);
      }
    }
  }
}

TEST(Fp8Test, ThreadCountsGiveIdenticalResults) {
  Rng rng(9);
  Fp8Weights w = make_weights(kBlocks[4], 300, 384, rng);
  std::vector<float> x(40 * 384);
  for (float& v : x) v = rng.uniform(-1.0f, 1.0f);
  const int saved = omp_get_max_threads();
  for (const Variant& v : variants()) {
    auto packed = cpu::pack_fp8_with(v.kernel, w);
    std::vector<float> y1(40 * 300), y3(40 * 300);
    omp_set_num_threads(1);
    cpu::matmul_fp8_with(v.path, x.data(), 40, *packed, nullptr, y1.data());
    omp_set_num_threads(3);
    cpu::matmul_fp8_with(v.path, x.data(), 40, *packed, nullptr, y3.data());
    EXPECT_EQ(y1, y3) << v.name();
  }
  omp_set_num_threads(saved);
}

TEST(Fp8Test, RejectsInconsistentWeights) {
  Rng rng(2);
  Fp8Weights good = make_weights(kBlocks[4], 130, 260, rng);
  EXPECT_EQ(good.scales.size(), 2u * 3u);  // partial edge blocks count
  Fp8Weights w = good;
  w.scales.pop_back();
  EXPECT_THROW(pack_fp8(w), InvalidArgument);
  w = good;
  w.codes.pop_back();
  EXPECT_THROW(pack_fp8(w), InvalidArgument);
  w = good;
  w.block_cols = 0;
  EXPECT_THROW(pack_fp8(w), InvalidArgument);
  w = good;
  w.scales[0] = 0x1p121f;  // scale · 256 would overflow in the tiled kernels: scalar takes it
  EXPECT_STREQ(pack_fp8(w)->kernel_name(), "fp8_scalar");
}

}  // namespace
}  // namespace lowbit::kernels
