// Every W8A8 / W4A8 CPU kernel this machine can run against ref::matmul_w8a8 and
// ref::quantize_activations: activation codes and scales bit for bit, outputs within the fp32
// rounding of the final scaling, over awkward shapes, group sizes, zero points and activation
// modes.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/w8a8_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels {
namespace {

using cpu::W8a8Kernel;

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

struct Scheme {
  const char* name;
  int bits;
  int64_t group_size;  // 0: per channel (= cols)
  bool zeros;
  bool per_tensor = false;  // one scale for the whole matrix
};

IntWeights make_weights(const Scheme& s, int64_t rows, int64_t cols, Rng& rng) {
  IntWeights w;
  w.bits = s.bits;
  w.rows = rows;
  w.cols = cols;
  w.group_size = s.group_size > 0 ? s.group_size : cols;
  const int64_t slots = rows * w.groups();
  w.codes.resize(static_cast<size_t>(rows * cols));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(rng.next() % (1u << s.bits));
  w.scales.resize(static_cast<size_t>(slots));
  const float tensor_scale = rng.uniform(1e-3f, 1e-2f);
  for (float& v : w.scales) v = s.per_tensor ? tensor_scale : rng.uniform(1e-3f, 2e-2f);
  if (s.zeros) {
    w.zeros.resize(static_cast<size_t>(slots));
    for (uint8_t& z : w.zeros) z = static_cast<uint8_t>(rng.next() % (1u << s.bits));
  }
  return w;
}

// Random activations with the rows tests care about: row 1 all zero, row 2 with one huge value
// (the rest quantize to ~0), values that saturate a static scale, and exact ties x / scale = j +
// 0.5.
std::vector<float> make_x(int64_t m, int64_t k, float static_scale, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = rng.uniform(-2.0f, 2.0f);
  if (m > 1) std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);
  if (m > 2) x[static_cast<size_t>(2 * k + k / 2)] = 1e6f;
  for (int64_t i = 3; i < m; ++i) {
    x[static_cast<size_t>(i * k)] = 500.0f * static_scale;  // saturates
    if (k > 1)
      x[static_cast<size_t>(i * k + 1)] = (static_cast<float>(i % 7) - 3.5f) * static_scale;  // tie
  }
  return x;
}

std::string kernel_name(W8a8Kernel k) { return cpu::w8a8_kernel_name(k); }

// |kernel - ref| bound for one output. The kernels compute the exact integer group sums
// I_g = Σ q·(code - zero) and then, in fp32, at most two roundings per group (the product with
// s_g and its accumulation), one for E = Σ s·D and two for -zx·E, one each for ·sx and +bias; ref
// rounds its fp64 result once. Every intermediate is bounded by M = |sx|·Σ_g |s_g|·(|I_g| +
// |zx|·|D_g|) + |bias|, so |Δ| ≤ (2G + 6)·u·M (u = 2^-24; the 1.01 covers the fp64 evaluation of
// M). One wrong code changes I_g by ≥ 1, i.e. y by |sx·s_g| ≥ ~1/(k·64)·M here, far above this.
struct Bound {
  std::vector<double> magnitude;  // M per output
};

Bound bound_of(const float* x, int64_t m, const IntWeights& w, const Int8Activations& act,
               const float* bias) {
  const int64_t k = w.cols, n = w.rows, groups = w.groups();
  std::vector<int8_t> q(static_cast<size_t>(m * k));
  std::vector<float> sx(static_cast<size_t>(m));
  ref::quantize_activations(x, m, k, act, q.data(), sx.data());
  const int64_t zx = act.dynamic ? 0 : act.static_zero;
  Bound b;
  b.magnitude.resize(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double total = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t sum = 0, d = 0;
        const auto zero = static_cast<int64_t>(w.zero(r, g));
        for (int64_t c = g * w.group_size; c < std::min(k, (g + 1) * w.group_size); ++c) {
          const int64_t code = w.codes[static_cast<size_t>(r * k + c)] - zero;
          sum += q[static_cast<size_t>(i * k + c)] * code;
          d += code;
        }
        total += std::fabs(w.scales[static_cast<size_t>(r * groups + g)]) *
                 (std::fabs(static_cast<double>(sum)) + std::fabs(static_cast<double>(zx * d)));
      }
      b.magnitude[static_cast<size_t>(i * n + r)] =
          std::fabs(sx[static_cast<size_t>(i)]) * total + (bias ? std::fabs(bias[r]) : 0.0);
    }
  }
  return b;
}

