// The decode GEMV (gemv_bf16.h) against the CPU reference kernels::matmul and against cuBLASLt
// (gemm_bf16) for m = 1..8 on shapes that take the streaming kernel (k % 8 == 0, 16-byte aligned)
// and shapes and offsets that take the fallback; its fused SiLU and residual variants against the
// unfused kernels bit for bit; NaN propagation. And the fused RoPE + KV-cache write
// (rope_kv_write.h) against rope_neox + write_kv_paged, bit for bit. The fused residual + RMSNorm
// epilogue against gemv_bf16 + fused_add_rmsnorm, bit for bit.
//
// Tolerances (as gemm_bf16_test.cc): GPU and CPU both sum exact bf16 products in fp32 in different
// orders, so they differ by at most ~2·k·2^-24·Σ|x·w| (tensor-core adders may truncate: we allow
// k·2^-22·Σ|x·w|), plus the final bf16 rounding of the GPU output (≤ 2^-9 relative; 2^-8 allowed
// for the bias step). A wrong index, column or transposition errs by the order of |y| itself.
// The fused variants promise the bits of the unfused sequence (same formulas, same roundings, the
// same GEMV kernel), so those comparisons are exact.
#include "kernels/cuda/gemv_bf16.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/rope_kv_write.h"
#include "kernels/cuda/small_ops.h"
#include "kernels/matmul.h"
#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit::kernels::cuda {
namespace {

constexpr uint16_t kBf16Nan = 0x7FC0;

// Random bf16 bit patterns (normal, scale `sigma`), never zeros: zeros hide unwritten outputs.
std::vector<uint16_t> random_bf16(size_t count, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<uint16_t> bits(count);
  for (auto& b : bits) {
    float v = dist(rng);
    if (v == 0.0f) v = sigma;
    b = f32_to_bf16(v);
  }
  return bits;
}

std::vector<float> decode(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

// A device copy starting `offset` elements into its allocation (odd: 2-byte aligned only), the
// rest of the allocation NaN-poisoned.
struct Dev {
  DeviceBuffer<uint16_t> buffer;
  int64_t offset = 0;
  Dev(const std::vector<uint16_t>& host, int64_t off) : buffer(host.size() + off + 8), offset(off) {
    LOWBIT_CUDA_CHECK(cudaMemset(buffer.data(), 0xFF, buffer.bytes()));
    if (!host.empty()) {
      LOWBIT_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    }
  }
  uint16_t* data() { return buffer.data() + offset; }
  std::vector<uint16_t> download(size_t count) const {
    std::vector<uint16_t> all = buffer.download();
    return {all.begin() + offset, all.begin() + offset + static_cast<int64_t>(count)};
  }
};

struct Reference {
  std::vector<float> y;    // x · wᵀ + bias in fp32 from the exact bf16 inputs
  std::vector<float> mag;  // Σ_k |x||w|: the scale of summation-order differences
};

Reference reference(const std::vector<float>& xf, int64_t m, int64_t k, std::vector<uint16_t> w,
                    int64_t n, const std::vector<float>* bias) {
  Reference ref{std::vector<float>(m * n), std::vector<float>(m * n)};
  const Tensor wt = Tensor::view(DType::BF16, {n, k}, w.data(), nullptr);
  matmul(xf.data(), m, k, wt, bias != nullptr ? bias->data() : nullptr, ref.y.data());
  std::vector<float> xa(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xa[i] = std::fabs(xf[i]);
  for (auto& b : w) b &= 0x7FFF;  // |w|
  const Tensor wa = Tensor::view(DType::BF16, {n, k}, w.data(), nullptr);
  matmul(xa.data(), m, k, wa, nullptr, ref.mag.data());
  return ref;
}

double tolerance(const Reference& ref, size_t i, int64_t k) {
  return std::ldexp(1.0, -8) * std::fabs(ref.y[i]) + double(k) * std::ldexp(1.0, -22) * ref.mag[i];
}

struct Case {
  int64_t m, n, k;
  int64_t offset;  // elements x and w are shifted by (8: still 16-byte aligned; 1: not)
  bool bias;
};

std::string name(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " offset=" + std::to_string(c.offset) + (c.bias ? " bias" : "");
}

class GemvBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!device_available()) GTEST_SKIP() << "no CUDA device";
    LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream_));
    blas_ = std::make_unique<BlasLt>();  // after the device check: it creates a cuBLASLt handle
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Runs gemv_bf16 and gemm_bf16 on fresh inputs; checks both against the CPU and each other.
  void check(const Case& c, bool expect_vectorized) {
    const std::string what = name(c);
    const auto x = random_bf16(c.m * c.k, 1.0f, rng_);
    const auto w = random_bf16(c.n * c.k, 0.05f, rng_);
    const auto b = random_bf16(c.n, 0.5f, rng_);
    const std::vector<float> bias = decode(b);
    const std::vector<uint16_t> poison(c.m * c.n, 0xFFFF);  // NaN: unwritten stays NaN
    Dev dx(x, c.offset), dw(w, c.offset), db(b, 0), dy(poison, 0), dz(poison, 0);
    EXPECT_EQ(gemv_bf16_vectorized(dx.data(), c.k, c.k, dw.data()), expect_vectorized) << what;
    gemv_bf16(dx.data(), c.m, c.k, dw.data(), c.n, dy.data(), stream_,
              c.bias ? db.data() : nullptr);
    gemm_bf16(*blas_, dx.data(), c.m, c.k, dw.data(), c.n, dz.data(), stream_,
              c.bias ? db.data() : nullptr);
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const auto got = decode(dy.download(c.m * c.n));
    const auto blas = decode(dz.download(c.m * c.n));
    const Reference ref = reference(decode(x), c.m, c.k, w, c.n, c.bias ? &bias : nullptr);
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = tolerance(ref, i, c.k);
      // Each within tol of the reference, so within 2·tol of each other; NaN fails both.
      const bool ok = std::fabs(got[i] - ref.y[i]) <= tol && std::fabs(got[i] - blas[i]) <= 2 * tol;
      if (!ok && ++bad <= 5) {
        ADD_FAILURE() << what << ": element " << i << " gemv " << got[i] << " cublasLt " << blas[i]
                      << " reference " << ref.y[i] << " (tolerance " << tol << ")";
      }
    }
    EXPECT_EQ(bad, 0) << what;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<BlasLt> blas_;
  std::mt19937 rng_{20261130};
};

