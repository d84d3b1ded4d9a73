// The speed paths of `lowbit quantize --device cuda` against the code they replace, bit for bit:
// the row-parallel weight observer (observe_weight_minmax_rows, CPU only: runs everywhere) against
// observe_weight_minmax, and gptq_quantize_cuda_bf16 (bf16 in and out, conversions on the device)
// against gptq_quantize_cuda followed by the host's f32_to_bf16 (what set_weight stores).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/device_buffer.h"
#include "lowbit/error.h"
#include "quant/algos/gptq.h"
#include "quant/algos/observers.h"
#include "quant/gpu/gptq_cuda.h"
#include "quant/scheme/qparams.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant::gpu {
namespace {

using kernels::cuda::DeviceBuffer;

std::vector<float> random_normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Bitwise equality of float vectors (EXPECT_EQ on floats would call -0 == +0 and fail on NaN).
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

QuantArgs preset_weights(const std::string& name) {
  return *preset_scheme(name, {"Linear"}).weights;
}

TEST(ObserverRowsTest, EqualsTheSerialObserverBitForBit) {
  // 600 rows: three stripes of calculate_qparams (256 rows each), the last one partial. Signed
  // zeros fill whole groups and open others (std::min keeps the first of -0 / +0), a NaN sits in
  // one group and an all-equal group gives a zero range (scale = eps).
  const int64_t rows = 600, cols = 512;
  std::vector<float> w = random_normal(static_cast<size_t>(rows * cols), 0.03f, 7);
  for (int64_t j = 0; j < 128; ++j) w[static_cast<size_t>(3 * cols + j)] = (j % 2) ? -0.0f : 0.0f;
  w[static_cast<size_t>(5 * cols + 128)] = -0.0f;
  w[static_cast<size_t>(5 * cols + 129)] = 0.0f;
  w[static_cast<size_t>(9 * cols + 300)] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t j = 256; j < 384; ++j) w[static_cast<size_t>(11 * cols + j)] = 0.25f;
  QuantArgs channel = preset_weights("W8A8");
  QuantArgs group64 = preset_weights("W4A16");
  group64.group_size = 64;
  const std::vector<std::pair<std::string, QuantArgs>> cases = {
      {"w4a16", preset_weights("W4A16")},     {"w4a16_asym", preset_weights("W4A16_ASYM")},
      {"group64", group64},                    {"int8_channel", channel},
      {"nvfp4", preset_weights("NVFP4A16")},  {"fp8_channel", preset_weights("FP8_DYNAMIC")},
      {"fp8_tensor", preset_weights("FP8")},  {"fp8_block", preset_weights("FP8_BLOCK")},
  };
  for (const auto& [name, args] : cases) {
    for (DType compute : {DType::BF16, DType::F16, DType::F32}) {
      for (float global : {0.0f, 37.5f}) {
        if (global > 0.0f && args.strategy != Strategy::TensorGroup) continue;
        SCOPED_TRACE(name + " " + std::string(dtype_name(compute)) + " global " +
                     std::to_string(global));
        const QParams serial = observe_weight_minmax(w.data(), rows, cols, args, compute, global);
        const QParams rows_qp =
            observe_weight_minmax_rows(w.data(), rows, cols, args, compute, global);
        EXPECT_EQ(rows_qp.grid_rows, serial.grid_rows);
        EXPECT_EQ(rows_qp.grid_cols, serial.grid_cols);
        EXPECT_EQ(rows_qp.scale_dtype, serial.scale_dtype);
        EXPECT_EQ(f32_to_bits(rows_qp.global_scale), f32_to_bits(serial.global_scale));
        expect_same_bits(rows_qp.scale, serial.scale, "scale");
        expect_same_bits(rows_qp.zero_point, serial.zero_point, "zero_point");
        // observe_weight (what GPTQ and RTN call) takes the row path for min-max observers.
        const QParams observed = observe_weight(w.data(), rows, cols, args, compute, global);
        expect_same_bits(observed.scale, serial.scale, "observe_weight scale");
      }
    }
  }
}

TEST(ObserverRowsTest, RejectsWhatTheSerialObserverRejects) {
  QuantArgs args = preset_weights("W4A16");
  const std::vector<float> w(4 * 200, 0.5f);  // 200 columns: not a multiple of 128
  EXPECT_THROW(observe_weight_minmax(w.data(), 4, 200, args, DType::BF16), InvalidArgument);
  EXPECT_THROW(observe_weight_minmax_rows(w.data(), 4, 200, args, DType::BF16), InvalidArgument);
}

