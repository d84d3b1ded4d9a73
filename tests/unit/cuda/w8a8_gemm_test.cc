// w8a8_gemm (kernels/cuda/w8a8_gemm.h) against the CPU reference kernels, for every scale
// granularity and every path (AUTO and each forced path), FP8 and INT:
//   FP8: ref::matmul_fp8 on the activations the CPU quantizes and dequantizes (e4m3(q) · scale,
//        fp32), i.e. the same quantized activations the GPU multiplies;
//   INT: ref::matmul_w8a8 (which quantizes x itself with ref::quantize_activations, bit-exact with
//        the GPU quantizer: w8a8_act_quant_test.cc).
// The output is poisoned (NaN) before each run, so an unwritten element fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/w8a8_gemm.h"
#include "kernels/cuda/w8a8_internal.h"
#include "kernels/fp8_matmul.h"
#include "kernels/w8a8_matmul.h"
#include "lowbit/error.h"
#include "w8a8_test_util.h"

namespace lowbit::kernels::cuda {
namespace {

using testing::Rng;

const W8a8Path kPaths[] = {W8a8Path::AUTO, W8a8Path::LT_SCALED, W8a8Path::LT_EPILOGUE,
                           W8a8Path::SIMT, W8a8Path::GEMV};

struct Shape {
  int64_t m, n, k;
};
// m = 1, 5 and 8 pad to 8 rows for cuBLASLt's 1x128 scales; n = 320 ends in a partial 128-row
// block, k = 384 has 3 k-blocks (cuBLASLt's padded stride 4); k = 200 / n = 72 are off cuBLASLt's
// 16-byte FP8 alignment (its heuristic declines; AUTO falls back).
// {8, 256, 4096}: the decode GEMV's largest row count on a Llama-width k.
const Shape kShapes[] = {
    {1, 256, 512}, {5, 320, 384}, {8, 256, 4096}, {64, 256, 1024}, {130, 128, 256}};
const Shape kOddShape = {3, 72, 200};

// Runs w8a8_gemm with a poisoned y; returns the path that ran, or nullopt when the forced path was
// Unsupported (the message is returned in `why`).
template <typename Act>
std::optional<W8a8Path> run_gpu(const W8a8GpuWeights& w, const std::vector<uint16_t>& x, int64_t m,
                                const Act& act, const std::vector<uint16_t>* bias, W8a8Path path,
                                std::vector<uint16_t>* y, std::string* why) {
  auto dx = testing::to_device(x);
  DeviceBuffer<uint16_t> dy(static_cast<size_t>(m * w.rows()));
  dy.upload(std::vector<uint16_t>(dy.size(), 0x7FC1));  // NaN
  DeviceBuffer<uint16_t> dbias;
  if (bias != nullptr) dbias = testing::to_device(*bias);
  const size_t bytes = w8a8_workspace_bytes(w, m, act);
  DeviceBuffer<uint8_t> ws(bytes);
  std::optional<W8a8Path> ran;
  try {
    ran = w8a8_gemm(w, dx.data(), m, act, bias ? dbias.data() : nullptr, dy.data(), ws.data(),
                    bytes, nullptr, path);
  } catch (const Unsupported& e) {
    *why = e.what();
    return std::nullopt;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  *y = dy.download();
  return ran;
}

// Whether a forced path must run: on sm_90 cuBLASLt documents every scale mode used here, for
// 16-byte aligned FP8 / int8 shapes (block scales: whole 128-wide blocks, as every FP8_BLOCK
// checkpoint has; partial blocks may be declined). Elsewhere (sm_80: no FP8; sm_100: other block
// modes) an "Unsupported" is an acceptable answer for the cuBLASLt paths.
bool lt_must_run(const Shape& s, bool block) {
  if (block && (s.n % 128 != 0 || s.k % 128 != 0)) return false;
  return testing::device_cc() == 90 && s.k % 16 == 0 && s.n % 16 == 0;
}

// |y - ref| <= 2^-8 (|ref| + |bias|) + slack · S, S = Σ_k |x·w| (dequantized). 2^-8: the bf16
// rounding of y (≤ 2^-9 relative), twice when the bias is added after a bf16 product. FP8 slack
// 2^-10: Hopper's FP8 tensor cores accumulate with ~2^-14 relative precision between cuBLASLt's
// fp32 promotions (DeepSeek-V3 report), far below 2^-10 S; a wrong scale or code layout moves y
// by a sizeable fraction of |ref| (S ≈ sqrt(k)·|ref| for these random inputs), far above it.
void expect_close(const std::vector<uint16_t>& y, const std::vector<float>& ref,
                  const std::vector<float>& sum_abs, const std::vector<float>& bias, int64_t n,
                  double slack) {
  double err2 = 0.0, ref2 = 0.0;
  int bad = 0;
  for (size_t e = 0; e < ref.size(); ++e) {
    const double got = bf16_to_f32(y[e]);
    const double b = bias.empty() ? 0.0 : std::fabs(bias[e % static_cast<size_t>(n)]);
    const double tol = std::ldexp(std::fabs(ref[e]) + b, -8) + slack * sum_abs[e];
    const double err = std::fabs(got - ref[e]);
    if (!(err <= tol) && bad++ < 5) {
      ADD_FAILURE() << "element " << e << " (row " << e / n << ", col " << e % n << "): got " << got
                    << ", ref " << ref[e] << ", tolerance " << tol;
    }
    err2 += (got - ref[e]) * (got - ref[e]);
    ref2 += double(ref[e]) * ref[e];
  }
  EXPECT_EQ(bad, 0);
  // bf16 output alone gives ~1.6e-3 relative (RMS); 1e-2 leaves room, still far below any bug.
  EXPECT_LE(std::sqrt(err2 / std::max(ref2, 1e-30)), 1e-2);
}

std::vector<uint16_t> random_bias(int64_t n, Rng& rng) {
  std::vector<uint16_t> b(static_cast<size_t>(n));
  for (auto& v : b) v = f32_to_bf16(rng.uniform(-2.0f, 2.0f));
  return b;
}

// ---------------------------------------------------------------------------------------- FP8

struct Fp8Case {
  const char* name;
  int64_t block_rows, block_cols;  // 0: the whole dimension
  Fp8Activations act;
};

Fp8Weights make_fp8(int64_t n, int64_t k, int64_t br, int64_t bc, Rng& rng) {
  Fp8Weights w;
  w.rows = n;
  w.cols = k;
  w.block_rows = br > 0 ? br : n;
  w.block_cols = bc > 0 ? bc : k;
  w.codes.resize(static_cast<size_t>(n * k));
  for (auto& c : w.codes) c = f32_to_fp8_e4m3(rng.uniform(-448.0f, 448.0f));
  const int64_t slots = ((n + w.block_rows - 1) / w.block_rows) * ((k + w.block_cols - 1) / w.block_cols);
  w.scales.resize(static_cast<size_t>(slots));
  for (float& s : w.scales) s = rng.uniform(0.5f, 2.0f) * 1e-3f;  // scales differ by up to 4x
  return w;
}

// Mirrors fp8_gemm.cu's choice: cuBLASLt applies the scales when they are constant along k
// (SCALAR / OUTER_VEC) or over 128-wide k tiles with 1x128 activation groups (VEC128 / BLK128x128).
bool fp8_scaled_applies(const Fp8Case& c, const Shape& s) {
  const bool row = c.act.scheme != Fp8ActScheme::PER_GROUP;
  const int64_t bc = c.block_cols > 0 ? c.block_cols : s.k;
  const bool k_const = bc >= s.k, cols128 = bc % 128 == 0 || bc >= s.k;
  return (row && k_const) || ((row || c.act.group_size == 128) && cols128);
}
bool fp8_epilogue_applies(const Fp8Case& c, const Shape& s) {
  const int64_t bc = c.block_cols > 0 ? c.block_cols : s.k;
  return c.act.scheme != Fp8ActScheme::PER_GROUP && bc >= s.k;
}
// The decode GEMV (gemv_fp8.cu): the epilogue path's scales, at most 8 rows, whole 16-byte pieces
// of k, e4m3 tensor cores. Where it applies it never declines.
bool fp8_gemv_applies(const Fp8Case& c, const Shape& s) {
  return fp8_epilogue_applies(c, s) && s.m <= 8 && s.k % 16 == 0 && testing::device_cc() >= 89;
}

void run_fp8_case(const Fp8Case& c, const Shape& s, bool with_bias, Rng& rng) {
  if (c.act.scheme == Fp8ActScheme::PER_GROUP && s.k % c.act.group_size != 0) return;
  const Fp8Weights w = make_fp8(s.n, s.k, c.block_rows, c.block_cols, rng);
  const W8a8GpuWeights gw = pack_fp8_for_gpu(w);
  const auto x = testing::random_x(s.m, s.k, rng, /*zero_row=*/true);
  const auto q = testing::fp8_quantize_ref(testing::to_f32(x), s.m, s.k, c.act);
  std::vector<float> xq(q.codes.size());  // the activations the GPU multiplies, dequantized
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t col = 0; col < s.k; ++col) {
      const size_t e = static_cast<size_t>(i * s.k + col);
      xq[e] = fp8_e4m3_to_f32(q.codes[e]) * q.scale(i, col, s.k);
    }
  }
  std::vector<uint16_t> bias_bf16;
  std::vector<float> bias;
  if (with_bias) {
    bias_bf16 = random_bias(s.n, rng);
    bias = testing::to_f32(bias_bf16);
  }
  std::vector<float> ref(static_cast<size_t>(s.m * s.n)), sum_abs(ref.size(), 0.0f);
  ref::matmul_fp8(xq.data(), s.m, w, with_bias ? bias.data() : nullptr, ref.data());
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t r = 0; r < s.n; ++r) {
      double acc = 0.0;
      for (int64_t col = 0; col < s.k; ++col) {
        acc += std::fabs(xq[static_cast<size_t>(i * s.k + col)] *
                         fp8_e4m3_to_f32(w.codes[static_cast<size_t>(r * s.k + col)]) * w.scale(r, col));
      }
      sum_abs[static_cast<size_t>(i * s.n + r)] = static_cast<float>(acc);
    }
  }
  for (W8a8Path path : kPaths) {
    SCOPED_TRACE(std::string(c.name) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                 " k=" + std::to_string(s.k) + " bias=" + std::to_string(with_bias) +
                 " path=" + w8a8_path_name(path));
    std::vector<uint16_t> y;
    std::string why;
    const auto ran = run_gpu(gw, x, s.m, c.act, with_bias ? &bias_bf16 : nullptr, path, &y, &why);
    const bool applies = path == W8a8Path::AUTO || path == W8a8Path::SIMT ||
                         (path == W8a8Path::LT_SCALED && fp8_scaled_applies(c, s)) ||
                         (path == W8a8Path::LT_EPILOGUE && fp8_epilogue_applies(c, s)) ||
                         (path == W8a8Path::GEMV && fp8_gemv_applies(c, s));
    if (!ran) {
      EXPECT_TRUE(path != W8a8Path::AUTO && path != W8a8Path::SIMT) << why;
      EXPECT_FALSE(path == W8a8Path::GEMV && applies) << "the GEMV declined: " << why;
      if (applies) {
        const bool block = c.act.scheme == Fp8ActScheme::PER_GROUP ||
                           (c.block_cols > 0 && c.block_cols < s.k);
        EXPECT_FALSE(lt_must_run(s, block && path == W8a8Path::LT_SCALED))
            << "cuBLASLt declined: " << why;
      }
      continue;
    }
    EXPECT_TRUE(applies) << "a path that cannot express these scales ran";
    if (path == W8a8Path::AUTO) {
      std::printf("[w8a8 fp8] %-22s m=%-4ld n=%-4ld k=%-5ld bias=%d: auto ran %s\n", c.name,
                  static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k),
                  with_bias, w8a8_path_name(*ran));
    } else {
      EXPECT_EQ(*ran, path);
    }
    expect_close(y, ref, sum_abs, bias, s.n, std::ldexp(1.0, -10));
  }
}