TEST_F(GemvBf16Test, MatchesCpuAndCublasLtOnStreamingShapes) {
  // k multiple of 8 (some not of 32 or 128: partial chunks), n not a multiple of 16 (a partial
  // tile).
  const std::vector<std::pair<int64_t, int64_t>> nk = {
      {64, 64}, {300, 200}, {17, 8}, {96, 4096}, {257, 1032}};
  for (int64_t m = 1; m <= 8; ++m) {
    for (const auto& [n, k] : nk) check({m, n, k, 0, m % 2 == 0}, true);
  }
  check({3, 300, 200, 8, true}, true);  // offsets that keep 16-byte alignment
}

TEST_F(GemvBf16Test, FallsBackCleanlyOnOddShapesAndOffsets) {
  for (int64_t m : {1, 2, 5, 8}) {
    check({m, 257, 4100, 0, true}, false);  // k % 8 != 0: rows not 16-byte aligned
    check({m, 13, 37, 0, false}, false);
    check({m, 300, 200, 1, m == 2}, false);  // 2-byte-aligned pointers
  }
}

// A batch of rows gives each row the bits it gets alone (the mma's columns are independent).
TEST_F(GemvBf16Test, EachRowHasTheBitsOfItsOwnCall) {
  for (int64_t k : {int64_t{1024}, int64_t{36}}) {  // streaming and fallback kernels
    const int64_t m = 8, n = 200;
    const auto x = random_bf16(m * k, 1.0f, rng_);
    const auto w = random_bf16(n * k, 0.05f, rng_);
    Dev dx(x, 0), dw(w, 0), dy(std::vector<uint16_t>(m * n, 0xFFFF), 0);
    gemv_bf16(dx.data(), m, k, dw.data(), n, dy.data(), stream_);
    const auto all = dy.download(m * n);
    for (int64_t r = 0; r < m; ++r) {
      Dev one(std::vector<uint16_t>(n, 0xFFFF), 0);
      gemv_bf16(dx.data() + r * k, 1, k, dw.data(), n, one.data(), stream_);
      const auto row = one.download(n);
      EXPECT_EQ(std::memcmp(row.data(), all.data() + r * n, n * 2), 0) << "k=" << k << " row " << r;
    }
  }
}

