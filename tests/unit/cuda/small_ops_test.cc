// The GPU decoder small ops against the CPU reference kernels (kernels/ops.h) on bf16-rounded
// inputs: RMSNorm, fused add + RMSNorm, SiLU-and-mul, NeoX rotary embedding, embedding gather and
// the residual add, each on the 16-byte vector path (sizes multiple of 8) and the scalar path.
//
// Tolerances. The GPU computes in fp32 and rounds each output to bf16 once (round to nearest
// even: ≤ 2^-9 relative); the reference is the unrounded fp32 result of the same formula. The
// fp32 parts differ only by summation order, rsqrtf / expf vs std:: (a few ulp) and fused
// multiply-adds, all ≤ ~2^-20 relative. So |gpu − ref| ≤ 2^-8 · |ref| holds with room; rotary
// embedding adds an absolute term for cancellation (a·c − b·s near 0: fp32 error ≤ 2^-22 (|a|+|b|)).
// Ops with no arithmetic (gather) or one rounding of an exact sum (add, the residual of the fused
// norm) are compared bit for bit.
#include "kernels/cuda/small_ops.h"

#include <cuda_runtime.h>
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
#include "kernels/ops.h"
#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit::kernels::cuda {
namespace {

const double kBf16Rel = std::ldexp(1.0, -8);

std::vector<uint16_t> random_bf16(size_t count, float mean, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> dist(mean, sigma);
  std::vector<uint16_t> bits(count);
  for (auto& b : bits) b = f32_to_bf16(dist(rng));
  return bits;
}

std::vector<float> decode(std::span<const uint16_t> bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

std::vector<uint16_t> encode(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = f32_to_bf16(values[i]);
  return out;
}

// A device copy whose data starts `offset` elements into its allocation (offset 1: 2-byte
// aligned only, which forces the scalar path).
struct Dev {
  DeviceBuffer<uint16_t> buffer;
  int64_t offset = 0;
  Dev(const std::vector<uint16_t>& host, int64_t off) : buffer(host.size() + off), offset(off) {
    LOWBIT_CUDA_CHECK(cudaMemset(buffer.data(), 0xFF, buffer.bytes()));  // NaN poison
    LOWBIT_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  }
  uint16_t* data() { return buffer.data() + offset; }
  std::vector<uint16_t> download() const {
    std::vector<uint16_t> all = buffer.download();
    return {all.begin() + offset, all.end()};
  }
};

// got (bf16) vs ref (fp32): |got − ref| ≤ 2^-8 |ref| + abs[i] (see the file comment).
void expect_bf16_close(const std::vector<uint16_t>& got, const std::vector<float>& ref,
                       const std::vector<float>& abs_tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float g = bf16_to_f32(got[i]);
    const double tol = kBf16Rel * std::fabs(ref[i]) + (abs_tol.empty() ? 1e-30 : abs_tol[i]);
    if (!(std::fabs(double(g) - ref[i]) <= tol) && ++bad <= 5) {  // NaN (poison) fails too
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

class SmallOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!device_available()) GTEST_SKIP() << "no CUDA device";
    LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void sync() { LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream_ = nullptr;
  std::mt19937 rng_{5};
};

// dim 4096 / 384: vector path; 100: scalar (not a multiple of 8); offset 1: scalar (misaligned).
struct RowCase {
  int64_t rows, dim, offset;
};
const std::vector<RowCase> kRowCases = {{1, 4096, 0}, {7, 384, 0}, {3, 100, 0}, {5, 384, 1}};

TEST_F(SmallOpsTest, RmsNormMatchesReference) {
  for (const RowCase& c : kRowCases) {
    const auto x = random_bf16(c.rows * c.dim, 0.3f, 2.0f, rng_);  // non-zero mean: not centered
    std::vector<float> weight = decode(random_bf16(c.dim, 1.0f, 0.2f, rng_));
    DeviceBuffer<float> dw{std::span<const float>(weight)};
    Dev dx(x, c.offset);
    Dev dout(std::vector<uint16_t>(x.size(), 0xFFFF), c.offset);
    rmsnorm(dx.data(), dw.data(), 1e-5f, c.rows, c.dim, dout.data(), stream_);
    // In place as well: out == x.
    Dev dinplace(x, c.offset);
    rmsnorm(dinplace.data(), dw.data(), 1e-5f, c.rows, c.dim, dinplace.data(), stream_);
    sync();
    const std::vector<float> xf = decode(x);
    std::vector<float> ref(x.size());
    kernels::rmsnorm(xf.data(), weight.data(), 1e-5f, c.rows, c.dim, ref.data());
    const std::string what = "rmsnorm rows=" + std::to_string(c.rows) + " dim=" +
                             std::to_string(c.dim) + " offset=" + std::to_string(c.offset);
    expect_bf16_close(dout.download(), ref, {}, what);
    EXPECT_EQ(dinplace.download(), dout.download()) << what << " in place";
  }
}

TEST_F(SmallOpsTest, FusedAddRmsNormMatchesReference) {
  for (const RowCase& c : kRowCases) {
    const auto x = random_bf16(c.rows * c.dim, 0.0f, 1.0f, rng_);
    const auto residual = random_bf16(c.rows * c.dim, 0.5f, 3.0f, rng_);
    std::vector<float> weight = decode(random_bf16(c.dim, 1.0f, 0.2f, rng_));
    DeviceBuffer<float> dw{std::span<const float>(weight)};
    Dev dx(x, c.offset), dres(residual, c.offset);
    fused_add_rmsnorm(dx.data(), dres.data(), dw.data(), 1e-6f, c.rows, c.dim, stream_);
    sync();
    // Reference: the residual sum rounded to bf16 (exact fp32 sum of two bf16, one rounding),
    // then the fp32 RMSNorm of that rounded residual.
    std::vector<float> sum = decode(residual);
    const std::vector<float> xf = decode(x);
    kernels::add_inplace(sum.data(), xf.data(), static_cast<int64_t>(sum.size()));
    const std::vector<uint16_t> want_residual = encode(sum);
    const std::vector<float> rounded = decode(want_residual);
    std::vector<float> ref(x.size());
    kernels::rmsnorm(rounded.data(), weight.data(), 1e-6f, c.rows, c.dim, ref.data());
    const std::string what = "fused_add_rmsnorm rows=" + std::to_string(c.rows) + " dim=" +
                             std::to_string(c.dim) + " offset=" + std::to_string(c.offset);
    EXPECT_EQ(dres.download(), want_residual) << what << ": residual must be bit-exact";
    expect_bf16_close(dx.download(), ref, {}, what);
  }
}

TEST_F(SmallOpsTest, SiluAndMulMatchesReference) {
  // n = 14336: Llama-8B's intermediate size; 64: one small vector row; 13: scalar path.
  for (auto [rows, n, offset] : std::vector<RowCase>{{1, 14336, 0}, {6, 64, 0}, {4, 13, 0},
                                                     {3, 64, 1}}) {
    const auto gate_up = random_bf16(rows * 2 * n, 0.0f, 3.0f, rng_);  // covers silu's tails
    Dev dgu(gate_up, offset);
    Dev dout(std::vector<uint16_t>(rows * n, 0xFFFF), offset);
    silu_and_mul(dgu.data(), rows, n, dout.data(), stream_);
    sync();
    const std::vector<float> guf = decode(gate_up);
    std::vector<float> ref(rows * n);
    kernels::gated_activation(guf.data(), 2 * n, guf.data() + n, 2 * n, rows, n, Activation::SILU,
                              ref.data());
    expect_bf16_close(dout.download(), ref, {},
                      "silu_and_mul rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
                          " offset=" + std::to_string(offset));
  }
}

// cos/sin cache as HF Llama builds it: θ_j = base^(-2j/rotary_dim), row p = [cos(pθ)…, sin(pθ)…]
// times `scaling`.
std::vector<float> cos_sin_cache(int64_t max_pos, int rotary_dim, float scaling) {
  const int half = rotary_dim / 2;
  std::vector<float> cache(max_pos * rotary_dim);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int j = 0; j < half; ++j) {
      const double theta = std::pow(10000.0, -2.0 * j / rotary_dim);
      cache[p * rotary_dim + j] = static_cast<float>(std::cos(p * theta) * scaling);
      cache[p * rotary_dim + half + j] = static_cast<float>(std::sin(p * theta) * scaling);
    }
  }
  return cache;
}

struct RopeCase {
  int64_t rows;
  int heads, kv_heads, head_dim, rotary_dim;
  bool fused_qkv;  // q and k as column slices of one [rows, (heads + 2 kv_heads) · head_dim] buffer
};

TEST_F(SmallOpsTest, RopeNeoxMatchesReference) {
  const std::vector<RopeCase> cases = {
      {1, 32, 8, 128, 128, false},  // Llama-8B decode: vector path
      {9, 4, 2, 64, 32, true},      // partial rotary, strided q/k inside a fused qkv row
      {5, 3, 1, 24, 24, false},     // half = 12: scalar path
      {4, 6, 2, 64, 64, true},      // ref-llama-19m's heads
  };
  const int64_t max_pos = 300;
  for (const RopeCase& c : cases) {
    const int64_t q_width = int64_t(c.heads) * c.head_dim;
    const int64_t k_width = int64_t(c.kv_heads) * c.head_dim;
    const int64_t row = c.fused_qkv ? q_width + 2 * k_width : q_width + k_width;
    const auto buffer = random_bf16(c.rows * row, 0.0f, 1.0f, rng_);
    std::vector<int32_t> positions(c.rows);
    std::uniform_int_distribution<int32_t> pos_dist(0, max_pos - 1);
    for (auto& p : positions) p = pos_dist(rng_);
    positions[0] = static_cast<int32_t>(max_pos - 1);  // the last cache row
    const std::vector<float> cache = cos_sin_cache(max_pos, c.rotary_dim, 0.9f);

    Dev dbuf(buffer, 0);
    DeviceBuffer<int32_t> dpos{std::span<const int32_t>(positions)};
    DeviceBuffer<float> dcache{std::span<const float>(cache)};
    // Fused: q at column 0, k after it, row stride = the whole qkv row. Packed: [rows, q] then
    // [rows, k] back to back, strides 0 (= packed).
    uint16_t* q = dbuf.data();
    uint16_t* k = c.fused_qkv ? q + q_width : q + c.rows * q_width;
    rope_neox(q, k, dpos.data(), c.rows, c.heads, c.kv_heads, c.head_dim, c.rotary_dim,
              dcache.data(), max_pos, stream_, c.fused_qkv ? row : 0, c.fused_qkv ? row : 0);
    sync();

    std::vector<float> ref = decode(buffer);
    const std::vector<float> before = ref;
    const int half = c.rotary_dim / 2;
    std::vector<float> cos(c.rows * half), sin(c.rows * half);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int j = 0; j < half; ++j) {
        cos[r * half + j] = cache[positions[r] * c.rotary_dim + j];
        sin[r * half + j] = cache[positions[r] * c.rotary_dim + half + j];
      }
    }
    float* rq = ref.data();
    float* rk = c.fused_qkv ? rq + q_width : rq + c.rows * q_width;
    const int64_t q_stride = c.fused_qkv ? row : q_width;
    const int64_t k_stride = c.fused_qkv ? row : k_width;
    kernels::rope_apply(rq, c.rows, q_stride, c.heads, c.head_dim, c.rotary_dim, cos.data(), sin.data());
    kernels::rope_apply(rk, c.rows, k_stride, c.kv_heads, c.head_dim, c.rotary_dim, cos.data(),
                        sin.data());
    // Absolute term for cancellation in a·c − b·s: fp32 error ≤ ~3·2^-24 (|a| + |b|) with |c|,
    // |s| ≤ 1, and |a| + |b| ≤ 2 max|input|: allow 2^-20 · max|input| (over 2× that).
    float max_in = 0.0f;
    for (float v : before) max_in = std::max(max_in, std::fabs(v));
    std::vector<float> abs_tol(ref.size(), static_cast<float>(std::ldexp(double(max_in), -20)));
    const std::vector<uint16_t> got = dbuf.download();
    const std::string what = "rope rows=" + std::to_string(c.rows) + " heads=" +
                             std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
                             " head_dim=" + std::to_string(c.head_dim) +
                             " rotary=" + std::to_string(c.rotary_dim);
    expect_bf16_close(got, ref, abs_tol, what);
    // Everything outside the rotated halves (pass-through dims, the v columns) is untouched.
    int changed = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (ref[i] == before[i] && got[i] != buffer[i]) ++changed;
    }
    EXPECT_EQ(changed, 0) << what << ": elements the reference leaves alone changed";
  }
}