const Fp8Case kFp8Cases[] = {
    // compressed-tensors FP8: per-tensor weights, static per-tensor input_scale (SCALAR_32F).
    {"tensor x static", 0, 0, {Fp8ActScheme::PER_TENSOR_STATIC, 0.02f, 128}},
    {"tensor x dyn-tensor", 0, 0, {Fp8ActScheme::PER_TENSOR_DYNAMIC, 1.0f, 128}},
    // FP8_DYNAMIC: per-channel weights, per-token activations (OUTER_VEC_32F).
    {"channel x token", 1, 0, {Fp8ActScheme::PER_TOKEN, 1.0f, 128}},
    {"tensor x token", 0, 0, {Fp8ActScheme::PER_TOKEN, 1.0f, 128}},
    // FP8_BLOCK: 128x128 weight blocks, 1x128 activation groups (BLK128x128 x VEC128).
    {"block128 x group128", 128, 128, {Fp8ActScheme::PER_GROUP, 1.0f, 128}},
    {"block128 x token", 128, 128, {Fp8ActScheme::PER_TOKEN, 1.0f, 128}},
    // 1x128 weight groups / channels with 1x128 activation groups (VEC128 x VEC128).
    {"group128 x group128", 1, 128, {Fp8ActScheme::PER_GROUP, 1.0f, 128}},
    {"channel x group128", 1, 0, {Fp8ActScheme::PER_GROUP, 1.0f, 128}},
    // Granularities only the SIMT kernel runs.
    {"group32 x token", 1, 32, {Fp8ActScheme::PER_TOKEN, 1.0f, 128}},
    {"block64 x group64", 64, 64, {Fp8ActScheme::PER_GROUP, 1.0f, 64}},
};