TEST_F(GemvBf16Test, NanPropagates) {
  for (int64_t k : {int64_t{512}, int64_t{36}}) {
    const int64_t m = 4, n = 40;
    auto x = random_bf16(m * k, 1.0f, rng_);
    auto w = random_bf16(n * k, 0.05f, rng_);
    x[2 * k + 5] = kBf16Nan;      // row 2 of x: every output of row 2
    w[7 * k + k - 1] = kBf16Nan;  // feature 7: its output in every row
    Dev dx(x, 0), dw(w, 0), dy(std::vector<uint16_t>(m * n, 0), 0);
    gemv_bf16(dx.data(), m, k, dw.data(), n, dy.data(), stream_);
    const auto y = decode(dy.download(m * n));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const bool nan_expected = r == 2 || j == 7;
        EXPECT_EQ(std::isnan(y[r * n + j]), nan_expected)
            << "k=" << k << " row " << r << " feature " << j;
      }
    }
  }
}

// gemv_bf16_silu(gate_up) == gemv_bf16(silu_and_mul(gate_up)) bit for bit; and near the CPU.
TEST_F(GemvBf16Test, FusedSiluHasTheBitsOfSiluAndMulThenGemv) {
  for (int64_t k : {int64_t{1024}, int64_t{200}, int64_t{36}}) {  // 36: the fallback kernel
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}}) {
      const int64_t n = 72;
      const auto gu = random_bf16(m * 2 * k, 1.5f, rng_);
      const auto w = random_bf16(n * k, 0.05f, rng_);
      const auto b = random_bf16(n, 0.5f, rng_);
      Dev dgu(gu, 0), dw(w, 0), db(b, 0), act(std::vector<uint16_t>(m * k, 0xFFFF), 0);
      Dev fused(std::vector<uint16_t>(m * n, 0xFFFF), 0),
          plain(std::vector<uint16_t>(m * n, 0xFFFF), 0);
      gemv_bf16_silu(dgu.data(), m, k, dw.data(), n, fused.data(), stream_, db.data());
      silu_and_mul(dgu.data(), m, k, act.data(), stream_);
      gemv_bf16(act.data(), m, k, dw.data(), n, plain.data(), stream_, db.data());
      const auto f = fused.download(m * n), p = plain.download(m * n);
      const std::string what = "m=" + std::to_string(m) + " k=" + std::to_string(k);
      EXPECT_EQ(std::memcmp(f.data(), p.data(), f.size() * 2), 0) << what;
      // Against the CPU: the activation in fp32 from std::exp (a bf16 rounding may land one ulp
      // apart from the GPU's: 2^-8 relative per element, so 2^-8 · Σ|a·w| on y).
      std::vector<float> a(m * k);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t i = 0; i < k; ++i) {
          const float g = bf16_to_f32(gu[r * 2 * k + i]), u = bf16_to_f32(gu[r * 2 * k + k + i]);
          a[r * k + i] = bf16_to_f32(f32_to_bf16(g / (1.0f + std::exp(-g)) * u));
        }
      }
      const std::vector<float> bias = decode(b);
      const Reference ref = reference(a, m, k, w, n, &bias);
      const auto got = decode(f);
      for (size_t i = 0; i < got.size(); ++i) {
        const double tol = tolerance(ref, i, k) + std::ldexp(1.0, -8) * ref.mag[i];
        ASSERT_LE(std::fabs(got[i] - ref.y[i]), tol) << what << " element " << i;  // NaN fails
      }
    }
  }
}