TEST(WidenBf16Test, IsBf16ToF32) {
  std::vector<uint16_t> bits(70000);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  std::vector<float> out;
  widen_bf16(bits.data(), bits.size(), out);
  ASSERT_EQ(out.size(), bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    ASSERT_EQ(f32_to_bits(out[i]), f32_to_bits(bf16_to_f32(bits[i]))) << i;
}

// Correlated activations' Hessian from the CPU accumulator (some columns never fire).
std::vector<float> hessian_of(int64_t cols, uint32_t seed) {
  const int64_t tokens = 4 * cols;
  const std::vector<float> z = random_normal(static_cast<size_t>(tokens * cols), 1.0f, seed);
  std::vector<float> x(z.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < cols; ++j) {
      const float* zt = z.data() + t * cols;
      x[t * cols + j] = j % 97 == 5 ? 0.0f : zt[j] + 0.6f * zt[(j + 1) % cols];
    }
  HessianAccumulator acc(cols);
  acc.add(x.data(), tokens, tokens / 64);
  return acc.hessian();
}

TEST(GptqCudaBf16Test, EqualsTheFp32PathRoundedToBf16) {
  if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  QuantArgs group_order = preset_weights("W4A16");
  group_order.group_size = 64;
  group_order.actorder = ActOrder::Group;
  QuantArgs weight_order = preset_weights("W4A16");
  weight_order.actorder = ActOrder::Weight;
  const std::vector<std::pair<std::string, QuantArgs>> cases = {
      {"w4a16", preset_weights("W4A16")},
      {"w4a16_asym", preset_weights("W4A16_ASYM")},
      {"actorder_weight", weight_order},
      {"actorder_group", group_order},
      {"fp8_channel", preset_weights("FP8_DYNAMIC")},
  };
  const int64_t rows = 96, cols = 384;
  const std::vector<float> h = hessian_of(cols, 3);
  const DeviceBuffer<float> dh{std::span<const float>(h)};
  uint32_t seed = 11;
  for (const auto& [name, args] : cases) {
    SCOPED_TRACE(name);
    const std::vector<float> w0 = random_normal(static_cast<size_t>(rows * cols), 0.05f, ++seed);
    std::vector<uint16_t> bits(w0.size());
    for (size_t i = 0; i < w0.size(); ++i) bits[i] = f32_to_bf16(w0[i]);
    std::vector<float> w(bits.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_f32(bits[i]);
    GptqOptions opt;
    opt.block_size = 128;
    // The device computes the same way in both calls (same kernels, same cuBLAS plan, one stream):
    // the fp32 result rounded on the host must equal the bf16 result bit for bit.
    std::vector<float> ref = w;
    const GptqResult rf = gptq_quantize_cuda(ref, rows, cols, dh.data(), args, opt, DType::BF16,
                                             nullptr);
    std::vector<uint16_t> out(bits.size(), 0xFFFF);
    DeviceBuffer<uint16_t> out_device(bits.size());
    GptqTimes times;
    const GptqResult rb = gptq_quantize_cuda_bf16(bits.data(), w, out.data(), out_device.data(),
                                                  rows, cols, dh.data(), args, opt, nullptr,
                                                  &times);
    EXPECT_EQ(times.calls, 1);
    EXPECT_GE(times.copies, 0.0);
    expect_same_bits(rb.qparams.scale, rf.qparams.scale, "scale");
    expect_same_bits(rb.qparams.zero_point, rf.qparams.zero_point, "zero_point");
    EXPECT_EQ(rb.g_idx, rf.g_idx);
    EXPECT_EQ(rb.dead_columns, rf.dead_columns);
    EXPECT_GT(rb.dead_columns, 0);
    // The loss is summed over row tiles in the order they finish: equal up to that order.
    EXPECT_NEAR(rb.loss, rf.loss, 1e-9 * rf.loss);
    const std::vector<uint16_t> on_device = out_device.download();
    size_t host_diff = 0, device_diff = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      host_diff += out[i] != f32_to_bf16(ref[i]);
      device_diff += on_device[i] != out[i];
    }
    EXPECT_EQ(host_diff, 0u);
    EXPECT_EQ(device_diff, 0u);
  }
}

}  // namespace
}  // namespace lowbit::quant::gpu
