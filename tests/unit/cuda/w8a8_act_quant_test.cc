// The GPU activation quantizers (kernels/cuda/act_quant.h) against the CPU: int8 codes and scales
// bit for bit with ref::quantize_activations; fp8 codes and scales bit for bit with the CPU path's
// definition (w8a8_test_util.h), itself cross-checked against compressed-tensors' port
// (quant::fake_quantize_activations / fake_quantize_value). Both the 16-byte vector path (k a
// multiple of 8) and the scalar path (odd k) run. Exact equality is expected: every step is an
// IEEE-rounded fp32 operation on the same inputs (division __fdiv_rn, e4m3 RNE, rint half-even).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/act_quant.h"
#include "kernels/w8a8_matmul.h"
#include "lowbit/error.h"
#include "quant/scheme/qparams.h"
#include "w8a8_test_util.h"

namespace lowbit::kernels::cuda {
namespace {

using testing::Rng;

struct Shape {
  int64_t m, k;
};
const Shape kShapes[] = {{1, 256}, {7, 1024}, {33, 384}, {4, 100}, {3, 37}};

// Runs one GPU fp8 quantizer; returns codes and per-(row, slot) scales as [m, slots].
testing::Fp8Quantized gpu_fp8(const std::vector<uint16_t>& x, int64_t m, int64_t k,
                              const Fp8Activations& act) {
  auto dx = testing::to_device(x);
  DeviceBuffer<uint8_t> q(static_cast<size_t>(m * k));
  const int64_t slots = act.scheme == Fp8ActScheme::PER_GROUP ? k / act.group_size : 1;
  const int64_t ld = m + 3;  // a stride larger than m: the layout really is [slot][ld]
  DeviceBuffer<float> scales(static_cast<size_t>(slots * ld));
  DeviceBuffer<float> amax(1);
  switch (act.scheme) {
    case Fp8ActScheme::PER_TOKEN:
      quantize_per_token_fp8(dx.data(), m, k, q.data(), scales.data(), nullptr);
      break;
    case Fp8ActScheme::PER_GROUP:
      quantize_per_group_fp8(dx.data(), m, k, act.group_size, q.data(), scales.data(), ld, nullptr);
      break;
    case Fp8ActScheme::PER_TENSOR_STATIC:
      quantize_static_fp8(dx.data(), m, k, act.static_scale, q.data(), scales.data(), nullptr);
      break;
    case Fp8ActScheme::PER_TENSOR_DYNAMIC:
      quantize_per_tensor_fp8(dx.data(), m, k, q.data(), scales.data(), amax.data(), nullptr);
      break;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  testing::Fp8Quantized out;
  out.codes = q.download();
  out.slots = slots;
  const std::vector<float> raw = scales.download();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t s = 0; s < slots; ++s) {
      out.scales.push_back(act.scheme == Fp8ActScheme::PER_GROUP ? raw[static_cast<size_t>(s * ld + i)]
                                                                 : raw[static_cast<size_t>(i)]);
    }
  }
  return out;
}

quant::QuantArgs fp8_args(const Fp8Activations& act) {
  quant::QuantArgs a;
  a.num_bits = 8;
  a.type = quant::QuantType::Float;
  a.symmetric = true;
  a.dynamic = quant::DynamicMode::Dynamic;
  a.strategy = quant::Strategy::Token;
  if (act.scheme == Fp8ActScheme::PER_GROUP) {
    a.strategy = quant::Strategy::Group;
    a.group_size = act.group_size;
  } else if (act.scheme != Fp8ActScheme::PER_TOKEN) {
    a.strategy = quant::Strategy::Tensor;
  }
  if (act.scheme == Fp8ActScheme::PER_TENSOR_STATIC) a.dynamic = quant::DynamicMode::Static;
  return a;
}

TEST(W8a8ActQuant, Fp8MatchesTheCpuBitForBit) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(11);
  const Fp8Activations schemes[] = {
      {Fp8ActScheme::PER_TOKEN, 1.0f, 128},
      {Fp8ActScheme::PER_GROUP, 1.0f, 128},
      {Fp8ActScheme::PER_GROUP, 1.0f, 32},
      {Fp8ActScheme::PER_GROUP, 1.0f, 4},  // not a multiple of 8: the scalar group path
      {Fp8ActScheme::PER_TENSOR_STATIC, 0.0123f, 128},
      {Fp8ActScheme::PER_TENSOR_DYNAMIC, 1.0f, 128},
  };
  for (const Shape& s : kShapes) {
    for (const Fp8Activations& act : schemes) {
      if (act.scheme == Fp8ActScheme::PER_GROUP && s.k % act.group_size != 0) continue;
      SCOPED_TRACE("m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
                   " scheme=" + std::to_string(static_cast<int>(act.scheme)) +
                   " group=" + std::to_string(act.group_size));
      const auto x = testing::random_x(s.m, s.k, rng, /*zero_row=*/true);
      const auto xf = testing::to_f32(x);
      const auto ref = testing::fp8_quantize_ref(xf, s.m, s.k, act);
      const auto gpu = gpu_fp8(x, s.m, s.k, act);
      ASSERT_EQ(gpu.scales.size(), ref.scales.size());
      for (size_t i = 0; i < ref.scales.size(); ++i) {
        ASSERT_EQ(f32_to_bits(gpu.scales[i]), f32_to_bits(ref.scales[i])) << "scale " << i;
      }
      for (size_t i = 0; i < ref.codes.size(); ++i) {
        ASSERT_EQ(gpu.codes[i], ref.codes[i]) << "code " << i << " of x = " << xf[i];
      }
      // The same values from compressed-tensors' port: dequantized code · scale, element-wise.
      std::vector<float> fake = xf;
      const quant::QuantArgs args = fp8_args(act);
      if (act.scheme == Fp8ActScheme::PER_TENSOR_STATIC) {
        for (float& v : fake) v = quant::fake_quantize_value(v, act.static_scale, 0.0f, args, DType::F32);
      } else {
        quant::fake_quantize_activations(fake.data(), s.m, s.k, args);
      }
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t c = 0; c < s.k; ++c) {
          const size_t e = static_cast<size_t>(i * s.k + c);
          const float deq = fp8_e4m3_to_f32(gpu.codes[e]) * gpu.scale(i, c, s.k);
          ASSERT_EQ(f32_to_bits(deq), f32_to_bits(fake[e])) << "row " << i << " col " << c;
        }
      }
    }
  }
}