TEST_F(SmallOpsTest, RopeClampsPositionsOutsideTheCache) {
  // Position -3 reads cache row 0, position max_pos + 5 the last row: no out-of-bounds read.
  const int heads = 2, head_dim = 16, max_pos = 10;
  const auto q = random_bf16(4 * heads * head_dim, 0.0f, 1.0f, rng_);
  const std::vector<float> cache = cos_sin_cache(max_pos, head_dim, 1.0f);
  DeviceBuffer<float> dcache{std::span<const float>(cache)};
  const std::vector<int32_t> bad = {-3, max_pos + 5, 0, max_pos - 1};
  const std::vector<int32_t> clamped = {0, max_pos - 1, 0, max_pos - 1};
  DeviceBuffer<int32_t> dbad{std::span<const int32_t>(bad)}, dclamped{std::span<const int32_t>(clamped)};
  Dev a(q, 0), b(q, 0);
  rope_neox(a.data(), nullptr, dbad.data(), 4, heads, 0, head_dim, head_dim, dcache.data(), max_pos,
            stream_);
  rope_neox(b.data(), nullptr, dclamped.data(), 4, heads, 0, head_dim, head_dim, dcache.data(),
            max_pos, stream_);
  sync();
  EXPECT_EQ(a.download(), b.download());
  EXPECT_NE(a.download(), q);  // it did rotate
}

