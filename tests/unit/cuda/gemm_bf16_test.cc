// The cuBLASLt BF16 GEMM against the CPU reference kernels::matmul on bf16-rounded inputs, for
// decode- and prefill-sized m, shapes that are and are not multiples of 8, bias, alpha, fp32
// output, offset (not 16-byte-aligned) pointers and the plan cache.
#include "kernels/cuda/gemm_bf16.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/matmul.h"
#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit::kernels::cuda {
namespace {

// Random bf16 bit patterns (normal, scale `sigma`), never zeros: zeros hide unwritten outputs.
std::vector<uint16_t> random_bf16(size_t count, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<uint16_t> bits(count);
  for (auto& b : bits) b = f32_to_bf16(dist(rng));
  return bits;
}

std::vector<float> decode(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

Tensor bf16_tensor(std::vector<uint16_t>& bits, int64_t rows, int64_t cols) {
  return Tensor::view(DType::BF16, {rows, cols}, bits.data(), nullptr);
}

struct Reference {
  std::vector<float> y;    // alpha · x · wᵀ + bias, fp32 from exact bf16 inputs
  std::vector<float> mag;  // |alpha| · Σ_k |x||w|: the scale of fp32 summation-order differences
};

Reference reference(std::vector<uint16_t>& x, int64_t m, int64_t k, std::vector<uint16_t>& w,
                    int64_t n, const std::vector<float>* bias, float alpha) {
  const std::vector<float> xf = decode(x);
  Reference ref{std::vector<float>(m * n), std::vector<float>(m * n)};
  matmul(xf.data(), m, k, bf16_tensor(w, n, k), nullptr, ref.y.data());
  std::vector<float> xa(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xa[i] = std::fabs(xf[i]);
  std::vector<uint16_t> wa(w.size());
  for (size_t i = 0; i < w.size(); ++i) wa[i] = w[i] & 0x7FFF;  // |w|: clear the sign bit
  matmul(xa.data(), m, k, bf16_tensor(wa, n, k), nullptr, ref.mag.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float& y = ref.y[i * n + j];
      y = alpha * y + (bias != nullptr ? (*bias)[j] : 0.0f);
      ref.mag[i * n + j] *= std::fabs(alpha);
    }
  }
  return ref;
}

// Tolerance per element: the GPU and the CPU both sum exact bf16 products in fp32 but in different
// orders, so they differ by at most 2·k·2^-24·Σ|x·w| (the classic γ_k bound, doubled for two
// summations; 2^-23 per add allows for truncating tensor-core adders): we allow k·2^-22·mag. On top
// comes the output rounding: `out_rel` = 2^-8 for bf16 (round to nearest is ≤ 2^-9 relative; one
// doubling for the alpha and bias steps), 2^-20 for fp32 output (a few fp32 roundings). A wrong
// index, a missing bias or a transposed operand produces errors of the order of |y| itself.
// `norm_rel` bounds ‖got − ref‖ / ‖ref‖ (METHOD.md's whole-tensor check): for bf16 output 2^-8,
// twice the worst case of the output rounding alone (≤ 2^-9 per element); for fp32 output 1e-5,
// about 8× the fp32 summation-order noise expected at k ≈ 400 (√k · 2^-24 relative).
void expect_close(const std::vector<float>& got, const Reference& ref, int64_t k, double out_rel,
                  double norm_rel, const std::string& what) {
  ASSERT_EQ(got.size(), ref.y.size());
  double err2 = 0.0;
  double ref2 = 0.0;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": element " << i << " not written (poison left)";
    const double diff = std::fabs(double(got[i]) - ref.y[i]);
    const double tol = out_rel * std::fabs(ref.y[i]) + double(k) * std::ldexp(1.0, -22) * ref.mag[i];
    if (diff > tol && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << ref.y[i]
                    << " (tolerance " << tol << ")";
    }
    err2 += diff * diff;
    ref2 += double(ref.y[i]) * ref.y[i];
  }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_LE(std::sqrt(err2), norm_rel * std::sqrt(ref2)) << what;
}

struct Shape {
  int64_t m, n, k;
};

// Runs gemm_bf16 (bf16 out) on fresh random inputs and compares. `offset` elements shift x, w and
// y off their 256-byte cudaMalloc alignment (2-byte-aligned only when odd).
void check_bf16(BlasLt& blas, Shape s, bool with_bias, float alpha, int64_t offset,
                cudaStream_t stream, std::mt19937& rng) {
  auto x = random_bf16(s.m * s.k, 1.0f, rng);
  auto w = random_bf16(s.n * s.k, 0.05f, rng);
  auto bias_bits = random_bf16(s.n, 0.5f, rng);
  const std::vector<float> bias = decode(bias_bits);

  DeviceBuffer<uint16_t> dx(x.size() + offset), dw(w.size() + offset), dy(s.m * s.n + offset);
  DeviceBuffer<uint16_t> dbias{std::span<const uint16_t>(bias_bits)};
  LOWBIT_CUDA_CHECK(cudaMemcpy(dx.data() + offset, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemcpy(dw.data() + offset, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  LOWBIT_CUDA_CHECK(cudaMemset(dy.data(), 0xFF, dy.bytes()));  // 0xFFFF is a bf16 NaN: poison

  gemm_bf16(blas, dx.data() + offset, s.m, s.k, dw.data() + offset, s.n, dy.data() + offset, stream,
            with_bias ? dbias.data() : nullptr, alpha);
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));

  const std::vector<uint16_t> y_bits = dy.download();
  std::vector<float> got(s.m * s.n);
  for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_f32(y_bits[offset + i]);
  const Reference ref = reference(x, s.m, s.k, w, s.n, with_bias ? &bias : nullptr, alpha);
  expect_close(got, ref, s.k, std::ldexp(1.0, -8), std::ldexp(1.0, -8),
               "bf16 m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                   " k=" + std::to_string(s.k) + (with_bias ? " bias" : "") +
                   " alpha=" + std::to_string(alpha) + " offset=" + std::to_string(offset));
}

class GemmBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!device_available()) GTEST_SKIP() << "no CUDA device";
    LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
  std::mt19937 rng_{20261129};
};