// Runs the kernel and ref; returns the number of outputs out of bounds (reporting a few).
int check(W8a8Kernel kernel, const Scheme& s, const IntWeights& w, const std::vector<float>& x,
          int64_t m, const Int8Activations& act, const float* bias) {
  const int64_t n = w.rows;
  std::vector<float> y(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> y_ref(y.size());
  auto packed = cpu::pack_w8a8_with(kernel, w);
  matmul_w8a8(x.data(), m, *packed, act, bias, y.data());
  ref::matmul_w8a8(x.data(), m, w, act, bias, y_ref.data());
  const Bound b = bound_of(x.data(), m, w, act, bias);
  const double u = std::ldexp(1.0, -24);
  int bad = 0;
  for (size_t at = 0; at < y.size(); ++at) {
    const double tol = (2.0 * w.groups() + 6.0) * u * 1.01 * b.magnitude[at] + 1e-30;
    if (!(std::fabs(static_cast<double>(y[at]) - y_ref[at]) <= tol) && ++bad <= 3) {
      ADD_FAILURE() << kernel_name(kernel) << " " << s.name << " m=" << m << " k=" << w.cols
                    << " n=" << n << (act.dynamic ? " dynamic" : " static")
                    << " zx=" << act.static_zero << " bias=" << (bias != nullptr) << " y[" << at / n
                    << "][" << at % n << "] = " << y[at] << ", ref " << y_ref[at] << ", tolerance "
                    << tol;
    }
  }
  return bad;
}

const Scheme kSchemes[] = {
    {"w8a8-channel", 8, 0, false},      {"w8a8-channel-zp", 8, 0, true},
    {"w8a8-tensor", 8, 0, false, true}, {"w4a8-g32", 4, 32, false},
    {"w4a8-g128", 4, 128, false},       {"w4a8-g128-zp", 4, 128, true},
    {"w4a8-channel", 4, 0, false},      {"w4a8-g32-zp", 4, 32, true},
};

std::vector<Int8Activations> activation_modes() {
  Int8Activations dynamic;
  Int8Activations static_sym;
  static_sym.dynamic = false;
  static_sym.static_scale = 0.0125f;
  Int8Activations static_zp = static_sym;
  static_zp.static_zero = -7;
  return {dynamic, static_sym, static_zp};
}

TEST(W8a8Test, ActivationCodesAndScalesMatchReferenceBitForBit) {
  Rng rng(11);
  for (W8a8Kernel kernel : cpu::w8a8_supported_kernels()) {
    for (const Int8Activations& act : activation_modes()) {
      for (int64_t m : {1, 3, 7, 33}) {
        for (int64_t k : {1, 5, 16, 33, 100, 1000}) {
          std::vector<float> x = make_x(m, k, act.static_scale, rng);
          if (m > 3) x[static_cast<size_t>(3 * k + k - 1)] = -0.0f;
          std::vector<int8_t> codes(x.size()), codes_ref(x.size());
          std::vector<float> scales(static_cast<size_t>(m)), scales_ref(scales.size());
          cpu::quantize_activations_with(kernel, x.data(), m, k, act, codes.data(), scales.data());
          ref::quantize_activations(x.data(), m, k, act, codes_ref.data(), scales_ref.data());
          EXPECT_EQ(codes, codes_ref)
              << kernel_name(kernel) << " m=" << m << " k=" << k << " dynamic=" << act.dynamic;
          EXPECT_EQ(0, std::memcmp(scales.data(), scales_ref.data(), scales.size() * sizeof(float)))
              << kernel_name(kernel) << " m=" << m << " k=" << k;
        }
      }
    }
  }
}

// One F32 tensor of a safetensors file (enough of the format for a golden-data test).
std::vector<float> read_f32_tensor(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), sizeof header_size);
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  const nlohmann::json entry = nlohmann::json::parse(header).at(name);
  EXPECT_EQ(entry.at("dtype"), "F32");
  const auto begin = entry.at("data_offsets")[0].get<uint64_t>(),
             end = entry.at("data_offsets")[1].get<uint64_t>();
  std::vector<float> out((end - begin) / sizeof(float));
  in.seekg(static_cast<std::streamoff>(8 + header_size + begin));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(end - begin));
  EXPECT_TRUE(in.good()) << path << ": " << name;
  return out;
}