TEST(W8a8GemmFp8, EveryGranularityAndPathMatchesTheCpu) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(21);
  for (const Fp8Case& c : kFp8Cases) {
    for (const Shape& s : kShapes) run_fp8_case(c, s, /*with_bias=*/false, rng);
  }
}

TEST(W8a8GemmFp8, BiasAndOddShapes) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(22);
  for (const Fp8Case& c : kFp8Cases) {
    run_fp8_case(c, kShapes[1], /*with_bias=*/true, rng);
    if (c.act.scheme != Fp8ActScheme::PER_GROUP) run_fp8_case(c, kOddShape, true, rng);
  }
}

// A NaN input reaches its row's outputs on the decode GEMV: NaN never turns into a number, and
// the other rows keep their (finite) values (the absmax ignores the NaN, as the CPU's does).
TEST(W8a8GemmFp8, GemvPropagatesNaNInputs) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  if (testing::device_cc() < 89) GTEST_SKIP() << "the FP8 GEMV needs sm_89+";
  Rng rng(24);
  for (const Shape& s : {Shape{2, 256, 512}, Shape{8, 256, 4096}}) {
    const Fp8Weights w = make_fp8(s.n, s.k, 1, 0, rng);
    const W8a8GpuWeights gw = pack_fp8_for_gpu(w);
    auto x = testing::random_x(s.m, s.k, rng, /*zero_row=*/false);
    x[7] = 0x7FC0;  // row 0, column 7: NaN
    for (const Fp8ActScheme scheme : {Fp8ActScheme::PER_TOKEN, Fp8ActScheme::PER_TENSOR_STATIC}) {
      SCOPED_TRACE("m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
                   " scheme=" + std::to_string(static_cast<int>(scheme)));
      const Fp8Activations act{scheme, 0.05f, 128};
      std::vector<uint16_t> y;
      std::string why;
      const auto ran = run_gpu(gw, x, s.m, act, nullptr, W8a8Path::GEMV, &y, &why);
      ASSERT_TRUE(ran.has_value()) << why;
      const std::vector<float> yf = testing::to_f32(y);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t r = 0; r < s.n; ++r) {
          const float v = yf[static_cast<size_t>(i * s.n + r)];
          if (i == 0) {
            ASSERT_TRUE(std::isnan(v)) << "row 0 feature " << r << " = " << v;
          } else {
            ASSERT_TRUE(std::isfinite(v)) << "row " << i << " feature " << r << " = " << v;
          }
        }
      }
    }
  }
}