// gemv_bf16_add's residual == fused_add_rmsnorm's residual after gemv_bf16, bit for bit.
TEST_F(GemvBf16Test, ResidualEpilogueHasTheBitsOfFusedAddRmsnorm) {
  for (int64_t k : {int64_t{512}, int64_t{36}}) {
    const int64_t m = 5, n = 256;
    const auto x = random_bf16(m * k, 1.0f, rng_);
    const auto w = random_bf16(n * k, 0.05f, rng_);
    const auto res = random_bf16(m * n, 2.0f, rng_);
    const std::vector<float> norm_w(n, 1.0f);
    DeviceBuffer<float> dnorm{std::span<const float>(norm_w)};
    Dev dx(x, 0), dw(w, 0), fused_res(res, 0), ref_res(res, 0),
        y(std::vector<uint16_t>(m * n, 0xFFFF), 0);
    gemv_bf16_add(dx.data(), m, k, dw.data(), n, fused_res.data(), stream_);
    gemv_bf16(dx.data(), m, k, dw.data(), n, y.data(), stream_);
    fused_add_rmsnorm(y.data(), ref_res.data(), dnorm.data(), 1e-6f, m, n, stream_);
    const auto a = fused_res.download(m * n), b = ref_res.download(m * n);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 2), 0) << "k=" << k;
    EXPECT_NE(std::memcmp(a.data(), res.data(), a.size() * 2), 0)
        << "k=" << k << ": residual unchanged";
  }
}

// gemv_bf16_(silu_)add_rmsnorm == gemv_bf16(_silu) then fused_add_rmsnorm, bit for bit, on the
// residual and the normed rows; norm widths that give rmsnorm 32, 512 and 1024 threads (the fused
// kernel reproduces its reduction tree) and 2 packs per thread; twice per case with the same
// counter (it must be left at zero); the fallback (k % 8 != 0: GEMV, then rmsnorm) too.
TEST_F(GemvBf16Test, FusedAddRmsnormHasTheBitsOfGemvThenFusedAddRmsnorm) {
  DeviceBuffer<uint32_t> counter(1);
  LOWBIT_CUDA_CHECK(cudaMemset(counter.data(), 0, sizeof(uint32_t)));
  std::normal_distribution<float> around_one(1.0f, 0.1f);
  for (bool silu : {false, true}) {
    for (int64_t n : {int64_t{4096}, int64_t{256}, int64_t{12288}, int64_t{200}}) {
      for (int64_t k : {int64_t{512}, int64_t{36}}) {
        for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{8}}) {
          for (int repeat = 0; repeat < 2; ++repeat) {
            const auto x = random_bf16(m * (silu ? 2 * k : k), 1.0f, rng_);
            const auto w = random_bf16(n * k, 0.05f, rng_);
            const auto res = random_bf16(m * n, 1.0f, rng_);
            std::vector<float> nw(n);
            for (float& v : nw) v = around_one(rng_);
            DeviceBuffer<float> dnw{std::span<const float>(nw)};
            const std::vector<uint16_t> poison(m * n, 0xFFFF);
            Dev dx(x, 0), dw(w, 0), res_a(res, 0), res_b(res, 0), y(poison, 0), out(poison, 0);
            if (silu) {
              gemv_bf16_silu(dx.data(), m, k, dw.data(), n, y.data(), stream_);
            } else {
              gemv_bf16(dx.data(), m, k, dw.data(), n, y.data(), stream_);
            }
            fused_add_rmsnorm(y.data(), res_a.data(), dnw.data(), 1e-5f, m, n, stream_);
            const GemvResidualNorm norm{res_b.data(), dnw.data(), 1e-5f, out.data(),
                                        counter.data()};
            const int64_t stride = silu ? 2 * k : k;
            EXPECT_EQ(gemv_bf16_rmsnorm_fused(dx.data(), stride, k, dw.data(), n, norm),
                      k % 8 == 0);
            if (silu) {
              gemv_bf16_silu_add_rmsnorm(dx.data(), m, k, dw.data(), n, norm, stream_);
            } else {
              gemv_bf16_add_rmsnorm(dx.data(), m, k, dw.data(), n, norm, stream_);
            }
            const std::string what = std::string(silu ? "silu " : "") + "m=" + std::to_string(m) +
                                     " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                     " call " + std::to_string(repeat);
            const auto ra = res_a.download(m * n), rb = res_b.download(m * n);
            const auto ya = y.download(m * n), yb = out.download(m * n);
            EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * 2), 0) << what << ": residual";
            EXPECT_EQ(std::memcmp(ya.data(), yb.data(), ya.size() * 2), 0) << what << ": normed";
            const std::vector<uint32_t> left = counter.download();
            EXPECT_EQ(left[0], 0u) << what << ": counter not reset";
          }
        }
      }
    }
  }
}