TEST_F(SmallOpsTest, EmbeddingGatherMatchesReferenceBitForBit) {
  const int64_t vocab = 1000;
  for (int64_t hidden : {384, 100}) {  // vector and scalar paths
    auto table = random_bf16(vocab * hidden, 0.0f, 0.02f, rng_);
    std::vector<int32_t> ids(37);
    std::uniform_int_distribution<int32_t> id_dist(0, vocab - 1);
    for (auto& id : ids) id = id_dist(rng_);
    ids[0] = 0;
    ids[1] = static_cast<int32_t>(vocab - 1);
    Dev dtable(table, 0);
    DeviceBuffer<int32_t> dids{std::span<const int32_t>(ids)};
    Dev dout(std::vector<uint16_t>(ids.size() * hidden, 0xFFFF), 0);
    DeviceBuffer<int32_t> derr(kEmbeddingErrorWords);
    LOWBIT_CUDA_CHECK(cudaMemset(derr.data(), 0, derr.bytes()));
    embedding_gather(dtable.data(), vocab, hidden, dids.data(), static_cast<int64_t>(ids.size()),
                     dout.data(), derr.data(), stream_);
    EXPECT_NO_THROW(check_embedding_error(derr.data(), vocab, stream_));
    const Tensor t = Tensor::view(DType::BF16, {vocab, hidden}, table.data(), nullptr);
    std::vector<float> ref(ids.size() * hidden);
    kernels::embedding_lookup(t, ids.data(), static_cast<int64_t>(ids.size()), 1.0f, ref.data());
    EXPECT_EQ(dout.download(), encode(ref)) << "hidden=" << hidden;
  }
}

