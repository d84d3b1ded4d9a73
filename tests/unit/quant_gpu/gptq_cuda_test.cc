// GPTQ on the GPU against the CPU implementation it must match (quant/algos/gptq.cc): the device
// Hessian against HessianAccumulator, and gptq_quantize_cuda against gptq_quantize on the same
// Hessian for every scheme family GPTQ quantizes. Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/device_buffer.h"
#include "lowbit/error.h"
#include "quant/algos/gptq.h"
#include "quant/gpu/gptq_cuda.h"
#include "quant/scheme/qparams.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant::gpu {
namespace {

using kernels::cuda::DeviceBuffer;

#define SKIP_WITHOUT_GPU() \
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device"

std::vector<float> random_normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// ---------------------------------------------------------------------------- DeviceHessian
// Random activations rounded to bf16: the bits for the device, the same values as floats for the
// CPU accumulator. Row t of the device copy starts at t·ld (ld >= cols, junk in between).
struct Rows {
  std::vector<uint16_t> bits;
  std::vector<float> values;  // dense [tokens, cols]
};

Rows bf16_rows(int64_t tokens, int64_t cols, int64_t ld, uint32_t seed) {
  const std::vector<float> v = random_normal(static_cast<size_t>(tokens * ld), 1.5f, seed);
  Rows r;
  r.bits.resize(v.size());
  r.values.resize(static_cast<size_t>(tokens * cols));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < ld; ++c) {
      const uint16_t b = f32_to_bf16(v[t * ld + c]);
      r.bits[t * ld + c] = b;
      if (c < cols) r.values[t * cols + c] = bf16_to_f32(b);
    }
  return r;
}

// |gpu - cpu| per entry against A = 2/n·Σ|x_i||x_j|. Both sum exact-or-nearly products in fp32
// before double: the GPU sums <= k tokens per fp32 run (its flush interval or the whole input),
// error <= (k-1)·2u·A with u = 2^-24 (2u: tensor cores may truncate instead of rounding); the
// CPU sums runs of 512 tokens, <= 512·u·A, and rounds √2·x to fp32 first (<= 3u per product);
// both round the result to fp32 (u·A each). So |gpu - cpu| <= (2k + 520)·u·A. Any real bug — a
// dropped or doubled add, a wrong stride, a missing stripe — moves entries by ~|x_i x_j|/Σ, which
// for the diagonal is >= 1/tokens of A, well above this bound for the sizes below.
void expect_hessians_match(const std::vector<float>& gpu, const std::vector<float>& cpu,
                           const std::vector<std::vector<float>>& chunks, int64_t cols,
                           int64_t sequences, int64_t k) {
  std::vector<double> a(static_cast<size_t>(cols * cols), 0.0);
  for (const std::vector<float>& x : chunks) {
    const int64_t tokens = static_cast<int64_t>(x.size()) / cols;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = 0; j < cols; ++j)
          a[i * cols + j] += std::fabs(static_cast<double>(x[t * cols + i]) * x[t * cols + j]);
  }
  const double bound = (2.0 * static_cast<double>(k) + 520.0) * std::ldexp(1.0, -24);
  int64_t bad = 0;
  for (int64_t i = 0; i < cols * cols; ++i) {
    const double tol = bound * a[i] * 2.0 / static_cast<double>(sequences) + 1e-30;
    if (std::fabs(static_cast<double>(gpu[i]) - cpu[i]) > tol && ++bad <= 5)
      ADD_FAILURE() << "entry " << i / cols << "," << i % cols << ": gpu " << gpu[i] << " cpu "
                    << cpu[i] << " tolerance " << tol;
  }
  EXPECT_EQ(bad, 0);
}

