// Every weight-only integer matmul kernel this CPU can run (each kernel, each path) against the
// naive ref::matmul_wna16 over awkward shapes, 2..8 bits, group sizes 32/64/128 and per-channel,
// symmetric and with zero points, with and without g_idx (GPTQ desc_act) and bias.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/wna16_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels {
namespace {

using cpu::MatmulPath;
using cpu::Wna16Kernel;

struct Rng {  // splitmix64
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  float signed_value() {  // magnitude in [0.1, 1), random sign
    float v = 0.1f + 0.9f * uniform();
    return (next() & 1) ? -v : v;
  }
};

struct Shape {
  int bits;
  int64_t rows, cols, group_size;  // group_size 0: per channel
  bool zeros, g_idx;
};

std::string describe(const Shape& s, int64_t m) {
  return "bits=" + std::to_string(s.bits) + " n=" + std::to_string(s.rows) + " k=" +
         std::to_string(s.cols) + " group=" + (s.group_size ? std::to_string(s.group_size) : "channel") +
         (s.zeros ? " zeros" : " symmetric") + (s.g_idx ? " g_idx" : "") + " m=" + std::to_string(m);
}

IntWeights random_weights(const Shape& s, Rng& rng) {
  IntWeights w;
  w.bits = s.bits;
  w.rows = s.rows;
  w.cols = s.cols;
  w.group_size = s.group_size ? s.group_size : s.cols;
  const int levels = 1 << s.bits;
  w.codes.resize(static_cast<size_t>(s.rows * s.cols));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(rng.next() % levels);
  const int64_t groups = w.groups();
  w.scales.resize(static_cast<size_t>(s.rows * groups));
  // Scales spread over 2^-12 .. 2^0, as real ones vary between rows and groups.
  for (float& v : w.scales) v = std::ldexp(0.5f + 0.5f * rng.uniform(), -static_cast<int>(rng.next() % 13));
  if (s.zeros) {
    w.zeros.resize(w.scales.size());
    for (uint8_t& z : w.zeros) z = static_cast<uint8_t>(rng.next() % levels);
  }
  if (s.g_idx) {
    // GPTQ with desc_act: columns are quantized in a permuted order (by Hessian diagonal) and the
    // i-th quantized column belongs to group i / group_size.
    std::vector<int32_t> order(static_cast<size_t>(s.cols));
    for (size_t c = 0; c < order.size(); ++c) order[c] = static_cast<int32_t>(c);
    for (size_t c = order.size(); c > 1; --c) std::swap(order[c - 1], order[rng.next() % c]);
    w.g_idx.resize(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      w.g_idx[static_cast<size_t>(order[i])] = static_cast<int32_t>(static_cast<int64_t>(i) / w.group_size);
    }
  }
  return w;
}

// Tolerances. Any fp32 evaluation of a sum of n terms (any order, with or without FMA) is within
// γ(n)·Σ|terms| of the exact value, γ(n) = n·u / (1 - n·u), u = 2^-24 (Higham, "Accuracy and
// Stability", §3.1).
//  - Exact kernels decode every weight to the same fp32 value as ref, (q - z)·s with the same two
//    operations, so kernel and ref differ by summation order only: |Δ| ≤ 2·γ(k'+1)·(Σ|w·x| + |b|),
//    k' = padded k (padding adds exact zeros; counted anyway).
//  - bf16dot kernels compute Σ_g s·(Σ (q - z0)·bf16(x) - (z - z0)·Σ bf16(x)) (z0 = 2^(bits-1)):
//    products exact, then group sums, one scale product per group, the zero-point fold and the
//    final sums, at most k' + 2·groups + 8 roundings deep on terms bounded by
//    M_fold = Σ s·(|q - z0| + |z - z0|)·|x|. Compared with ref run on bf16(x) (the same exact
//    value): |Δ| ≤ 2·γ(k' + 2·groups + 9)·(M_fold + Σ|w·x| + |b|). Against ref on x itself,
//    rounding x adds |bf16(x) - x| ≤ 2^-9·|x| per term, i.e. 2^-9·Σ|w·x| more.
//  - the i16dot kernel (decode) computes Σ_seg s·sx·(Σ q·xq - z·Σ xq) with exact integer sums,
//    xq = round(x / sx), sx = max|x| / 32767 over a run of at most 128 columns: the exact value
//    for x' = sx·xq, |x' - x| <= 0.51·sx <= 0.51·max_row|x| / 32767 (0.5 for the rounding, and
//    ~2^-24·32767 for x / sx's own), so against ref on x: |Δ| <= 0.51·max_row|x|/32767·Σ|w| plus
//    fp32 roundings on terms bounded by M_u = Σ s·(q + z)·|x'| (unsigned codes, the zero folded
//    per run; at most ~2k' deep) and ref's own 2·γ(k'+1)·(Σ|w·x| + |b|).
// A kernel that drops, repeats or misplaces one term of a k ≈ 300 sum is off by ~Σ|w·x|/300, far
// above the ~4e-5·Σ|w·x| the exact bounds allow here.
double gamma(double n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1.0 - n * u);
}