TEST_F(GemvBf16Test, RejectsBadArgumentsAndSkipsEmptyBatches) {
  Dev dx(random_bf16(16 * 64, 1.0f, rng_), 0), dw(random_bf16(64 * 64, 1.0f, rng_), 0);
  Dev dy(std::vector<uint16_t>(16 * 64, 0xFFFF), 0);
  EXPECT_THROW(gemv_bf16(dx.data(), 9, 64, dw.data(), 64, dy.data(), stream_), InvalidArgument);
  EXPECT_THROW(gemv_bf16(dx.data(), 1, 0, dw.data(), 64, dy.data(), stream_), InvalidArgument);
  EXPECT_THROW(gemv_bf16(dx.data(), 1, 64, nullptr, 64, dy.data(), stream_), InvalidArgument);
  gemv_bf16(dx.data(), 0, 64, dw.data(), 64, dy.data(), stream_);
  const auto y = dy.download(16 * 64);
  for (uint16_t v : y) ASSERT_EQ(v, 0xFFFF) << "m = 0 wrote something";
}

// ---- Fused RoPE + KV write ----------------------------------------------------------------

struct RopeCase {
  int heads, kv_heads, head_dim, rotary_dim;
  bool fused_qkv;  // q, k, v as column slices of one [rows, q + 2 kv] buffer
  KvCacheDtype dtype;
  int scale_count;
};