// Adds `token_counts` chunks (each with its own sequence count) to both accumulators.
void run_hessian_case(int64_t cols, int64_t ld, const std::vector<int64_t>& token_counts,
                      uint32_t seed) {
  DeviceHessian dev(cols, nullptr);
  HessianAccumulator cpu(cols);
  std::vector<std::vector<float>> chunks;
  std::vector<DeviceBuffer<uint16_t>> inputs;  // alive until the queued GEMMs have run
  int64_t sequences = 0, total = 0;
  for (size_t c = 0; c < token_counts.size(); ++c) {
    const int64_t tokens = token_counts[c];
    const Rows r = bf16_rows(tokens, cols, ld, seed + static_cast<uint32_t>(c));
    inputs.emplace_back(std::span<const uint16_t>(r.bits));
    const int64_t seq = static_cast<int64_t>(c) + 1;
    dev.add(inputs.back().data(), tokens, ld, seq);
    cpu.add(r.values.data(), tokens, seq);
    chunks.push_back(r.values);
    sequences += seq;
    total += tokens;
  }
  EXPECT_EQ(dev.sequences(), sequences);
  EXPECT_EQ(dev.cols(), cols);
  const int64_t k = std::min(total, DeviceHessian::kFlushTokens);
  expect_hessians_match(dev.download(), cpu.hessian(), chunks, cols, sequences, k);
}

TEST(DeviceHessianTest, MatchesHessianAccumulatorOnStridedRows) {
  SKIP_WITHOUT_GPU();
  // 200 columns (not a multiple of 8) in rows 232 apart; three adds, one of a single token.
  run_hessian_case(200, 232, {300, 1, 517}, 1);
}

TEST(DeviceHessianTest, MatchesAcrossStripes) {
  SKIP_WITHOUT_GPU();
  // 1100 columns: two row stripes (1024 + 76), the second one's GEMM [76, 1100].
  run_hessian_case(1100, 1100, {40, 24}, 2);
}

TEST(DeviceHessianTest, FlushesLongCalibrationIntoDouble) {
  SKIP_WITHOUT_GPU();
  // 70000 tokens in two adds: the first flush falls inside the second add.
  run_hessian_case(48, 50, {40000, 30000}, 3);
}

TEST(DeviceHessianTest, FinalizeIsIdempotentAndResetStartsOver) {
  SKIP_WITHOUT_GPU();
  const int64_t cols = 72;
  const Rows r1 = bf16_rows(64, cols, cols, 4), r2 = bf16_rows(32, cols, cols, 5);
  const DeviceBuffer<uint16_t> x1{std::span<const uint16_t>(r1.bits)};
  const DeviceBuffer<uint16_t> x2{std::span<const uint16_t>(r2.bits)};
  DeviceHessian dev(cols, nullptr);
  EXPECT_THROW(dev.hessian(), InvalidArgument);  // nothing added yet
  dev.add(x1.data(), 64, cols, 2);
  const float* first = dev.hessian();
  const std::vector<float> h1 = dev.download();
  EXPECT_EQ(dev.hessian(), first);
  EXPECT_EQ(dev.download(), h1);  // finalizing twice changes nothing
  dev.add(x2.data(), 32, cols, 1);
  EXPECT_NE(dev.download(), h1);  // the second add counts

  dev.reset();
  EXPECT_EQ(dev.sequences(), 0);
  EXPECT_THROW(dev.hessian(), InvalidArgument);
  dev.add(x1.data(), 64, cols, 2);
  // The same sums in the same order as the first time: bit for bit.
  EXPECT_EQ(dev.download(), h1);
}

TEST(DeviceHessianTest, RejectsBadInput) {
  SKIP_WITHOUT_GPU();
  EXPECT_THROW(DeviceHessian(0, nullptr), InvalidArgument);
  DeviceHessian dev(16, nullptr);
  DeviceBuffer<uint16_t> x(16 * 4);
  EXPECT_THROW(dev.add(x.data(), 4, 15, 1), InvalidArgument);  // ld < cols
  EXPECT_THROW(dev.add(x.data(), -1, 16, 1), InvalidArgument);
  EXPECT_THROW(dev.add(x.data(), 4, 16, -1), InvalidArgument);
  EXPECT_THROW(dev.add(nullptr, 4, 16, 1), InvalidArgument);
}