struct Problem {
  Shape shape;
  int64_t m = 0;
  IntWeights w;
  std::vector<float> x, x_bf16, bias;
  std::vector<float> y_ref, y_ref_bf16;  // ref on x, ref on bf16(x)
  std::vector<double> magnitude, magnitude_fold;
  // i16dot: Σ s·(q + z)·|x| per output, Σ|(q - z)·s| per weight row, max|x| per row of x.
  std::vector<double> magnitude_unsigned, weight_abs_sum, x_amax;
  // Σ bf16(w)·bf16(x) + b in double, w = ref's fp32 (q - z)·s, and Σ|bf16(w)·bf16(x)| + |b|: the
  // bf16-dot kernel's blocked path (both operands rounded to bf16, exact products, fp32 sums).
  std::vector<double> y_bf16wx, magnitude_bf16wx;
};

// How the scales of a problem are made: random fp32 numbers; rounded to fp16 numbers (which the
// packing then stores as fp16); or as GGUF's Q6_K gives them (groups of 16): per row and 16 groups,
// an fp16 d times int8 sub-scales, one of them -128 as llama.cpp's quantizer makes it (the
// group-16 layout's compact form).
enum class ScaleForm { FP32, FP16, Q6K };

void make_q6k_scales(IntWeights& w, Rng& rng) {
  const int64_t groups = w.groups();
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t g0 = 0; g0 < groups; g0 += 16) {
      const float d = f16_to_f32(f32_to_f16(
          std::ldexp(0.5f + 0.5f * rng.uniform(), -7 - static_cast<int>(rng.next() % 13))));
      const int64_t count = std::min<int64_t>(16, groups - g0);
      const int64_t extreme = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(count));
      for (int64_t g = 0; g < count; ++g) {
        const int sc = g == extreme ? -128 : static_cast<int>(rng.next() % 256) - 128;
        w.scales[static_cast<size_t>(r * groups + g0 + g)] = d * static_cast<float>(sc);
      }
    }
  }
}

Problem make_problem(const Shape& shape, int64_t m, bool with_bias, Rng& rng,
                     ScaleForm scale_form = ScaleForm::FP32) {
  Problem p;
  p.shape = shape;
  p.m = m;
  p.w = random_weights(shape, rng);
  if (scale_form == ScaleForm::FP16) {
    for (float& v : p.w.scales) v = f16_to_f32(f32_to_f16(v));
  } else if (scale_form == ScaleForm::Q6K) {
    make_q6k_scales(p.w, rng);
  }
  p.x.resize(static_cast<size_t>(m * shape.cols));
  for (float& v : p.x) v = rng.signed_value();
  p.x_bf16 = p.x;
  for (float& v : p.x_bf16) v = bf16_to_f32(f32_to_bf16(v));
  if (with_bias) {
    p.bias.resize(static_cast<size_t>(shape.rows));
    for (float& v : p.bias) v = rng.signed_value();
  }
  const float* bias = with_bias ? p.bias.data() : nullptr;
  p.y_ref.resize(static_cast<size_t>(m * shape.rows));
  p.y_ref_bf16.resize(p.y_ref.size());
  ref::matmul_wna16(p.x.data(), m, p.w, bias, p.y_ref.data());
  ref::matmul_wna16(p.x_bf16.data(), m, p.w, bias, p.y_ref_bf16.data());
  // Σ|w·x| and M_fold in double (exact enough to bound with).
  const int64_t groups = p.w.groups();
  const double z0 = static_cast<double>(1 << (shape.bits - 1));
  p.magnitude.assign(p.y_ref.size(), 0.0);
  p.magnitude_fold.assign(p.y_ref.size(), 0.0);
  p.magnitude_unsigned.assign(p.y_ref.size(), 0.0);
  p.weight_abs_sum.assign(static_cast<size_t>(shape.rows), 0.0);
  p.x_amax.assign(static_cast<size_t>(m), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < shape.cols; ++c) {
      p.x_amax[static_cast<size_t>(i)] =
          std::max(p.x_amax[static_cast<size_t>(i)], std::fabs(static_cast<double>(p.x[static_cast<size_t>(i * shape.cols + c)])));
    }
  }
  p.y_bf16wx.assign(p.y_ref.size(), 0.0);
  p.magnitude_bf16wx.assign(p.y_ref.size(), 0.0);
  for (int64_t r = 0; r < shape.rows; ++r) {
    for (int64_t c = 0; c < shape.cols; ++c) {
      const int64_t g = p.w.group_of(c);
      const float q = static_cast<float>(p.w.codes[static_cast<size_t>(r * shape.cols + c)]);
      const float s = p.w.scales[static_cast<size_t>(r * groups + g)];
      const float w = (q - p.w.zero(r, g)) * s;  // ref's fp32 operations
      const double weight = std::fabs(w);
      const double w16 = bf16_to_f32(f32_to_bf16(w));
      // |s|: Q6_K's sub-scales may be negative.
      const double fold = std::fabs(s) * (std::fabs(q - z0) + std::fabs(p.w.zero(r, g) - z0));
      const double unsigned_fold = std::fabs(s) * (q + p.w.zero(r, g));
      p.weight_abs_sum[static_cast<size_t>(r)] += weight;
      for (int64_t i = 0; i < m; ++i) {
        const auto o = static_cast<size_t>(i * shape.rows + r);
        const double xv = p.x[static_cast<size_t>(i * shape.cols + c)];
        const double x16 = p.x_bf16[static_cast<size_t>(i * shape.cols + c)];
        p.magnitude[o] += weight * std::fabs(xv);
        p.magnitude_fold[o] += fold * std::fabs(xv);
        p.magnitude_unsigned[o] += unsigned_fold * std::fabs(xv);
        p.y_bf16wx[o] += w16 * x16;
        p.magnitude_bf16wx[o] += std::fabs(w16 * x16);
      }
    }
  }
  if (with_bias) {
    for (size_t o = 0; o < p.y_bf16wx.size(); ++o) {
      const double b = p.bias[o % static_cast<size_t>(shape.rows)];
      p.y_bf16wx[o] += b;
      p.magnitude_bf16wx[o] += std::fabs(b);
    }
  }
  return p;
}