TEST(W8a8GemmFp8, EpilogueRunsInSeveralChunks) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  // 64 KiB stages: 128-row chunks, so m = 300 runs as 128 + 128 + 44 rows.
  const size_t saved = w8a8::stage_chunk_bytes();
  w8a8::set_stage_chunk_bytes(64 << 10);
  Rng rng(23);
  run_fp8_case(kFp8Cases[2], {300, 256, 256}, /*with_bias=*/true, rng);
  w8a8::set_stage_chunk_bytes(saved);
}

// ---------------------------------------------------------------------------------------- INT

struct IntCase {
  const char* name;
  int bits;
  int64_t group;  // 0: per channel
  bool zeros;
  Int8Activations act;
};

IntWeights make_int(const IntCase& c, int64_t n, int64_t k, Rng& rng) {
  IntWeights w;
  w.bits = c.bits;
  w.rows = n;
  w.cols = k;
  w.group_size = c.group > 0 ? c.group : k;
  w.codes.resize(static_cast<size_t>(n * k));
  for (auto& v : w.codes) v = static_cast<uint8_t>(rng.next() % (1u << c.bits));
  w.scales.resize(static_cast<size_t>(n * w.groups()));
  for (float& s : w.scales) s = rng.uniform(1e-3f, 2e-2f);
  if (c.zeros) {
    w.zeros.resize(w.scales.size());
    for (auto& z : w.zeros) z = static_cast<uint8_t>(rng.next() % (1u << c.bits));
  }
  return w;
}