// ---------------------------------------------------------------------------- GPTQ
// Correlated activations (each column mixed with two others, uneven channel scales), some columns
// never firing, and their Hessian from the CPU accumulator.
std::vector<float> correlated_hessian(int64_t cols, uint32_t seed,
                                      const std::vector<int64_t>& dead = {}) {
  const int64_t tokens = 4 * cols;
  const std::vector<float> z = random_normal(static_cast<size_t>(tokens * cols), 1.0f, seed);
  const std::vector<float> chan = random_normal(static_cast<size_t>(cols), 0.7f, seed + 1);
  std::vector<float> x(z.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < cols; ++j) {
      const float* zt = z.data() + t * cols;
      const float s = zt[j] + 0.6f * zt[(j + 1) % cols] - 0.4f * zt[(5 * j + 3) % cols];
      x[t * cols + j] = s * std::exp(chan[j]);
    }
  for (int64_t d : dead)
    for (int64_t t = 0; t < tokens; ++t) x[t * cols + d] = 0.0f;
  HessianAccumulator acc(cols);
  acc.add(x.data(), tokens, tokens / 64);
  return acc.hessian();
}

// The position of a quantized value on its slot's grid (int: the code; fp8 / fp4: the signed
// index of the code among the format's magnitudes), recovered with the CPU's quantize_value. The
// cases below keep that recovery exact: int8 codes are compared in fp32 (bf16 cannot hold
// 127·s and 126·s apart), the others have at most 4 significant bits against bf16's 8.
int64_t grid_position(float v, float s, float zp, const QuantArgs& args) {
  const float code = quantize_value(v, s, zp, args, DType::F32);
  if (args.type == QuantType::Int) return static_cast<int64_t>(code);
  int64_t m = 0;
  if (args.num_bits == 8) {
    m = f32_to_fp8_e4m3(std::fabs(code));
  } else {
    static const float kFp4[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    while (m < 7 && kFp4[m] != std::fabs(code)) ++m;
  }
  return code < 0.0f ? -m : m;
}

struct Case {
  std::string name;
  QuantArgs args;
  int64_t rows, cols;
  int64_t block_size;
  DType compute;
};

QuantArgs preset_weights(const std::string& name, ActOrder act = ActOrder::None) {
  QuantArgs a = *preset_scheme(name, {"Linear"}).weights;
  a.actorder = act;
  return a;
}

QuantArgs int4_group(int64_t group, ActOrder act) {
  QuantArgs a = preset_weights("W4A16", act);
  a.group_size = group;
  return a;
}

// gptq_quantize_cuda against gptq_quantize on the same Hessian. The qparams, permutation, g_idx,
// dead columns and damping come from the same host code: identical. The column loop does the
// CPU's per-element operations in the same order, so the weights differ only through the lazy
// update's fp32 GEMM, which sums Err·U in another order (cuBLAS vs lowbit's CPU kernel): a few
// ulps of an updated weight, which moves it to the neighbouring grid point only when it sat that
// close to a rounding midpoint — probability ~1e-6 per element — and such a flip changes that
// row's later updates by a fraction of a step, which can flip a few more. So: every difference is
// exactly one grid step, differences stay under 0.5% of the elements (expected: almost always 0),
// and since flipped values sat at a midpoint their squared errors barely change: loss within 1e-3.
void expect_gpu_matches_cpu(const Case& c, const std::vector<float>& h, uint32_t seed) {
  SCOPED_TRACE(c.name);
  const std::vector<float> w0 = random_normal(static_cast<size_t>(c.rows * c.cols), 0.05f, seed);
  GptqOptions opt;
  opt.block_size = c.block_size;
  std::vector<float> cpu = w0, gpu = w0;
  const GptqResult rc = gptq_quantize(cpu, c.rows, c.cols, h, c.args, opt, c.compute);
  const DeviceBuffer<float> dh{std::span<const float>(h)};
  const GptqResult rg =
      gptq_quantize_cuda(gpu, c.rows, c.cols, dh.data(), c.args, opt, c.compute, nullptr);

  EXPECT_EQ(rg.qparams.grid_rows, rc.qparams.grid_rows);
  EXPECT_EQ(rg.qparams.grid_cols, rc.qparams.grid_cols);
  EXPECT_EQ(rg.qparams.scale, rc.qparams.scale);
  EXPECT_EQ(rg.qparams.zero_point, rc.qparams.zero_point);
  EXPECT_EQ(rg.qparams.global_scale, rc.qparams.global_scale);
  EXPECT_EQ(rg.qparams.scale_dtype, rc.qparams.scale_dtype);
  EXPECT_EQ(rg.g_idx, rc.g_idx);
  EXPECT_EQ(rg.dead_columns, rc.dead_columns);
  EXPECT_EQ(rg.retries, rc.retries);
  EXPECT_EQ(rg.dampening_used, rc.dampening_used);

  const QParams& qp = rc.qparams;
  int64_t diffs = 0;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t k = 0; k < c.cols; ++k) {
      const float a = cpu[r * c.cols + k], b = gpu[r * c.cols + k];
      if (a == b) continue;
      ++diffs;
      const int64_t gr = grid_row_of(c.args, r);
      const int64_t gc = rc.g_idx.empty() ? group_of_column(c.args, k) : rc.g_idx[k];
      float s = qp.scale_at(gr, gc);
      if (qp.global_scale > 0.0f) s = s / qp.global_scale;
      const float zp = c.args.symmetric ? 0.0f : qp.zero_at(gr, gc);
      const int64_t step = grid_position(a, s, zp, c.args) - grid_position(b, s, zp, c.args);
      EXPECT_EQ(std::abs(step), 1) << "row " << r << " col " << k << ": cpu " << a << " gpu " << b;
    }
  EXPECT_LE(static_cast<double>(diffs), 0.005 * static_cast<double>(c.rows * c.cols))
      << diffs << " of " << c.rows * c.cols << " weights differ";
  EXPECT_NEAR(rg.loss, rc.loss, 1e-3 * rc.loss);
}