TEST_F(SmallOpsTest, EmbeddingGatherFlagsBadIdsWithoutCrashing) {
  const int64_t vocab = 50, hidden = 64;
  auto table = random_bf16(vocab * hidden, 0.0f, 1.0f, rng_);
  const std::vector<int32_t> ids = {7, -1, 50, 49};  // rows 1 and 2 are out of range
  Dev dtable(table, 0);
  DeviceBuffer<int32_t> dids{std::span<const int32_t>(ids)};
  Dev dout(std::vector<uint16_t>(ids.size() * hidden, 0xFFFF), 0);
  DeviceBuffer<int32_t> derr(kEmbeddingErrorWords);
  LOWBIT_CUDA_CHECK(cudaMemset(derr.data(), 0, derr.bytes()));
  embedding_gather(dtable.data(), vocab, hidden, dids.data(), 4, dout.data(), derr.data(), stream_);
  sync();
  const std::vector<int32_t> words = derr.download();
  // Either bad row may win the race to record itself; the id must be that row's.
  ASSERT_TRUE(words[0] == 2 || words[0] == 3) << words[0];
  EXPECT_EQ(words[1], ids[words[0] - 1]);
  const std::vector<uint16_t> out = dout.download();
  for (int64_t i = 0; i < hidden; ++i) {
    EXPECT_EQ(out[0 * hidden + i], table[7 * hidden + i]);
    EXPECT_EQ(out[1 * hidden + i], 0) << "bad row 1 must be zeros";
    EXPECT_EQ(out[2 * hidden + i], 0) << "bad row 2 must be zeros";
    EXPECT_EQ(out[3 * hidden + i], table[49 * hidden + i]);
  }
  try {
    check_embedding_error(derr.data(), vocab, stream_);
    ADD_FAILURE() << "check_embedding_error did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_embedding_error(derr.data(), vocab, stream_));  // cleared by the throw
  // Without an error buffer the kernel still writes zeros and does not fault.
  embedding_gather(dtable.data(), vocab, hidden, dids.data(), 4, dout.data(), nullptr, stream_);
  sync();
}

TEST_F(SmallOpsTest, AddIsBitExact) {
  for (auto [n, offset] : std::vector<std::pair<int64_t, int64_t>>{{3 * 4096, 0}, {1001, 0}, {64, 1}}) {
    const auto y = random_bf16(n, 0.0f, 4.0f, rng_);
    const auto x = random_bf16(n, 0.0f, 1.0f, rng_);
    Dev dy(y, offset), dx(x, offset), dself(y, offset);
    add(dy.data(), dx.data(), n, stream_);
    add(dself.data(), dself.data(), n, stream_);  // x aliasing y: doubling
    sync();
    std::vector<float> sum = decode(y);
    const std::vector<float> xf = decode(x);
    kernels::add_inplace(sum.data(), xf.data(), n);
    EXPECT_EQ(dy.download(), encode(sum)) << "n=" << n;
    std::vector<float> twice = decode(y);
    for (float& v : twice) v *= 2.0f;
    EXPECT_EQ(dself.download(), encode(twice)) << "n=" << n;
  }
}

// Argument errors are found on the host before any launch: these run without a GPU too.
TEST(SmallOpsArguments, RejectedOnTheHost) {
  uint16_t* fake = reinterpret_cast<uint16_t*>(uintptr_t{256});  // never dereferenced
  const float* w = reinterpret_cast<const float*>(uintptr_t{256});
  const int32_t* pos = reinterpret_cast<const int32_t*>(uintptr_t{256});
  EXPECT_THROW(rmsnorm(fake, w, 1e-5f, -1, 64, fake, nullptr), InvalidArgument);
  EXPECT_THROW(rmsnorm(fake, w, 1e-5f, 1, 0, fake, nullptr), InvalidArgument);
  EXPECT_THROW(fused_add_rmsnorm(fake, fake, w, 1e-5f, 1, 64, nullptr), InvalidArgument);
  EXPECT_THROW(silu_and_mul(nullptr, 1, 64, fake, nullptr), InvalidArgument);
  EXPECT_THROW(rope_neox(fake, fake, pos, 1, 2, 1, 64, 63, w, 10, nullptr), InvalidArgument);
  EXPECT_THROW(rope_neox(fake, fake, pos, 1, 2, 1, 64, 128, w, 10, nullptr), InvalidArgument);
  EXPECT_THROW(rope_neox(fake, fake, pos, 1, 2, 1, 64, 64, w, 10, nullptr, 64), InvalidArgument);
  EXPECT_THROW(embedding_gather(fake, 0, 64, pos, 1, fake, nullptr, nullptr), InvalidArgument);
  EXPECT_THROW(add(fake, nullptr, 8, nullptr), InvalidArgument);
  EXPECT_THROW(add(fake, fake, -1, nullptr), InvalidArgument);
  // Zero rows is an empty batch: nothing runs, nothing throws.
  EXPECT_NO_THROW(rmsnorm(nullptr, nullptr, 1e-5f, 0, 64, nullptr, nullptr));
  EXPECT_NO_THROW(add(nullptr, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace lowbit::kernels::cuda