TEST(W8a8ActQuant, Int8MatchesRefQuantizeActivationsBitForBit) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(12);
  const Int8Activations modes[] = {{true, 1.0f, 0}, {false, 0.02f, 0}, {false, 0.037f, -17},
                                   {false, 0.005f, 100}};
  for (const Shape& s : kShapes) {
    for (const Int8Activations& act : modes) {
      SCOPED_TRACE("m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
                   " dynamic=" + std::to_string(act.dynamic) + " zero=" +
                   std::to_string(act.static_zero));
      const auto x = testing::random_x(s.m, s.k, rng, /*zero_row=*/true);
      const auto xf = testing::to_f32(x);
      std::vector<int8_t> ref_q(xf.size());
      std::vector<float> ref_s(static_cast<size_t>(s.m));
      ref::quantize_activations(xf.data(), s.m, s.k, act, ref_q.data(), ref_s.data());
      auto dx = testing::to_device(x);
      DeviceBuffer<int8_t> q(xf.size());
      DeviceBuffer<float> scales(static_cast<size_t>(s.m));
      if (act.dynamic) {
        quantize_per_token_int8(dx.data(), s.m, s.k, q.data(), scales.data(), nullptr);
      } else {
        quantize_static_int8(dx.data(), s.m, s.k, act.static_scale, act.static_zero, q.data(),
                             scales.data(), nullptr);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto gq = q.download();
      const auto gs = scales.download();
      for (int64_t i = 0; i < s.m; ++i) {
        ASSERT_EQ(f32_to_bits(gs[static_cast<size_t>(i)]), f32_to_bits(ref_s[static_cast<size_t>(i)]));
      }
      for (size_t i = 0; i < gq.size(); ++i) ASSERT_EQ(gq[i], ref_q[i]) << "code " << i << " x " << xf[i];
    }
  }
}

TEST(W8a8ActQuant, NonFiniteInputsFollowTheCpu) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t m = 2, k = 64;
  Rng rng(13);
  auto x = testing::random_x(m, k, rng);
  x[5] = f32_to_bf16(NAN);  // row 0 holds a NaN
  const auto xf = testing::to_f32(x);
  // int8: the NaN row gets scale NaN and all-zero codes; row 1 is untouched.
  std::vector<int8_t> ref_q(xf.size());
  std::vector<float> ref_s(m);
  ref::quantize_activations(xf.data(), m, k, Int8Activations{}, ref_q.data(), ref_s.data());
  auto dx = testing::to_device(x);
  DeviceBuffer<int8_t> q(xf.size());
  DeviceBuffer<float> s(m);
  quantize_per_token_int8(dx.data(), m, k, q.data(), s.data(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto gs = s.download();
  EXPECT_TRUE(std::isnan(gs[0]) && std::isnan(ref_s[0]));
  EXPECT_EQ(f32_to_bits(gs[1]), f32_to_bits(ref_s[1]));
  EXPECT_EQ(q.download(), ref_q);
  // fp8: the NaN is ignored by the absmax and becomes a NaN code (either sign); the rest match.
  const auto ref = testing::fp8_quantize_ref(xf, m, k, Fp8Activations{});
  const auto gpu = gpu_fp8(x, m, k, Fp8Activations{});
  EXPECT_EQ(f32_to_bits(gpu.scales[0]), f32_to_bits(ref.scales[0]));
  for (size_t i = 0; i < ref.codes.size(); ++i) {
    if (i == 5) {
      EXPECT_EQ(gpu.codes[i] & 0x7F, 0x7F);
    } else {
      EXPECT_EQ(gpu.codes[i], ref.codes[i]) << i;
    }
  }
}

TEST(W8a8ActQuant, RejectsBadArguments) {
  // Host-side checks: they run (and throw) before any CUDA call, so this needs no device.
  uint16_t* x = reinterpret_cast<uint16_t*>(uintptr_t{256});
  uint8_t* q = reinterpret_cast<uint8_t*>(uintptr_t{512});
  float* s = reinterpret_cast<float*>(uintptr_t{1024});
  EXPECT_THROW(quantize_per_token_fp8(nullptr, 2, 8, q, s, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_per_token_fp8(x, 2, 0, q, s, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_per_group_fp8(x, 2, 100, 128, q, s, 2, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_per_group_fp8(x, 4, 128, 128, q, s, 2, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_static_fp8(x, 2, 8, 0.0f, q, s, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_static_fp8(x, 2, 8, INFINITY, q, s, nullptr), InvalidArgument);
  EXPECT_THROW(quantize_static_int8(x, 2, 8, 1.0f, 128, reinterpret_cast<int8_t*>(q), s, nullptr),
               InvalidArgument);
  EXPECT_THROW(quantize_per_tensor_fp8(x, 2, 8, q, s, nullptr, nullptr), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::kernels::cuda