void run_int_case(const IntCase& c, const Shape& s, bool with_bias, Rng& rng) {
  const IntWeights w = make_int(c, s.n, s.k, rng);
  const W8a8GpuWeights gw = pack_int8_for_gpu(w);
  const auto x = testing::random_x(s.m, s.k, rng, /*zero_row=*/true);
  const auto xf = testing::to_f32(x);
  std::vector<uint16_t> bias_bf16;
  std::vector<float> bias;
  if (with_bias) {
    bias_bf16 = random_bias(s.n, rng);
    bias = testing::to_f32(bias_bf16);
  }
  std::vector<float> ref(static_cast<size_t>(s.m * s.n)), sum_abs(ref.size());
  ref::matmul_w8a8(xf.data(), s.m, w, c.act, with_bias ? bias.data() : nullptr, ref.data());
  std::vector<int8_t> q(xf.size());
  std::vector<float> sx(static_cast<size_t>(s.m));
  ref::quantize_activations(xf.data(), s.m, s.k, c.act, q.data(), sx.data());
  const int zx = c.act.dynamic ? 0 : c.act.static_zero;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t r = 0; r < s.n; ++r) {
      double acc = 0.0;
      for (int64_t col = 0; col < s.k; ++col) {
        const int64_t g = col / w.group_size;
        acc += std::fabs((q[static_cast<size_t>(i * s.k + col)] - zx) *
                         (w.codes[static_cast<size_t>(r * s.k + col)] - w.zero(r, g)) *
                         w.scales[static_cast<size_t>(r * w.groups() + g)]);
      }
      sum_abs[static_cast<size_t>(i * s.n + r)] = static_cast<float>(acc * sx[static_cast<size_t>(i)]);
    }
  }
  for (W8a8Path path : kPaths) {
    SCOPED_TRACE(std::string(c.name) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                 " k=" + std::to_string(s.k) + " bias=" + std::to_string(with_bias) +
                 " path=" + w8a8_path_name(path));
    std::vector<uint16_t> y;
    std::string why;
    const auto ran = run_gpu(gw, x, s.m, c.act, with_bias ? &bias_bf16 : nullptr, path, &y, &why);
    const bool imma = c.group == 0 && !c.zeros;
    if (!ran) {
      EXPECT_TRUE(path == W8a8Path::LT_SCALED || path == W8a8Path::LT_EPILOGUE ||
                  path == W8a8Path::GEMV) << why;
      if (path == W8a8Path::LT_EPILOGUE && imma) {
        EXPECT_FALSE(testing::device_cc() >= 80 && lt_must_run(s, false))
            << "cuBLASLt declined IMMA: " << why;
      }
      continue;
    }
    EXPECT_NE(path, W8a8Path::LT_SCALED);
    if (path == W8a8Path::LT_EPILOGUE) {
      EXPECT_TRUE(imma);
    }
    if (path == W8a8Path::AUTO) {
      std::printf("[w8a8 int] %-22s m=%-4ld n=%-4ld k=%-5ld bias=%d: auto ran %s\n", c.name,
                  static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k),
                  with_bias, w8a8_path_name(*ran));
    } else {
      EXPECT_EQ(*ran, path);
    }
    // The integer sums are exact on every path. What remains: IMMA, three fp32 roundings of the
    // scaled sum (relative to |y|, inside the 2^-8 |ref| term); SIMT, an fp32 sum of at most
    // k/32 + groups exact partials, ≤ (k/32 + groups)·2^-24·S ≤ 2^-18 S for these shapes. Slack
    // 2^-16 S; a wrong scale, zero point or code moves y by about S / groups or more.
    expect_close(y, ref, sum_abs, bias, s.n, std::ldexp(1.0, -16));
  }
}