TEST_F(GemmBf16Test, MatchesCpuReferenceOnAwkwardShapes) {
  BlasLt blas;
  // n, k multiples of 8 (fast kernels) and not (cuBLASLt's fallback kernels).
  const std::vector<Shape> weights = {{0, 64, 64}, {0, 96, 200}, {0, 13, 37}, {0, 257, 129}};
  for (int64_t m : {1, 3, 17, 128}) {
    for (Shape s : weights) {
      s.m = m;
      check_bf16(blas, s, /*with_bias=*/false, 1.0f, 0, stream_, rng_);
    }
  }
}

TEST_F(GemmBf16Test, LlamaSizedKWithBiasAndAlpha) {
  BlasLt blas;
  // k = 4096 as in Llama-8B's projections: long sums where split-K plans are likely.
  check_bf16(blas, {1, 256, 4096}, true, 1.0f, 0, stream_, rng_);
  check_bf16(blas, {64, 384, 4096}, true, 0.5f, 0, stream_, rng_);
  check_bf16(blas, {5, 40, 24}, true, -2.0f, 0, stream_, rng_);
}

TEST_F(GemmBf16Test, PointersOffTheirAllocationAlignment) {
  BlasLt blas;
  // One element off: 2-byte-aligned pointers. Four elements: 8-byte aligned. Both must pick plans
  // that do not assume 16 bytes.
  check_bf16(blas, {7, 64, 64}, true, 1.0f, 1, stream_, rng_);
  check_bf16(blas, {7, 64, 64}, false, 1.0f, 4, stream_, rng_);
  check_bf16(blas, {7, 64, 64}, false, 1.0f, 0, stream_, rng_);
  EXPECT_EQ(blas.cached_plans(), 3u);  // three alignments, three plans
}