// compressed-tensors 0.19.0 itself (scripts/reference/make_ct_vectors.py, case act_int8_token:
// compute_dynamic_scales_and_zp + fake_quantize of a 4 x 256 fp32 input with an outlier): every
// kernel's codes times its scales reproduce CT's fake-quantized values bit for bit.
TEST(W8a8Test, DynamicActivationsMatchCompressedTensorsGolden) {
  const std::string file =
      std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/quant/data/ct_vectors.safetensors";
  const std::vector<float> x = read_f32_tensor(file, "act_int8_token.input");
  const std::vector<float> want = read_f32_tensor(file, "act_int8_token.output");
  ASSERT_EQ(x.size(), 4u * 256u);
  ASSERT_EQ(want.size(), x.size());
  for (W8a8Kernel kernel : cpu::w8a8_supported_kernels()) {
    std::vector<int8_t> q(x.size());
    float scales[4];
    cpu::quantize_activations_with(kernel, x.data(), 4, 256, Int8Activations{}, q.data(), scales);
    int bad = 0;
    for (size_t at = 0; at < x.size(); ++at) {
      const float got = static_cast<float>(q[at]) * scales[at / 256];
      if (std::memcmp(&got, &want[at], sizeof got) != 0 && !(got == 0.0f && want[at] == 0.0f))
        ++bad;
    }
    EXPECT_EQ(bad, 0) << kernel_name(kernel);
  }
}

// The reference itself, on hand-worked values: dynamic scale absmax / 127.5, ties to even after
// adding the zero point, clamping, the all-zero row's FLT_EPSILON scale, NaN rows.
TEST(W8a8Test, ReferenceQuantizationFollowsCompressedTensors) {
  const float x[] = {2.55f, -2.55f, 1.0f, 0.0f};
  int8_t q[4];
  float s[1];
  ref::quantize_activations(x, 1, 4, Int8Activations{}, q, s);
  EXPECT_EQ(s[0], 2.55f / 127.5f);
  EXPECT_EQ(q[0], 127);   // 127.5 clamps to 127
  EXPECT_EQ(q[1], -128);  // -127.5 rounds half to even: -128
  EXPECT_EQ(q[2], static_cast<int8_t>(std::nearbyint(1.0f / s[0])));
  EXPECT_EQ(q[3], 0);

  const float zeros[] = {0.0f, -0.0f};
  ref::quantize_activations(zeros, 1, 2, Int8Activations{}, q, s);
  EXPECT_EQ(s[0], FLT_EPSILON);

  Int8Activations st;
  st.dynamic = false;
  st.static_scale = 0.5f;
  st.static_zero = 1;
  const float ties[] = {1.25f, 1.75f, 100.0f, -100.0f};  // x / s = 2.5, 3.5, 200, -200
  ref::quantize_activations(ties, 1, 4, st, q, s);
  EXPECT_EQ(q[0], 4);  // round(2.5 + 1) = round(3.5) = 4, not round(2.5) + 1 = 3
  EXPECT_EQ(q[1], 4);  // round(4.5) = 4
  EXPECT_EQ(q[2], 127);
  EXPECT_EQ(q[3], -128);

  const float with_nan[] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  ref::quantize_activations(with_nan, 1, 2, Int8Activations{}, q, s);
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_EQ(q[0], 0);
}