const IntCase kIntCases[] = {
    {"W8A8 channel dynamic", 8, 0, false, {true, 1.0f, 0}},            // the W8A8 preset: IMMA
    {"W8A8 channel static-asym", 8, 0, false, {false, 0.03f, -21}},    // IMMA + zero correction
    {"W4A8 channel dynamic", 4, 0, false, {true, 1.0f, 0}},            // int4 widened: IMMA
    {"W4A8 group128 dynamic", 4, 128, false, {true, 1.0f, 0}},         // the W4A8 preset: SIMT
    {"W8 channel zeros", 8, 0, true, {true, 1.0f, 0}},                 // weight zero points: SIMT
    {"W4 group32 zeros static", 4, 32, true, {false, 0.05f, 9}},
    {"W3 group48 dynamic", 3, 48, false, {true, 1.0f, 0}},             // groups across k tiles
};

TEST(W8a8GemmInt, EveryGranularityAndPathMatchesTheCpu) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(31);
  for (const IntCase& c : kIntCases) {
    for (const Shape& s : kShapes) run_int_case(c, s, /*with_bias=*/false, rng);
  }
}

TEST(W8a8GemmInt, BiasOddShapesAndChunks) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(32);
  for (const IntCase& c : kIntCases) {
    run_int_case(c, kShapes[1], /*with_bias=*/true, rng);
    run_int_case(c, kOddShape, /*with_bias=*/true, rng);
  }
  const size_t saved = w8a8::stage_chunk_bytes();
  w8a8::set_stage_chunk_bytes(64 << 10);  // 128-row chunks: 300 = 128 + 128 + 44
  run_int_case(kIntCases[1], {300, 256, 256}, /*with_bias=*/true, rng);
  w8a8::set_stage_chunk_bytes(saved);
}

// ------------------------------------------------------------------------------------ errors

TEST(W8a8Gemm, PackRejectsInconsistentWeights) {
  // Checked on the host before anything is uploaded: no device needed.
  Rng rng(41);
  Fp8Weights f = make_fp8(16, 32, 0, 0, rng);
  f.scales.push_back(1.0f);
  EXPECT_THROW(pack_fp8_for_gpu(f), InvalidArgument);
  IntWeights w = make_int({"", 4, 16, false, {}}, 8, 32, rng);
  w.codes[3] = 16;
  EXPECT_THROW(pack_int8_for_gpu(w), InvalidArgument);
  w.codes[3] = 1;
  w.g_idx.assign(32, 0);
  for (int c = 0; c < 32; ++c) w.g_idx[static_cast<size_t>(c)] = (c + 1) % 2;  // desc_act order
  EXPECT_THROW(pack_int8_for_gpu(w), Unsupported);
}

// The serving engine sizes one workspace for its largest step (w8a8_workspace_bytes(max rows)) and
// runs every step, of any row count up to that, in it. Host arithmetic only: no device needed.
// The shapes are the 8B model's gate/up (the one that was short: 1037..2047 rows did not fit the
// workspace for 2048, and mixed prefill + decode steps of the FP8 server aborted) and down, and a
// small one with 128-row stage chunks (the GPU test below runs it).
TEST(W8a8Gemm, WorkspaceForMRowsHoldsEveryFewerRows) {
  const size_t saved = w8a8::stage_chunk_bytes();
  for (const size_t chunk_bytes : {saved, size_t{64} << 10}) {
    w8a8::set_stage_chunk_bytes(chunk_bytes);
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{28672, 4096}, {4096, 14336}, {256, 256}}) {
      W8a8GpuWeights::Impl w;
      w.n = n;
      w.k = k;
      for (const int64_t scale_cols : {int64_t{1}, k / 128}) {
        for (const int64_t most : {1, 2, 3, 4, 5, 8, 300, 1037, 2047, 2048}) {
          const size_t bytes = w8a8::workspace_for_up_to(w, most, scale_cols);
          int short_of = 0;
          for (int64_t m = 0; m <= most; ++m) {
            if (w8a8::plan_layout(w, m, scale_cols).total > bytes && short_of++ == 0) {
              ADD_FAILURE() << "n " << n << " k " << k << " scale_cols " << scale_cols << ": "
                            << m << " rows need more than the workspace for " << most;
            }
          }
          EXPECT_EQ(short_of, 0);
        }
      }
    }
  }
  w8a8::set_stage_chunk_bytes(saved);
  // Why the workspace is not simply the layout of the most rows: one row fewer can need more.
  W8a8GpuWeights::Impl gate_up;
  gate_up.n = 28672;
  gate_up.k = 4096;
  EXPECT_GT(w8a8::plan_layout(gate_up, 2047, 1).total, w8a8::plan_layout(gate_up, 2048, 1).total);
}