class RopeKvWriteTest : public GemvBf16Test {
 protected:
  void run(const RopeCase& c) {
    const int64_t rows = 7, max_pos = 64;
    const int block_size = 16, num_blocks = 6;
    const int64_t q_width = int64_t{c.heads} * c.head_dim,
                  kv_width = int64_t{c.kv_heads} * c.head_dim;
    const int64_t stride = c.fused_qkv ? q_width + 2 * kv_width : 0;
    const int64_t per_row = q_width + 2 * kv_width;
    const auto qkv = random_bf16(rows * per_row, 1.0f, rng_);
    // Real cos / sin rows of random angles; positions include two that must be clamped.
    std::uniform_real_distribution<float> angle(-3.14f, 3.14f);
    std::vector<float> cs(max_pos * c.rotary_dim);
    for (int64_t p = 0; p < max_pos; ++p) {
      for (int j = 0; j < c.rotary_dim / 2; ++j) {
        const float a = angle(rng_);
        cs[p * c.rotary_dim + j] = std::cos(a);
        cs[p * c.rotary_dim + c.rotary_dim / 2 + j] = std::sin(a);
      }
    }
    const std::vector<int32_t> pos = {0, 5, 63, -3, 70, 17, 40};
    const std::vector<int32_t> slots = {3, 17, -1, 95, 40, 0, 64};
    const std::vector<float> scales = {0.05f, 0.02f, 0.1f, 0.03f, 0.07f, 0.04f, 0.2f, 0.01f};
    DeviceBuffer<float> dcs{std::span<const float>(cs)};
    DeviceBuffer<int32_t> dpos{std::span<const int32_t>(pos)},
        dslots{std::span<const int32_t>(slots)};
    DeviceBuffer<float> ks{
        std::span<const float>(scales.data(), static_cast<size_t>(c.scale_count))};
    DeviceBuffer<float> vs{std::span<const float>(scales.data() + 8 - c.scale_count,
                                                  static_cast<size_t>(c.scale_count))};
    const size_t elem = c.dtype == KvCacheDtype::BF16 ? 2 : 1;
    const size_t pool = static_cast<size_t>(num_blocks) * block_size * kv_width * elem;
    struct Side {
      Dev qkv;
      DeviceBuffer<uint8_t> kc, vc;
      PagedKvCache cache;
    };
    auto make = [&](Side& s) {
      LOWBIT_CUDA_CHECK(cudaMemset(s.kc.data(), 0x5A, pool));
      LOWBIT_CUDA_CHECK(cudaMemset(s.vc.data(), 0x5A, pool));
      s.cache.k_blocks = s.kc.data();
      s.cache.v_blocks = s.vc.data();
      s.cache.dtype = c.dtype;
      s.cache.block_size = block_size;
      s.cache.kv_heads = c.kv_heads;
      s.cache.head_dim = c.head_dim;
      s.cache.k_scale = ks.data();
      s.cache.v_scale = vs.data();
      s.cache.scale_count = c.scale_count;
    };
    Side a{Dev(qkv, 0), DeviceBuffer<uint8_t>(pool), DeviceBuffer<uint8_t>(pool), {}};
    Side b{Dev(qkv, 0), DeviceBuffer<uint8_t>(pool), DeviceBuffer<uint8_t>(pool), {}};
    make(a);
    make(b);
    // Unfused layout: q [rows, q_width], then k, then v, each dense.
    auto views = [&](Side& s, uint16_t*& q, uint16_t*& k, uint16_t*& v) {
      q = s.qkv.data();
      k = c.fused_qkv ? q + q_width : q + rows * q_width;
      v = c.fused_qkv ? k + kv_width : k + rows * kv_width;
    };
    uint16_t *qa, *ka, *va, *qb, *kb, *vb;
    views(a, qa, ka, va);
    views(b, qb, kb, vb);
    rope_neox(qa, ka, dpos.data(), rows, c.heads, c.kv_heads, c.head_dim, c.rotary_dim, dcs.data(),
              max_pos, stream_, stride, stride);
    write_kv_paged(reinterpret_cast<const __nv_bfloat16*>(ka), stride,
                   reinterpret_cast<const __nv_bfloat16*>(va), stride, dslots.data(), rows, a.cache,
                   stream_);
    rope_neox_write_kv(qb, stride, kb, stride, vb, stride, dpos.data(), dslots.data(), rows,
                       c.heads, c.rotary_dim, dcs.data(), max_pos, b.cache, stream_);
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::string what = "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
                             " head_dim " + std::to_string(c.head_dim) + " rotary " +
                             std::to_string(c.rotary_dim) + (c.fused_qkv ? " fused" : "") +
                             (c.dtype == KvCacheDtype::BF16 ? " bf16" : " fp8");
    const auto qkv_a = a.qkv.download(qkv.size()), qkv_b = b.qkv.download(qkv.size());
    EXPECT_EQ(std::memcmp(qkv_a.data(), qkv_b.data(), qkv.size() * 2), 0) << what << ": q/k/v rows";
    EXPECT_NE(std::memcmp(qkv_a.data(), qkv.data(), qkv.size() * 2), 0)
        << what << ": nothing rotated";
    EXPECT_TRUE(a.kc.download() == b.kc.download()) << what << ": K cache";
    EXPECT_TRUE(a.vc.download() == b.vc.download()) << what << ": V cache";
    // Six rows have a slot: nearly all their bytes differ from the fill.
    size_t changed = 0;
    for (uint8_t byte : b.kc.download()) changed += byte != 0x5A;
    EXPECT_GT(static_cast<int64_t>(changed), 6 * kv_width * static_cast<int64_t>(elem) / 2)
        << what << ": the cache was not written";
  }
};

TEST_F(RopeKvWriteTest, HasTheBitsOfRopeNeoxThenWriteKvPaged) {
  run({4, 2, 128, 128, true, KvCacheDtype::BF16, 1});  // Llama layout, fused qkv, 8-wide path
  run({4, 2, 64, 64, false, KvCacheDtype::BF16, 1});   // separate q, k, v
  run({6, 3, 64, 32, true, KvCacheDtype::BF16, 1});    // partial rotary: the rest passes through
  run({2, 1, 40, 36, false, KvCacheDtype::BF16, 1});   // half = 18: the scalar rotation
  run({4, 2, 128, 128, true, KvCacheDtype::FP8_E4M3, 1});  // fp8 cache, per-tensor scales
  run({8, 4, 64, 64, false, KvCacheDtype::FP8_E4M3, 4});   // fp8 cache, per-head scales
}

}  // namespace
}  // namespace lowbit::kernels::cuda