TEST(W8a8Test, EveryKernelMatchesReferenceOnAwkwardShapes) {
  Rng rng(2024);
  const std::vector<Int8Activations> acts = activation_modes();
  int case_index = 0;
  for (const Scheme& s : kSchemes) {
    for (W8a8Kernel kernel : cpu::w8a8_supported_kernels()) {
      for (int64_t m : {1, 2, 3, 7, 16, 33, 128}) {
        for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 32}, {17, 200}, {33, 1000}, {71, 264}}) {
          if (m * n * k > 3'000'000) continue;
          IntWeights w = make_weights(s, n, k, rng);
          const Int8Activations& act = acts[static_cast<size_t>(case_index % 3)];
          std::vector<float> x = make_x(m, k, act.static_scale, rng);
          std::vector<float> bias(static_cast<size_t>(n));
          for (float& b : bias) b = rng.uniform(-1.0f, 1.0f);
          EXPECT_EQ(check(kernel, s, w, x, m, act, case_index % 2 ? bias.data() : nullptr), 0);
          ++case_index;
        }
      }
    }
  }
}

// Columns that are not whole blocks or groups: k = 203 (per channel: a ragged last block of 4 and
// of 8 columns; groups of 32: a last group of 11 columns).
TEST(W8a8Test, RaggedColumnsAndAllActivationModes) {
  Rng rng(5);
  for (const Scheme& s : kSchemes) {
    IntWeights w = make_weights(s, 50, 203, rng);
    for (W8a8Kernel kernel : cpu::w8a8_supported_kernels()) {
      for (const Int8Activations& act : activation_modes()) {
        for (int64_t m : {1, 5, 9}) {
          std::vector<float> x = make_x(m, 203, act.static_scale, rng);
          std::vector<float> bias(50, 0.25f);
          EXPECT_EQ(check(kernel, s, w, x, m, act, bias.data()), 0);
        }
      }
    }
  }
}

// An all-zero row of x gives exactly the bias (every code 0, every group sum 0).
TEST(W8a8Test, ZeroRowGivesExactlyTheBias) {
  Rng rng(8);
  for (const Scheme& s : kSchemes) {
    IntWeights w = make_weights(s, 40, 256, rng);
    std::vector<float> x(2 * 256, 0.0f), bias(40), y(80);
    for (float& b : bias) b = rng.uniform(-1.0f, 1.0f);
    for (W8a8Kernel kernel : cpu::w8a8_supported_kernels()) {
      auto packed = cpu::pack_w8a8_with(kernel, w);
      matmul_w8a8(x.data(), 2, *packed, Int8Activations{}, bias.data(), y.data());
      for (int64_t j = 0; j < 80; ++j)
        EXPECT_EQ(y[static_cast<size_t>(j)], bias[static_cast<size_t>(j % 40)]);
    }
  }
}