TEST(GptqCudaTest, MatchesCpuAcrossSchemes) {
  SKIP_WITHOUT_GPU();
  QuantArgs int8_channel = preset_weights("W8A8");
  const std::vector<Case> cases = {
      // W4A16: group 128, blocks of 100 straddling the groups (384 = 3·100 + 84).
      {"w4a16", preset_weights("W4A16"), 64, 384, 100, DType::BF16},
      {"w4a16_asym", preset_weights("W4A16_ASYM"), 48, 256, 96, DType::BF16},
      {"w4a16_f32", preset_weights("W4A16"), 16, 256, 128, DType::F32},
      {"w4a16_f16", preset_weights("W4A16"), 16, 256, 128, DType::F16},
      {"int8_channel_one_row", int8_channel, 1, 200, 128, DType::F32},
      {"int8_channel", int8_channel, 37, 333, 128, DType::F32},
      {"actorder_group", int4_group(32, ActOrder::Group), 40, 320, 128, DType::BF16},
      {"actorder_weight", int4_group(64, ActOrder::Weight), 33, 448, 128, DType::BF16},
      {"fp8_channel", preset_weights("FP8_DYNAMIC"), 70, 333, 128, DType::BF16},
      {"fp8_tensor", preset_weights("FP8"), 24, 200, 64, DType::BF16},
      {"fp8_block", preset_weights("FP8_BLOCK"), 160, 300, 128, DType::BF16},
      {"nvfp4", preset_weights("NVFP4A16"), 32, 256, 128, DType::BF16},
      {"mxfp4", preset_weights("MXFP4A16"), 32, 256, 128, DType::BF16},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    expect_gpu_matches_cpu(c, correlated_hessian(c.cols, seed), seed + 50);
    ++seed;
  }
}

TEST(GptqCudaTest, DeadColumnsMatchCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<int64_t> dead = {0, 7, 100, 101, 255};
  const std::vector<float> h = correlated_hessian(256, 21, dead);
  // With activation order the dead columns (diag 0) sort last; without, they stay in place.
  for (ActOrder act : {ActOrder::None, ActOrder::Weight}) {
    const Case c{"dead_" + to_string(act), int4_group(32, act), 24, 256, 128, DType::BF16};
    expect_gpu_matches_cpu(c, h, 22);
    std::vector<float> w = random_normal(24 * 256, 0.05f, 22);
    const DeviceBuffer<float> dh{std::span<const float>(h)};
    const GptqResult r =
        gptq_quantize_cuda(w, 24, 256, dh.data(), c.args, GptqOptions{}, DType::BF16, nullptr);
    EXPECT_EQ(r.dead_columns, 5);
    for (int64_t row = 0; row < 24; ++row)
      for (int64_t d : dead) EXPECT_EQ(w[row * 256 + d], 0.0f);
  }
}