const char* path_name(MatmulPath path) {
  return path == MatmulPath::AUTO ? "auto" : path == MatmulPath::STREAMING ? "streaming" : "blocked";
}

// Runs every supported kernel × path on `p`; returns the number of outputs out of tolerance.
int check_all_kernels(const Problem& p) {
  const Shape& s = p.shape;
  const int64_t groups = p.w.groups();
  const double padded_k = static_cast<double>(s.cols + 32 * groups);
  const float* bias = p.bias.empty() ? nullptr : p.bias.data();
  int failures = 0;
  for (Wna16Kernel kernel : cpu::wna16_supported_kernels()) {
    auto packed = cpu::pack_wna16_with(kernel, p.w);
    EXPECT_EQ(packed->rows(), s.rows);
    EXPECT_EQ(packed->cols(), s.cols);
    // The bf16-dot kernel rounds x only on its streaming path of 2..4-bit weights, and only for
    // the few rows of x where that path is the faster one (a dispatch detail this test does not
    // pin): its results must meet one of the two bounds, each tight against its own reference.
    // The group-16 layout's kernel (5..6 bits, groups of 16) rounds x on every path.
    const bool g16 = std::string(packed->kernel_name()) == "wna16_g16_avx512_bf16dot";
    const bool bf16_kernel = kernel == Wna16Kernel::AVX512_BF16DOT && (s.bits <= 4 || g16);
    // Its blocked path (the general layout, 2..4 bits: wider codes run the exact AVX-512 kernel)
    // rounds both x and the dequantized weights to bf16.
    const bool bf16_blocked = std::string(packed->kernel_name()) == "wna16_avx512_bf16dot";
    // The i16-dot kernel quantizes x on both paths (same arithmetic, as bounded above); 5..8-bit
    // codes packed for the bf16-dot kernel take its decode at one row of x.
    const bool i16_decode = std::string(packed->kernel_name()) == "wna16_avx512_i16dot";
    const bool i16_kernel = kernel == Wna16Kernel::AVX2_I16DOT || (i16_decode && p.m == 1);
    for (MatmulPath path : {MatmulPath::AUTO, MatmulPath::STREAMING, MatmulPath::BLOCKED}) {
      std::vector<float> y(p.y_ref.size(), std::nanf(""));
      cpu::matmul_wna16_with(path, p.x.data(), p.m, *packed, bias, y.data());
      const bool maybe_bf16 = bf16_kernel && (path != MatmulPath::BLOCKED || g16);
      const bool maybe_bf16wx = bf16_blocked && path != MatmulPath::STREAMING;
      const bool maybe_i16 = i16_kernel && (!i16_decode || path != MatmulPath::BLOCKED);
      for (size_t o = 0; o < y.size(); ++o) {
        const double b = bias ? std::fabs(bias[o % static_cast<size_t>(s.rows)]) : 0.0;
        double tolerance = 2.0 * gamma(padded_k + 1) * (p.magnitude[o] + b);
        double want = p.y_ref[o];
        if (maybe_i16 && !(std::fabs(y[o] - want) <= tolerance)) {
          tolerance += 2.0 * gamma(2.0 * padded_k + 9) * (1.001 * p.magnitude_unsigned[o] + b) +
                       0.51 * p.x_amax[o / static_cast<size_t>(s.rows)] / 32767.0 *
                           p.weight_abs_sum[o % static_cast<size_t>(s.rows)];
        }
        if (maybe_bf16wx && (path == MatmulPath::BLOCKED || !(std::fabs(y[o] - want) <= tolerance))) {
          // Exact products of bf16 operands summed in fp32 (k additions; the driver adds the
          // bias in fp32 once more), and the contract against fp32 operands: each product off by
          // at most 2^-9 + 2^-9 + 2^-18 of |w·x|.
          const double tol16 = 2.0 * gamma(padded_k + 2) * p.magnitude_bf16wx[o];
          const double contract = tol16 + std::ldexp(1.0, -8) * 1.01 * p.magnitude[o] +
                                  2.0 * gamma(padded_k + 1) * (p.magnitude[o] + b);
          if (std::fabs(y[o] - p.y_bf16wx[o]) <= tol16 + 1e-30 &&
              std::fabs(y[o] - p.y_ref[o]) <= contract) {
            continue;
          }
          if (path == MatmulPath::BLOCKED) {
            if (++failures <= 5) {
              ADD_FAILURE() << packed->kernel_name() << "/" << path_name(path) << " "
                            << describe(s, p.m) << (bias ? " bias" : "") << ": y[" << o / s.rows
                            << "][" << o % s.rows << "] = " << y[o] << ", bf16 ref "
                            << p.y_bf16wx[o] << ", ref " << p.y_ref[o] << ", tolerance " << tol16;
            }
            continue;
          }
        }
        if (maybe_bf16 && !(std::fabs(y[o] - want) <= tolerance)) {
          tolerance = 2.0 * gamma(padded_k + 2.0 * groups + 9) * (p.magnitude_fold[o] + p.magnitude[o] + b);
          want = p.y_ref_bf16[o];
          // The documented contract against fp32 x as well.
          const double contract = tolerance + std::ldexp(1.0, -9) * p.magnitude[o];
          if (!(std::fabs(y[o] - p.y_ref[o]) <= contract)) ++failures;
        }
        if (!(std::fabs(y[o] - want) <= tolerance + 1e-30)) {
          if (++failures <= 5) {
            ADD_FAILURE() << packed->kernel_name() << "/" << path_name(path) << " "
                          << describe(s, p.m) << (bias ? " bias" : "") << ": y[" << o / s.rows
                          << "][" << o % s.rows << "] = " << y[o] << ", ref " << want
                          << ", tolerance " << tolerance;
          }
        }
      }
    }
  }
  return failures;
}