// The same on the device: one workspace sized for 300 rows runs every row count below it (128-row
// stage chunks, so 299 rows reserve their padded bf16 output, more than 300 rows' chunks).
TEST(W8a8GemmFp8, OneWorkspaceRunsEveryFewerRows) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  const size_t saved = w8a8::stage_chunk_bytes();
  w8a8::set_stage_chunk_bytes(64 << 10);
  Rng rng(29);
  const int64_t n = 256, k = 256, most = 300;
  const W8a8GpuWeights w = pack_fp8_for_gpu(make_fp8(n, k, 1, 128, rng));
  for (const Fp8Activations& act : {Fp8Activations{Fp8ActScheme::PER_TOKEN, 1.0f, 128},
                                    Fp8Activations{Fp8ActScheme::PER_GROUP, 1.0f, 128}}) {
    const size_t bytes = w8a8_workspace_bytes(w, most, act);
    DeviceBuffer<uint8_t> ws(bytes);
    std::vector<uint16_t> x(static_cast<size_t>(most * k));
    for (auto& v : x) v = f32_to_bf16(rng.uniform(-1.0f, 1.0f));
    const auto dx = testing::to_device(x);
    DeviceBuffer<uint16_t> dy(static_cast<size_t>(most * n));
    for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{129}, int64_t{297}, int64_t{299}, most}) {
      EXPECT_NO_THROW(w8a8_gemm(w, dx.data(), m, act, nullptr, dy.data(), ws.data(), bytes, nullptr))
          << m << " rows in the workspace for " << most;
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  w8a8::set_stage_chunk_bytes(saved);
}

TEST(W8a8Gemm, RejectsBadCalls) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(42);
  const W8a8GpuWeights fp8 = pack_fp8_for_gpu(make_fp8(64, 128, 1, 0, rng));
  const W8a8GpuWeights int8 = pack_int8_for_gpu(make_int({"", 8, 0, false, {}}, 64, 128, rng));
  DeviceBuffer<uint16_t> x(4 * 128), y(4 * 64);
  const Fp8Activations fa;
  const Int8Activations ia;
  const size_t bytes = w8a8_workspace_bytes(fp8, 4, fa);
  DeviceBuffer<uint8_t> ws(bytes);
  // Weights of the other kind.
  EXPECT_THROW(w8a8_gemm(fp8, x.data(), 4, ia, nullptr, y.data(), ws.data(), bytes, nullptr),
               InvalidArgument);
  EXPECT_THROW(w8a8_gemm(int8, x.data(), 4, fa, nullptr, y.data(), ws.data(), bytes, nullptr),
               InvalidArgument);
  // Too little workspace, null pointers, bad static scales and groups.
  EXPECT_THROW(w8a8_gemm(fp8, x.data(), 4, fa, nullptr, y.data(), ws.data(), bytes - 1, nullptr),
               InvalidArgument);
  EXPECT_THROW(w8a8_gemm(fp8, nullptr, 4, fa, nullptr, y.data(), ws.data(), bytes, nullptr),
               InvalidArgument);
  EXPECT_THROW(w8a8_gemm(fp8, x.data(), 4, Fp8Activations{Fp8ActScheme::PER_TENSOR_STATIC, -1.0f, 128},
                         nullptr, y.data(), ws.data(), bytes, nullptr),
               InvalidArgument);
  EXPECT_THROW(w8a8_workspace_bytes(fp8, 4, Fp8Activations{Fp8ActScheme::PER_GROUP, 1.0f, 100}),
               InvalidArgument);
  EXPECT_THROW(w8a8_workspace_bytes(int8, 4, Int8Activations{false, 1.0f, 200}), InvalidArgument);
  // A forced path that cannot express the scales says so.
  EXPECT_THROW(w8a8_gemm(int8, x.data(), 4, ia, nullptr, y.data(), ws.data(),
                         w8a8_workspace_bytes(int8, 4, ia), nullptr, W8a8Path::LT_SCALED),
               Unsupported);
  // m == 0 runs nothing and needs no pointers.
  EXPECT_NO_THROW(w8a8_gemm(fp8, nullptr, 0, fa, nullptr, nullptr, nullptr, 0, nullptr));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace lowbit::kernels::cuda