// H with positive diagonal and eigenvalue -2 (pairs [[1, 3], [3, 1]]): damping frac·mean(diag) =
// frac makes it positive definite only from frac 10, the fourth attempt — a margin no double
// factorization can blur, so the CPU and cuSOLVER agree on every attempt.
std::vector<float> indefinite_hessian(int64_t cols) {
  std::vector<float> h(static_cast<size_t>(cols * cols), 0.0f);
  for (int64_t k = 0; k < cols; ++k) h[k * cols + k] = 1.0f;
  for (int64_t k = 0; k + 1 < cols; k += 2) h[k * cols + k + 1] = h[(k + 1) * cols + k] = 3.0f;
  return h;
}

TEST(GptqCudaTest, DampingRetriesMatchCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 8, cols = 64;
  const std::vector<float> h = indefinite_hessian(cols);
  const Case c{"retry", preset_weights("W8A8"), rows, cols, 128, DType::F32};
  expect_gpu_matches_cpu(c, h, 31);
  std::vector<float> w = random_normal(rows * cols, 0.05f, 31);
  const DeviceBuffer<float> dh{std::span<const float>(h)};
  const GptqResult r =
      gptq_quantize_cuda(w, rows, cols, dh.data(), c.args, GptqOptions{}, DType::F32, nullptr);
  EXPECT_EQ(r.retries, 3);
  EXPECT_DOUBLE_EQ(r.dampening_used, 10.0);

  GptqOptions few;
  few.max_damping_retries = 2;  // stops at frac 1: still indefinite
  std::vector<float> w_cpu = random_normal(rows * cols, 0.05f, 31);
  EXPECT_THROW(gptq_quantize(w_cpu, rows, cols, h, c.args, few, DType::F32), Internal);
  EXPECT_THROW(gptq_quantize_cuda(w, rows, cols, dh.data(), c.args, few, DType::F32, nullptr),
               Internal);
}

TEST(GptqCudaTest, RejectsBadInputLikeCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 2, cols = 8;
  const QuantArgs args = preset_weights("W8A8");
  std::vector<float> h(cols * cols, 0.0f);
  for (int64_t k = 0; k < cols; ++k) h[k * cols + k] = 1.0f;
  std::vector<float> bad_h = h;
  bad_h[3] = std::nanf("");
  const DeviceBuffer<float> dh{std::span<const float>(h)};
  const DeviceBuffer<float> dbad{std::span<const float>(bad_h)};
  std::vector<float> w(rows * cols, 0.1f);
  const GptqOptions opt;
  // A weight of the wrong size (the Hessian is then too small as well).
  EXPECT_THROW(gptq_quantize(w, rows, cols + 1, h, args, opt, DType::F32), InvalidArgument);
  EXPECT_THROW(gptq_quantize_cuda(w, rows, cols + 1, dh.data(), args, opt, DType::F32, nullptr),
               InvalidArgument);
  EXPECT_THROW(gptq_quantize_cuda(w, 0, cols, dh.data(), args, opt, DType::F32, nullptr),
               InvalidArgument);
  EXPECT_THROW(gptq_quantize_cuda(w, rows, cols, nullptr, args, opt, DType::F32, nullptr),
               InvalidArgument);
  EXPECT_THROW(gptq_quantize(w, rows, cols, bad_h, args, opt, DType::F32), InvalidArgument);
  EXPECT_THROW(gptq_quantize_cuda(w, rows, cols, dbad.data(), args, opt, DType::F32, nullptr),
               InvalidArgument);
  QuantArgs token = args;
  token.strategy = Strategy::Token;
  EXPECT_THROW(gptq_quantize_cuda(w, rows, cols, dh.data(), token, opt, DType::F32, nullptr),
               InvalidArgument);
  QuantArgs dynamic = args;
  dynamic.dynamic = DynamicMode::Dynamic;
  EXPECT_THROW(gptq_quantize_cuda(w, rows, cols, dh.data(), dynamic, opt, DType::F32, nullptr),
               InvalidArgument);
  GptqOptions zero_block;
  zero_block.block_size = 0;
  EXPECT_THROW(gptq_quantize_cuda(w, rows, cols, dh.data(), args, zero_block, DType::F32, nullptr),
               InvalidArgument);
  EXPECT_EQ(w, std::vector<float>(rows * cols, 0.1f));  // untouched by the failed calls
}

}  // namespace
}  // namespace lowbit::quant::gpu