TEST_F(GemmBf16Test, Fp32OutputForLogits) {
  BlasLt blas;
  for (Shape s : std::vector<Shape>{{1, 1000, 384}, {9, 77, 33}}) {
    auto x = random_bf16(s.m * s.k, 1.0f, rng_);
    auto w = random_bf16(s.n * s.k, 0.05f, rng_);
    std::vector<float> bias(s.n);
    for (float& b : bias) b = std::normal_distribution<float>(0.0f, 0.5f)(rng_);
    DeviceBuffer<uint16_t> dx{std::span<const uint16_t>(x)}, dw{std::span<const uint16_t>(w)};
    DeviceBuffer<float> dbias{std::span<const float>(bias)}, dy(s.m * s.n);
    for (bool with_bias : {false, true}) {
      LOWBIT_CUDA_CHECK(cudaMemset(dy.data(), 0xFF, dy.bytes()));  // fp32 NaN poison
      gemm_bf16_f32out(blas, dx.data(), s.m, s.k, dw.data(), s.n, dy.data(), stream_,
                       with_bias ? dbias.data() : nullptr, 0.75f);
      LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const Reference ref = reference(x, s.m, s.k, w, s.n, with_bias ? &bias : nullptr, 0.75f);
      expect_close(dy.download(), ref, s.k, std::ldexp(1.0, -20), 1e-5,
                   "f32out m=" + std::to_string(s.m) + (with_bias ? " bias" : ""));
    }
  }
}

TEST_F(GemmBf16Test, PlansAreCachedPerShape) {
  BlasLt blas;
  EXPECT_EQ(blas.cached_plans(), 0u);
  check_bf16(blas, {1, 64, 64}, false, 1.0f, 0, stream_, rng_);
  check_bf16(blas, {1, 64, 64}, false, 1.0f, 0, stream_, rng_);  // same key: reused
  EXPECT_EQ(blas.cached_plans(), 1u);
  check_bf16(blas, {2, 64, 64}, false, 1.0f, 0, stream_, rng_);  // new batch size
  check_bf16(blas, {2, 64, 64}, true, 1.0f, 0, stream_, rng_);   // bias epilogue
  EXPECT_EQ(blas.cached_plans(), 3u);
}

TEST_F(GemmBf16Test, EmptyBatchRunsNothing) {
  BlasLt blas;
  DeviceBuffer<uint16_t> w(64 * 64);
  gemm_bf16(blas, nullptr, 0, 64, w.data(), 64, nullptr, stream_);
  EXPECT_EQ(blas.cached_plans(), 0u);
}

TEST_F(GemmBf16Test, RejectsBadArguments) {
  BlasLt blas;
  DeviceBuffer<uint16_t> x(64 * 64), w(64 * 64), y(64 * 64);
  DeviceBuffer<float> yf(64 * 64);
  const auto odd = [](auto* p) {
    return reinterpret_cast<decltype(p)>(reinterpret_cast<uintptr_t>(p) + 1);
  };
  EXPECT_THROW(gemm_bf16(blas, odd(x.data()), 4, 64, w.data(), 64, y.data(), stream_),
               InvalidArgument);
  EXPECT_THROW(gemm_bf16(blas, x.data(), 4, 64, odd(w.data()), 64, y.data(), stream_),
               InvalidArgument);
  EXPECT_THROW(gemm_bf16(blas, x.data(), 4, 64, w.data(), 64, odd(y.data()), stream_),
               InvalidArgument);
  EXPECT_THROW(gemm_bf16_f32out(blas, x.data(), 4, 64, w.data(), 64,
                                reinterpret_cast<float*>(y.data() + 1), stream_),
               InvalidArgument);  // fp32 output only 2-byte aligned
  EXPECT_THROW(gemm_bf16(blas, x.data(), 4, 0, w.data(), 64, y.data(), stream_), InvalidArgument);
  EXPECT_THROW(gemm_bf16(blas, x.data(), -1, 64, w.data(), 64, y.data(), stream_), InvalidArgument);
  EXPECT_THROW(gemm_bf16(blas, x.data(), 4, 64, nullptr, 64, y.data(), stream_), InvalidArgument);
  EXPECT_EQ(blas.cached_plans(), 0u);  // nothing reached cuBLASLt
}

}  // namespace
}  // namespace lowbit::kernels::cuda