// The int32 limit: 65536 columns of q = -128 against codes 255 - zero 0 (and 0 - zero 255) give
// group sums of ∓128 · 255 · 65536 = ∓2139095040, just within int32; exact in every kernel.
TEST(W8a8Test, ExtremeSumsAtTheColumnLimitStayExact) {
  const int64_t k = 65536, n = 16;
  IntWeights w;
  w.bits = 8;
  w.rows = n;
  w.cols = k;
  w.group_size = k;
  w.codes.assign(static_cast<size_t>(n * k), 255);
  std::fill(w.codes.begin() + 8 * k, w.codes.end(), 0);  // rows 8..15: code 0 with zero 255
  w.scales.assign(static_cast<size_t>(n), 1.0f);
  w.zeros.assign(static_cast<size_t>(n), 0);
  std::fill(w.zeros.begin() + 8, w.zeros.end(), 255);
  Int8Activations act;  // static scale 1: x = -128 is code -128 exactly
  act.dynamic = false;
  act.static_scale = 1.0f;
  std::vector<float> x(static_cast<size_t>(k), -128.0f), y(n), y_ref(n);
  ref::matmul_w8a8(x.data(), 1, w, act, nullptr, y_ref.data());
  EXPECT_EQ(y_ref[0], -2139095040.0f);  // -128 · 255 · 65536, exact in fp32 too
  EXPECT_EQ(y_ref[8], 2139095040.0f);
  for (W8a8Kernel kernel : cpu::w8a8_supported_kernels()) {
    auto packed = cpu::pack_w8a8_with(kernel, w);
    matmul_w8a8(x.data(), 1, *packed, act, nullptr, y.data());
    EXPECT_EQ(y, y_ref) << kernel_name(kernel);
  }
  w.cols = k + 1;
  w.group_size = k + 1;
  w.codes.resize(static_cast<size_t>(n * (k + 1)));
  EXPECT_THROW(pack_w8a8(w), Unsupported);
}

TEST(W8a8Test, ThreadCountsGiveIdenticalResults) {
  Rng rng(3);
  const int saved = omp_get_max_threads();
  for (const Scheme& s : {kSchemes[0], kSchemes[5]}) {
    IntWeights w = make_weights(s, 333, 512, rng);
    std::vector<float> x = make_x(20, 512, 0.0125f, rng);
    for (W8a8Kernel kernel : cpu::w8a8_supported_kernels()) {
      auto packed = cpu::pack_w8a8_with(kernel, w);
      std::vector<float> y1(20 * 333), y3(20 * 333);
      omp_set_num_threads(1);
      matmul_w8a8(x.data(), 20, *packed, Int8Activations{}, nullptr, y1.data());
      omp_set_num_threads(3);
      matmul_w8a8(x.data(), 20, *packed, Int8Activations{}, nullptr, y3.data());
      EXPECT_EQ(y1, y3) << kernel_name(kernel);
    }
  }
  omp_set_num_threads(saved);
}

TEST(W8a8Test, RejectsBadWeightsAndActivations) {
  Rng rng(1);
  IntWeights good = make_weights(kSchemes[3], 16, 64, rng);
  IntWeights w = good;
  w.codes[5] = 16;  // 4-bit code out of range
  EXPECT_THROW(pack_w8a8(w), InvalidArgument);
  w = good;
  w.scales.pop_back();
  EXPECT_THROW(pack_w8a8(w), InvalidArgument);
  w = good;
  w.g_idx.resize(64);
  for (int c = 0; c < 64; ++c) w.g_idx[static_cast<size_t>(c)] = c / 32;
  EXPECT_NO_THROW(pack_w8a8(w));  // a g_idx in natural order is no activation order
  std::swap(w.g_idx[0], w.g_idx[40]);
  EXPECT_THROW(pack_w8a8(w), Unsupported);
  w = good;
  w.group_size = 12;  // not whole blocks of 8: only the scalar kernel runs it
  w.scales.resize(static_cast<size_t>(16 * w.groups()), 0.01f);
  EXPECT_STREQ(pack_w8a8(w)->kernel_name(), "w8a8_scalar");
  if (cpu::w8a8_kernel_supported(W8a8Kernel::AVX2)) {
    EXPECT_THROW(cpu::pack_w8a8_with(W8a8Kernel::AVX2, w), Unsupported);
  }
  auto packed = pack_w8a8(good);
  std::vector<float> x(64, 1.0f), y(16);
  Int8Activations bad;
  bad.dynamic = false;
  bad.static_scale = 0.0f;
  EXPECT_THROW(matmul_w8a8(x.data(), 1, *packed, bad, nullptr, y.data()), InvalidArgument);
  bad.static_scale = 1.0f;
  bad.static_zero = 200;
  EXPECT_THROW(matmul_w8a8(x.data(), 1, *packed, bad, nullptr, y.data()), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::kernels