TEST(Wna16Test, KernelsMatchReferenceOverAwkwardShapes) {
  Rng rng(20261130);
  // k not a multiple of 16/32 wherever the group size allows it (the last group is partial), odd n,
  // and n below one tile of 8 rows.
  struct Dims {
    int64_t rows, cols, group_size;
  };
  const Dims dims[] = {{37, 296, 32}, {9, 200, 64}, {5, 328, 128}, {13, 100, 0}, {1, 77, 0}};
  const int64_t ms[] = {1, 2, 3, 7, 16, 33, 128};
  int failures = 0, problems = 0;
  for (int bits : {2, 3, 4, 5, 8}) {
    for (const Dims& d : dims) {
      for (bool zeros : {false, true}) {
        for (bool g_idx : {false, true}) {
          if (g_idx && d.group_size == 0) continue;  // one group: g_idx changes nothing
          for (int64_t m : ms) {
            const Shape shape{bits, d.rows, d.cols, d.group_size, zeros, g_idx};
            failures += check_all_kernels(make_problem(shape, m, (problems++ % 2) == 1, rng));
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "over " << problems << " problems";
}

// Shapes that span several threads' shares, several k and n blocks of the blocked path, and row
// tiles cut by the thread split.
TEST(Wna16Test, KernelsMatchReferenceOnLargerShapes) {
  Rng rng(7);
  int failures = 0;
  for (int bits : {4, 8}) {
    for (int64_t m : {1, 4, 33}) {
      failures += check_all_kernels(make_problem({bits, 300, 1100, 128, bits == 8, false}, m, true, rng));
      failures += check_all_kernels(make_problem({bits, 131, 1024, 64, bits == 4, true}, m, false, rng));
    }
  }
  EXPECT_EQ(failures, 0);
}

// 6- and 5-bit symmetric weights in groups of 16 (llama.cpp's Q6_K) take their own layout
// (wna16_g16.h) with the AVX512_BF16DOT, AVX2_I16DOT and AVX2 kernels, which check_all_kernels
// packs on every CPU that runs them (this one's AVX2 kernels included where it has AVX-512): k a
// multiple of 64 or not (the last unit padded; k = 200, 1000: partial groups too), k below one
// unit, k across the i16-dot kernel's runs of 128 columns with a partial last run (336, 200, 1000),
// n below and across the 16-row blocks and the threads' shares, m across the 3- and 4-row passes
// (17: five passes of 3 and one of 2). Tolerances are check_all_kernels': wna16_g16_avx2 is an
// exact kernel (ref up to fp32 summation order); wna16_g16_avx2_i16dot meets the i16-dot bound
// there (x off by <= 0.51 · sx per element, sx = max|x| / 32767 of a run <= the row's max|x| /
// 32767, and fp32 roundings on terms bounded by Σ s·(q + z)·|x'| >= Σ s·|q - z|·|x'|, the terms it
// sums), which a code decoded one step wrong exceeds unless its scale is tiny against the row's
// (random scales spread over 2^-12..1): Group16Avx2KernelsReadEveryCode checks every code alone.
// Both forms of the layout: random fp32 scales take the plain one, Q6_K's (d · int8) the compact
// one (k = 1000, 336, 200: a partial last super-block; k = 80, 16: one super-block).
TEST(Wna16Test, Group16LayoutMatchesReference) {
  Rng rng(20261201);
  struct Dims {
    int64_t rows, cols;
  };
  const Dims dims[] = {{37, 256}, {5, 80}, {1, 16}, {300, 1024}, {17, 336}, {131, 200}, {23, 1000}};
  int failures = 0, problems = 0;
  for (ScaleForm form : {ScaleForm::FP32, ScaleForm::Q6K}) {
    for (int bits : {6, 5}) {
      for (const Dims& d : dims) {
        for (int64_t m : {1, 2, 3, 4, 5, 9, 17, 33}) {
          const Shape shape{bits, d.rows, d.cols, 16, false, false};
          failures += check_all_kernels(make_problem(shape, m, (problems++ % 2) == 1, rng, form));
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "over " << problems << " problems";
  if (cpu::wna16_kernel_supported(Wna16Kernel::AVX512_BF16DOT)) {
    Rng one(1);
    const IntWeights w = random_weights({6, 8, 64, 16, false, false}, one);
    EXPECT_STREQ(pack_wna16(w)->kernel_name(), "wna16_g16_avx512_bf16dot");
    EXPECT_EQ(pack_wna16(w)->bytes(), size_t{8 * 64});  // one byte per weight, scales included
  }
  if (cpu::wna16_kernel_supported(Wna16Kernel::AVX2_I16DOT)) {
    Rng one(1);
    const IntWeights w = random_weights({6, 8, 64, 16, false, false}, one);
    EXPECT_STREQ(cpu::pack_wna16_with(Wna16Kernel::AVX2_I16DOT, w)->kernel_name(),
                 "wna16_g16_avx2_i16dot");
    EXPECT_EQ(cpu::pack_wna16_with(Wna16Kernel::AVX2_I16DOT, w)->bytes(), size_t{8 * 64});
    EXPECT_STREQ(cpu::pack_wna16_with(Wna16Kernel::AVX2, w)->kernel_name(), "wna16_g16_avx2");
    EXPECT_EQ(cpu::pack_wna16_with(Wna16Kernel::AVX2, w)->bytes(), size_t{8 * 64});
  }
}

// Q6_K's scales (fp16 d times int8 sub-scales) take the compact form, 212 bytes per row and 256
// columns (a partial last super-block padded): the packed sizes below. One scale that no d of its
// super-block reproduces exactly sends the whole matrix to the plain form (64 bytes per row and 64
// columns), so the compact form never changes a number. Both forms give the same outputs, bit for
// bit, on every kernel this CPU runs (the scales the compact form's kernels form are the plain
// form's fp32 numbers).
TEST(Wna16Test, Group16CompactFormForQ6kScales) {
  Rng rng(212);
  const Shape shape{6, 21, 600, 16, false, false};  // 3 super-blocks per row, the last partial
  IntWeights w = random_weights(shape, rng);
  make_q6k_scales(w, rng);
  IntWeights plain = w;
  float& one = plain.scales[static_cast<size_t>(5 * plain.groups() + 20)];
  one = std::nextafter(one, 2.0f);
  std::vector<float> x(static_cast<size_t>(3 * shape.cols));
  for (float& v : x) v = rng.signed_value();
  int kernels = 0;
  for (Wna16Kernel kernel :
       {Wna16Kernel::AVX512_BF16DOT, Wna16Kernel::AVX2_I16DOT, Wna16Kernel::AVX2}) {
    if (!cpu::wna16_kernel_supported(kernel)) continue;
    ++kernels;
    const auto compact = cpu::pack_wna16_with(kernel, w);
    EXPECT_EQ(compact->bytes(), size_t{21 * 3 * 212}) << compact->kernel_name();
    EXPECT_EQ(cpu::pack_wna16_with(kernel, plain)->bytes(), size_t{21 * 10 * 64})
        << compact->kernel_name();
    // w itself in the plain form: one more row, whose two scales no d reproduces, sends the
    // packing of `widened` there; the rows they share must give the same outputs.
    IntWeights widened = w;
    widened.rows += 1;
    widened.codes.resize(static_cast<size_t>(widened.rows * widened.cols), 7);
    widened.scales.resize(static_cast<size_t>(widened.rows * widened.groups()), 0.0f);
    widened.scales[static_cast<size_t>(w.rows * w.groups())] = 0.3f;
    widened.scales[static_cast<size_t>(w.rows * w.groups() + 1)] = 0.3f * 1.0000001f;
    const auto wide = cpu::pack_wna16_with(kernel, widened);
    ASSERT_EQ(wide->bytes(), size_t{22 * 10 * 64}) << compact->kernel_name();
    for (int64_t m : {1, 2, 3}) {
      std::vector<float> y(static_cast<size_t>(m * w.rows)),
          y_wide(static_cast<size_t>(m * widened.rows));
      matmul_wna16(x.data(), m, *compact, nullptr, y.data());
      matmul_wna16(x.data(), m, *wide, nullptr, y_wide.data());
      int64_t differ = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < w.rows; ++r) {
          differ += y[static_cast<size_t>(i * w.rows + r)] !=
                    y_wide[static_cast<size_t>(i * widened.rows + r)];
        }
      }
      EXPECT_EQ(differ, 0) << compact->kernel_name() << " m=" << m;
    }
  }
  if (kernels == 0) GTEST_SKIP() << "no kernel of the group-16 layout on this CPU";
}

// Every code of the group-16 layout read back one by one through the AVX2 kernels, with x the
// identity (m = k rows of x, so also every pass of 1..3 rows of x): any code, scale or x lane
// decoded or placed wrong shows, whatever its scale.
//  - matmul_wna16_exact (fp32 x on both packings: wna16_g16_avx2's arithmetic): one non-zero
//    product 1 · float(q - z0)·s, the value ref forms, plus exact zeros: equal, bit for bit.
//  - the i16-dot path (AUTO): the run holding the 1 has sx = fl(1/32767) and xq = 32767 exactly,
//    the other runs sx = 0 and xq = 0; the int32 sum (q - z0)·2^8·32767 converts exactly (< 2^20
//    times 2^8), then three roundings (· s, · sx, and sx's own) and the exact 2^-8: within
//    4·2^-24·|w|, where a code one step off is off by |s| >= |w| / 32.
// cols not a multiple of 64 (the last unit padded), n not a multiple of the 16-row blocks; both
// forms of the layout (Q6_K's scales: the compact one, whose scales the kernels form).
TEST(Wna16Test, Group16Avx2KernelsReadEveryCode) {
  if (!cpu::wna16_kernel_supported(Wna16Kernel::AVX2_I16DOT)) GTEST_SKIP() << "no AVX2";
  Rng rng(62);
  for (const Shape& shape :
       {Shape{6, 19, 200, 16, false, false}, Shape{5, 21, 80, 16, false, false},
        Shape{6, 3, 336, 16, false, false}}) {
    for (ScaleForm form : {ScaleForm::FP32, ScaleForm::Q6K}) {  // plain and compact forms
      IntWeights w = random_weights(shape, rng);
      if (form == ScaleForm::Q6K) make_q6k_scales(w, rng);
      for (int64_t c = 0; c < 4; ++c) {  // the extreme codes, in row 0
        w.codes[static_cast<size_t>(c)] = static_cast<uint8_t>(c % 2 ? (1 << shape.bits) - 1 : 0);
      }
      std::vector<float> identity(static_cast<size_t>(shape.cols * shape.cols), 0.0f);
      for (int64_t c = 0; c < shape.cols; ++c) {
        identity[static_cast<size_t>(c * shape.cols + c)] = 1.0f;
      }
      for (Wna16Kernel kernel : {Wna16Kernel::AVX2_I16DOT, Wna16Kernel::AVX2}) {
        auto packed = cpu::pack_wna16_with(kernel, w);
        for (bool exact : {true, false}) {
          std::vector<float> y(static_cast<size_t>(shape.cols * shape.rows), std::nanf(""));
          if (exact) {
            cpu::matmul_wna16_exact(identity.data(), shape.cols, *packed, nullptr, y.data());
          } else {
            matmul_wna16(identity.data(), shape.cols, *packed, nullptr, y.data());
          }
          const bool bitwise = exact || kernel == Wna16Kernel::AVX2;
          int64_t differ = 0;
          for (int64_t c = 0; c < shape.cols; ++c) {
            for (int64_t r = 0; r < shape.rows; ++r) {
              const int64_t g = w.group_of(c);
              const float q = static_cast<float>(w.codes[static_cast<size_t>(r * shape.cols + c)]);
              const float want =
                  (q - w.zero(r, g)) * w.scales[static_cast<size_t>(r * w.groups() + g)];
              const float got = y[static_cast<size_t>(c * shape.rows + r)];
              const double tolerance = bitwise ? 0.0 : 4.0 * std::ldexp(std::fabs(want), -24);
              if (!(std::fabs(static_cast<double>(got) - want) <= tolerance)) {
                if (++differ <= 3) {
                  ADD_FAILURE() << packed->kernel_name() << (exact ? " exact" : "") << " "
                                << describe(shape, shape.cols) << ": w[" << r << "][" << c
                                << "] reads " << got << ", want " << want;
                }
              }
            }
          }
          EXPECT_EQ(differ, 0) << packed->kernel_name() << (exact ? " exact" : "")
                               << (form == ScaleForm::Q6K ? " compact" : " plain");
        }
      }
    }
  }
}

// 8-bit codes (GGUF Q8_0, W8A16) packed for the bf16-dot kernel, which has no path for them: the
// exact AVX-512 kernel runs them, except one row of x (decode), which takes the AVX2 i16-dot code.
// Checked by identity of results, bit for bit: at m = 1 with the i16-dot packing's, at m = 2 and
// on the blocked path with the exact AVX-512 packing's (the layouts are the same bytes; a dispatch
// that ran the other kernel would differ in the low bits of most outputs).
TEST(Wna16Test, EightBitCodesDecodeOnTheI16DotKernel) {
  if (!cpu::wna16_kernel_supported(Wna16Kernel::AVX512_BF16DOT)) GTEST_SKIP() << "no AVX512_BF16";
  Rng rng(8);
  for (const Shape& shape :
       {Shape{8, 40, 256, 32, false, false}, Shape{8, 33, 300, 128, true, false}}) {
    const IntWeights w = random_weights(shape, rng);
    const auto hybrid = cpu::pack_wna16_with(Wna16Kernel::AVX512_BF16DOT, w);
    EXPECT_STREQ(hybrid->kernel_name(), "wna16_avx512_i16dot");
    const auto i16 = cpu::pack_wna16_with(Wna16Kernel::AVX2_I16DOT, w);
    const auto exact = cpu::pack_wna16_with(Wna16Kernel::AVX512, w);
    std::vector<float> x(static_cast<size_t>(2 * shape.cols));
    for (float& v : x) v = rng.signed_value();
    for (int64_t m : {1, 2}) {
      for (MatmulPath path : {MatmulPath::AUTO, MatmulPath::BLOCKED}) {
        const size_t n = static_cast<size_t>(m * shape.rows);
        std::vector<float> y(n), want(n), other(n);
        cpu::matmul_wna16_with(path, x.data(), m, *hybrid, nullptr, y.data());
        const bool decode = m == 1 && path == MatmulPath::AUTO;
        cpu::matmul_wna16_with(path, x.data(), m, decode ? *i16 : *exact, nullptr, want.data());
        cpu::matmul_wna16_with(path, x.data(), m, decode ? *exact : *i16, nullptr, other.data());
        int64_t differ = 0, differ_other = 0;
        for (size_t o = 0; o < n; ++o) {
          differ += y[o] != want[o];
          differ_other += y[o] != other[o];
        }
        EXPECT_EQ(differ, 0) << describe(shape, m) << " " << path_name(path);
        EXPECT_GT(differ_other, 0)
            << describe(shape, m) << " " << path_name(path)
            << ": the two kernels gave identical outputs, the check is blind";
      }
    }
  }
}

// Scales that are exact fp16 numbers (GGUF's d, compressed-tensors' bf16 scales) are packed as
// fp16 (wna16_kernels.h): every kernel and path must give the same results as with fp32 scales,
// and the packed form must be smaller.
TEST(Wna16Test, Fp16ScalesMatchReference) {
  Rng rng(16);
  int failures = 0, problems = 0;
  for (int bits : {4, 8, 3}) {
    for (const Shape& shape : {Shape{bits, 37, 296, 32, false, false}, Shape{bits, 13, 256, 128, true, false},
                               Shape{bits, 9, 200, 0, false, false}, Shape{bits, 21, 320, 64, bits == 4, true}}) {
      for (int64_t m : {1, 2, 5, 40}) {
        failures +=
            check_all_kernels(make_problem(shape, m, (problems++ % 2) == 0, rng, ScaleForm::FP16));
      }
    }
  }
  EXPECT_EQ(failures, 0) << "over " << problems << " problems";
  Rng one(2);
  IntWeights w = random_weights({4, 64, 256, 32, false, false}, one);
  for (float& v : w.scales) v = f16_to_f32(f32_to_f16(v));
  const size_t fp16_bytes = pack_wna16(w)->bytes();
  w.scales[0] = std::nextafter(w.scales[0], 1.0f);  // one scale fp16 cannot hold: all stay fp32
  const size_t fp32_bytes = pack_wna16(w)->bytes();
  EXPECT_EQ(fp32_bytes - fp16_bytes, w.scales.size() * 2) << "fp16 scales save 2 bytes each";
}

// matmul_wna16_exact keeps x in fp32 on every kernel: an identity x reads back (q - z) · s exactly
// as ref forms it (a single product per output, then + 0), in every row and column. Small m
// included (the i16-dot and bf16-dot kernels would quantize or round x there on their decode).
TEST(Wna16Test, ExactPathReadsTheWeightsBack) {
  Rng rng(27);
  for (const Shape& shape : {Shape{4, 19, 7, 0, true, false}, Shape{4, 21, 96, 32, false, true},
                             Shape{8, 9, 160, 64, true, false}, Shape{3, 16, 256, 128, false, false}}) {
    const IntWeights w = random_weights(shape, rng);
    std::vector<float> identity(static_cast<size_t>(shape.cols * shape.cols), 0.0f);
    for (int64_t c = 0; c < shape.cols; ++c) identity[static_cast<size_t>(c * shape.cols + c)] = 1.0f;
    for (Wna16Kernel kernel : cpu::wna16_supported_kernels()) {
      auto packed = cpu::pack_wna16_with(kernel, w);
      std::vector<float> y(static_cast<size_t>(shape.cols * shape.rows), std::nanf(""));
      cpu::matmul_wna16_exact(identity.data(), shape.cols, *packed, nullptr, y.data());
      int64_t differ = 0;
      for (int64_t c = 0; c < shape.cols; ++c) {
        for (int64_t r = 0; r < shape.rows; ++r) {
          const int64_t g = w.group_of(c);
          const float q = static_cast<float>(w.codes[static_cast<size_t>(r * shape.cols + c)]);
          const float want = (q - w.zero(r, g)) * w.scales[static_cast<size_t>(r * w.groups() + g)];
          differ += y[static_cast<size_t>(c * shape.rows + r)] != want;
        }
      }
      EXPECT_EQ(differ, 0) << cpu::wna16_kernel_name(kernel) << " " << describe(shape, shape.cols);
    }
  }
}

TEST(Wna16Test, EmptyShapes) {
  IntWeights w;
  w.rows = 3;
  w.cols = 0;
  w.group_size = 128;
  auto packed = pack_wna16(w);
  const float bias[3] = {1.0f, -2.0f, 3.0f};
  std::vector<float> y(6, std::nanf(""));
  matmul_wna16(nullptr, 2, *packed, bias, y.data());
  EXPECT_EQ(y, (std::vector<float>{1, -2, 3, 1, -2, 3}));
  matmul_wna16(nullptr, 0, *packed, bias, nullptr);  // m = 0: nothing to do
}

TEST(Wna16Test, BestKernelIsSupportedAndNamed) {
  auto kernels = cpu::wna16_supported_kernels();
  ASSERT_FALSE(kernels.empty());
  EXPECT_EQ(kernels.front(), Wna16Kernel::SCALAR);
  EXPECT_TRUE(cpu::wna16_kernel_supported(cpu::wna16_best_kernel()));
  Rng rng(1);
  auto packed = pack_wna16(random_weights({4, 16, 64, 32, false, false}, rng));
  EXPECT_STREQ(packed->kernel_name(), cpu::wna16_kernel_name(cpu::wna16_best_kernel()));
  EXPECT_GE(packed->bytes(), size_t{16 * 64 / 2});
}

TEST(Wna16Test, PackRejectsInconsistentWeights) {
  Rng rng(3);
  const IntWeights good = random_weights({4, 8, 96, 32, true, true}, rng);
  auto expect_invalid = [&](const char* what, auto mutate) {
    IntWeights w = good;
    mutate(w);
    EXPECT_THROW(pack_wna16(w), InvalidArgument) << what;
  };
  expect_invalid("bits 1", [](IntWeights& w) { w.bits = 1; });
  expect_invalid("bits 9", [](IntWeights& w) { w.bits = 9; });
  expect_invalid("group 0", [](IntWeights& w) { w.group_size = 0; });
  expect_invalid("codes short", [](IntWeights& w) { w.codes.pop_back(); });
  expect_invalid("code 16", [](IntWeights& w) { w.codes[5] = 16; });
  expect_invalid("scales short", [](IntWeights& w) { w.scales.pop_back(); });
  expect_invalid("zeros short", [](IntWeights& w) { w.zeros.pop_back(); });
  expect_invalid("zero 16", [](IntWeights& w) { w.zeros[2] = 16; });
  expect_invalid("g_idx short", [](IntWeights& w) { w.g_idx.pop_back(); });
  expect_invalid("g_idx 3", [](IntWeights& w) { w.g_idx[7] = 3; });
  expect_invalid("g_idx -1", [](IntWeights& w) { w.g_idx[7] = -1; });
  EXPECT_NO_THROW(pack_wna16(good));
}

}  // namespace
}  // namespace lowbit::kernels
