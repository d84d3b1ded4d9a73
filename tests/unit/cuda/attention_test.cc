// GPU paged attention (kernels/cuda/attention.h) against the CPU reference kernels::attention_paged
// on the same values: bf16-rounded q/k/v, or for an fp8 cache the values the fp8 codes stand for
// (code · scale, the codes computed on the CPU with KvCacheQuantizer's rounding). The cache is
// filled through write_kv_paged, whose bytes are checked exactly first.
//
// Tolerance of an output element, from what the GPU rounds that the CPU does not: the softmax
// weights enter P·V as bf16 (relative error <= 2^-9 each, so the weighted sum moves by at most
// 2^-9 · max|v|) and the output is rounded to bf16 (<= 2^-9 · |o| <= 2^-9 · max|v|). Everything
// else is fp32 in a different order (~1e-6 relative). Bound: (2^-8 + 2^-12) · max|v|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/ops.h"

namespace lowbit::kernels::cuda {
namespace {

struct Scenario {
  int heads = 8, kv_heads = 2, head_dim = 128;
  int64_t window = 0;
  KvCacheDtype dtype = KvCacheDtype::BF16;
  bool per_head_scale = false;
  int block_size = 16;
  std::vector<int> contexts;  // cached positions per sequence (including the new ones)
  std::vector<int> queries;   // new tokens per sequence (decode: 1 each)
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }
};

std::vector<uint16_t> random_bf16(size_t n, float range, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-range, range);
  std::vector<uint16_t> out(n);
  for (uint16_t& x : out) x = f32_to_bf16(dist(rng));
  return out;
}

uint8_t cpu_fp8(float x, float s) { return f32_to_fp8_e4m3(std::clamp(x / s, -448.0f, 448.0f)); }

// One paged cache filled through write_kv_paged, its fp32 mirror for the CPU reference, and the
// queries.
class PagedRun {
 public:
  PagedRun(const Scenario& s, uint32_t seed) : s_(s), rng_(seed) {
    const int seqs = static_cast<int>(s.contexts.size());
    width_ = s.kv_heads * s.head_dim;
    for (int c : s.contexts) max_blocks_ = std::max(max_blocks_, (c + s.block_size - 1) / s.block_size);
    max_blocks_ = std::max(max_blocks_, 1);
    int needed = 0;
    for (int c : s.contexts) needed += (c + s.block_size - 1) / s.block_size;
    num_blocks_ = needed + 3;  // a few blocks nobody owns
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);  // sequences' blocks scattered over the pool
    tables_.assign(static_cast<size_t>(seqs) * max_blocks_, 0);
    size_t next = 0;
    for (int q = 0; q < seqs; ++q) {
      for (int b = 0; b * s.block_size < s.contexts[q]; ++b) tables_[q * max_blocks_ + b] = ids[next++];
    }
    make_scales();
    write_cache();
    make_queries();
  }

  PagedKvCache cache() {
    PagedKvCache c;
    c.k_blocks = k_cache_.data();
    c.v_blocks = v_cache_.data();
    c.dtype = s_.dtype;
    c.block_size = s_.block_size;
    c.kv_heads = s_.kv_heads;
    c.head_dim = s_.head_dim;
    if (fp8()) {
      c.k_scale = d_k_scale_.data();
      c.v_scale = d_v_scale_.data();
      c.scale_count = static_cast<int>(k_scale_.size());
    }
    return c;
  }
  PagedBatch batch() {
    PagedBatch b;
    b.num_seqs = static_cast<int>(s_.contexts.size());
    b.context_lens = d_ctx_.data();
    b.block_tables = d_tables_.data();
    b.max_blocks_per_seq = max_blocks_;
    b.max_context_len = *std::max_element(s_.contexts.begin(), s_.contexts.end());
    b.query_start = d_query_start_.data();
    b.max_query_len = *std::max_element(s_.queries.begin(), s_.queries.end());
    return b;
  }
  AttentionShape shape() const {
    AttentionShape a;
    a.heads = s_.heads;
    a.kv_heads = s_.kv_heads;
    a.head_dim = s_.head_dim;
    a.window = s_.window;
    a.scale = s_.scale();
    return a;
  }
  const __nv_bfloat16* q() const { return reinterpret_cast<const __nv_bfloat16*>(d_q_.data()); }
  int64_t q_stride() const { return q_stride_; }
  int64_t rows() const { return query_start_.back(); }
  int64_t out_width() const { return int64_t{s_.heads} * s_.head_dim; }

  // The CPU reference for every query row; a sequence without context gets zeros.
  std::vector<float> reference() const {
    std::vector<float> out(static_cast<size_t>(rows() * out_width()), 0.0f);
    for (size_t q = 0; q < s_.contexts.size(); ++q) {
      const int n = s_.queries[q], ctx = s_.contexts[q];
      if (ctx == 0) continue;
      std::vector<float> qf(static_cast<size_t>(n * out_width()));
      for (int i = 0; i < n; ++i) {
        for (int64_t e = 0; e < out_width(); ++e) {
          qf[i * out_width() + e] = bf16_to_f32(q_host_[(query_start_[q] + i) * q_stride_ + e]);
        }
      }
      AttentionShape a = shape();
      a.queries = n;
      a.past = ctx - n;
      const KvPages pages{k_ref_.data(), v_ref_.data(), tables_.data() + q * max_blocks_, s_.block_size};
      attention_paged(qf.data(), pages, a, out.data() + query_start_[q] * out_width());
    }
    return out;
  }
  float max_abs_v() const {
    float m = 0.0f;
    for (float x : v_ref_) m = std::max(m, std::fabs(x));
    return m;
  }

  DeviceBuffer<uint8_t>& k_cache() { return k_cache_; }
  DeviceBuffer<uint8_t>& v_cache() { return v_cache_; }
  const std::vector<uint8_t>& expected_k_bytes() const { return k_bytes_; }
  const std::vector<uint8_t>& expected_v_bytes() const { return v_bytes_; }

 private:
  bool fp8() const { return s_.dtype == KvCacheDtype::FP8_E4M3; }
  size_t elem() const { return fp8() ? 1 : 2; }

  void make_scales() {
    if (!fp8()) return;
    const int count = s_.per_head_scale ? s_.kv_heads : 1;
    for (int h = 0; h < count; ++h) {
      // |k| <= 1 (a few at 3) over scales near 1/300: codes up to ~450 (some clamped at 448),
      // down into the e4m3 subnormals for the small values.
      k_scale_.push_back(1.0f / (250.0f + 40.0f * h));
      v_scale_.push_back(1.0f / (300.0f + 25.0f * h));
    }
    d_k_scale_ = DeviceBuffer<float>(std::span<const float>(k_scale_));
    d_v_scale_ = DeviceBuffer<float>(std::span<const float>(v_scale_));
  }

  // Every cached position's k and v as fused rows [k | v] (stride 2·width), in sequence order,
  // with padding rows (slot -1) between sequences; one write_kv_paged call.
  void write_cache() {
    std::vector<int32_t> slots;
    for (size_t q = 0; q < s_.contexts.size(); ++q) {
      for (int j = 0; j < s_.contexts[q]; ++j) {
        slots.push_back(tables_[q * max_blocks_ + j / s_.block_size] * s_.block_size + j % s_.block_size);
      }
      slots.push_back(-1);
    }
    const size_t rows = slots.size();
    std::vector<uint16_t> kv = random_bf16(rows * 2 * width_, 1.0f, rng_);
    // Outliers that fp8 clamps at 448 (k: ±3 over scales ~1/250; v: ±1.5 over ~1/300).
    for (size_t i = 0; i < kv.size(); i += 97) {
      const float big = i % (2 * width_) < static_cast<size_t>(width_) ? 3.0f : 1.5f;
      kv[i] = f32_to_bf16(i % 2 ? big : -big);
    }
    const size_t pool = static_cast<size_t>(num_blocks_) * s_.block_size * width_;
    k_ref_.assign(pool, 0.0f);
    v_ref_.assign(pool, 0.0f);
    k_bytes_.assign(pool * elem(), 0x5A);  // unwritten slots keep this pattern
    v_bytes_.assign(pool * elem(), 0x5A);
    for (size_t r = 0; r < rows; ++r) {
      if (slots[r] < 0) continue;
      for (int e = 0; e < width_; ++e) {
        const size_t at = static_cast<size_t>(slots[r]) * width_ + e;
        store(kv[r * 2 * width_ + e], at, e, k_scale_, k_ref_, k_bytes_);
        store(kv[r * 2 * width_ + width_ + e], at, e, v_scale_, v_ref_, v_bytes_);
      }
    }
    k_cache_ = DeviceBuffer<uint8_t>(pool * elem());
    v_cache_ = DeviceBuffer<uint8_t>(pool * elem());
    const std::vector<uint8_t> pattern(pool * elem(), 0x5A);
    k_cache_.upload(pattern);
    v_cache_.upload(pattern);
    DeviceBuffer<uint16_t> d_kv{std::span<const uint16_t>(kv)};
    DeviceBuffer<int32_t> d_slots{std::span<const int32_t>(slots)};
    const auto* base = reinterpret_cast<const __nv_bfloat16*>(d_kv.data());
    write_kv_paged(base, 2 * width_, base + width_, 2 * width_, d_slots.data(),
                   static_cast<int64_t>(rows), cache(), nullptr);
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    d_tables_ = DeviceBuffer<int32_t>(std::span<const int32_t>(tables_));
    d_ctx_ = DeviceBuffer<int32_t>(std::span<const int32_t>(s_.contexts));
  }

  void store(uint16_t x, size_t at, int e, const std::vector<float>& scales, std::vector<float>& ref,
             std::vector<uint8_t>& bytes) {
    if (!fp8()) {
      ref[at] = bf16_to_f32(x);
      std::memcpy(&bytes[at * 2], &x, 2);
      return;
    }
    const float s = scales.size() == 1 ? scales[0] : scales[static_cast<size_t>(e / s_.head_dim)];
    const uint8_t code = cpu_fp8(bf16_to_f32(x), s);
    bytes[at] = code;
    ref[at] = fp8_e4m3_to_f32(code) * s;  // KvCacheQuantizer's rounded value
  }

  // q rows inside a fused [q | k | v] layout (stride (heads + 2·kv_heads)·head_dim).
  void make_queries() {
    query_start_.assign(1, 0);
    for (int n : s_.queries) query_start_.push_back(query_start_.back() + n);
    q_stride_ = int64_t{s_.heads + 2 * s_.kv_heads} * s_.head_dim;
    q_host_ = random_bf16(static_cast<size_t>(std::max<int64_t>(rows(), 1) * q_stride_), 2.0f, rng_);
    d_q_ = DeviceBuffer<uint16_t>(std::span<const uint16_t>(q_host_));
    d_query_start_ = DeviceBuffer<int32_t>(std::span<const int32_t>(query_start_));
  }

  Scenario s_;
  std::mt19937 rng_;
  int width_ = 0, max_blocks_ = 0, num_blocks_ = 0;
  int64_t q_stride_ = 0;
  std::vector<int32_t> tables_, query_start_;
  std::vector<float> k_scale_, v_scale_, k_ref_, v_ref_;
  std::vector<uint8_t> k_bytes_, v_bytes_;
  std::vector<uint16_t> q_host_;
  DeviceBuffer<uint8_t> k_cache_, v_cache_;
  DeviceBuffer<float> d_k_scale_, d_v_scale_;
  DeviceBuffer<int32_t> d_tables_, d_ctx_, d_query_start_;
  DeviceBuffer<uint16_t> d_q_;
};

// Runs decode (one query per sequence) or prefill and compares every output with the reference.
void expect_matches_reference(const Scenario& setup, bool decode, uint32_t seed) {
  PagedRun run(setup, seed);
  DeviceBuffer<uint16_t> out(static_cast<size_t>(run.rows() * run.out_width()));
  const std::vector<uint16_t> poison(out.size(), 0xFFFF);  // NaN: an unwritten output fails
  out.upload(poison);
  auto* d_out = reinterpret_cast<__nv_bfloat16*>(out.data());
  if (decode) {
    const size_t bytes = decode_attention_workspace_bytes(run.shape(), run.batch().num_seqs,
                                                          run.batch().max_context_len);
    DeviceBuffer<uint8_t> workspace(bytes);
    decode_attention(run.q(), run.q_stride(), run.cache(), run.batch(), run.shape(), d_out,
                     workspace.data(), bytes, nullptr);
  } else {
    prefill_attention(run.q(), run.q_stride(), run.cache(), run.batch(), run.shape(), d_out, nullptr);
  }
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = out.download();
  const std::vector<float> want = run.reference();
  const float tol = run.max_abs_v() * (1.0f / 256 + 1.0f / 4096);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float g = bf16_to_f32(got[i]);
    if (!(std::fabs(g - want[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << "row " << i / run.out_width() << " col " << i % run.out_width() << ": gpu " << g
                    << " cpu " << want[i] << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << "of " << want.size() << " outputs";
}

Scenario make_setup(int heads, int kv_heads, int head_dim, KvCacheDtype dtype, bool per_head) {
  Scenario s;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.dtype = dtype;
  s.per_head_scale = per_head;
  return s;
}

enum class Kv { BF16, FP8_PER_TENSOR, FP8_PER_HEAD };

// (head_dim, GQA group, cache kind)
using Variant = std::tuple<int, int, Kv>;

std::string variant_name(const testing::TestParamInfo<Variant>& info) {
  const auto [hd, group, kv] = info.param;
  return "hd" + std::to_string(hd) + "_group" + std::to_string(group) +
         (kv == Kv::BF16 ? "_bf16" : kv == Kv::FP8_PER_HEAD ? "_fp8_per_head" : "_fp8_per_tensor");
}

class AttentionVariants : public testing::TestWithParam<Variant> {
 protected:
  Scenario scenario() const {
    const auto [hd, group, kv] = GetParam();
    return make_setup(2 * group, 2, hd, kv == Kv::BF16 ? KvCacheDtype::BF16 : KvCacheDtype::FP8_E4M3,
                      kv == Kv::FP8_PER_HEAD);
  }
};

TEST_P(AttentionVariants, DecodeSplitsLongContexts) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Scenario s = scenario();
  // Few sequences, long contexts: the context is split over CTAs and merged; 0 gives zeros.
  s.contexts = {1, 17, 300, 1000, 2100, 0};
  s.queries.assign(s.contexts.size(), 1);
  expect_matches_reference(s, /*decode=*/true, 11);
}

TEST_P(AttentionVariants, DecodeManyShortSequencesInOneSplit) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Scenario s = scenario();
  std::mt19937 rng(5);
  for (int i = 0; i < 40; ++i) s.contexts.push_back(static_cast<int>(rng() % 128) + 1);
  s.contexts[7] = 0;
  s.queries.assign(s.contexts.size(), 1);
  expect_matches_reference(s, /*decode=*/true, 12);
}

TEST_P(AttentionVariants, PrefillWithAndWithoutPast) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Scenario s = scenario();
  // (context, new tokens): fresh prompts, and chunked prefill continuing after a past.
  s.contexts = {1, 70, 87, 330, 300, 1064};
  s.queries = {1, 70, 50, 130, 300, 64};
  expect_matches_reference(s, /*decode=*/false, 13);
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, AttentionVariants,
    testing::Combine(testing::Values(64, 128), testing::Values(1, 4, 8),
                     testing::Values(Kv::BF16, Kv::FP8_PER_TENSOR, Kv::FP8_PER_HEAD)),
    variant_name);

TEST(CudaAttention, SlidingWindow) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Scenario s = make_setup(8, 2, 128, KvCacheDtype::BF16, false);
  s.contexts = {50, 100, 301, 700, 1500};
  // 300: decode splits the window over CTAs; 20: the window's edge falls inside a 64-position
  // tile, and most tiles of a prefill CTA are cut by it.
  for (const int64_t window : {300, 20}) {
    s.window = window;
    s.queries.assign(s.contexts.size(), 1);
    expect_matches_reference(s, /*decode=*/true, 21);
    s.queries = {50, 60, 1, 200, 333};
    expect_matches_reference(s, /*decode=*/false, 22);
  }
}

TEST(CudaAttention, LargeGroupAndOddBlockSize) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  // 32 query heads on one KV head: two 16-head chunks per decode CTA group; blocks of 7.
  Scenario s = make_setup(32, 1, 64, KvCacheDtype::FP8_E4M3, false);
  s.block_size = 7;
  s.contexts = {5, 300, 901};
  s.queries.assign(s.contexts.size(), 1);
  expect_matches_reference(s, /*decode=*/true, 31);
  s.queries = {5, 100, 33};
  expect_matches_reference(s, /*decode=*/false, 32);
}

TEST(CudaAttention, WriteKvPagedStoresExactBytes) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  for (const bool per_head : {false, true}) {
    for (const KvCacheDtype dtype : {KvCacheDtype::BF16, KvCacheDtype::FP8_E4M3}) {
      Scenario s = make_setup(8, 4, 64, dtype, per_head);
      s.contexts = {3, 40, 16};
      s.queries = {1, 1, 1};
      PagedRun run(s, 41);
      // bf16: the bits; fp8: KvCacheQuantizer's codes (clamped, round to nearest even); slots
      // no sequence owns and padding rows (slot -1) untouched.
      EXPECT_TRUE(run.k_cache().download() == run.expected_k_bytes()) << "per_head " << per_head;
      EXPECT_TRUE(run.v_cache().download() == run.expected_v_bytes()) << "per_head " << per_head;
    }
  }
}

TEST(CudaAttention, Fp8DecodeReadsEveryCodeExactly) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  // One cached position: the softmax weight is exactly 1, so the output is v itself. Two KV
  // heads of 128 cover all 256 codes (NaN codes replaced by their neighbours).
  std::vector<uint8_t> v(256), k(256, 0x38);  // k = 1.0
  for (int c = 0; c < 256; ++c) v[c] = (c & 0x7F) == 0x7F ? static_cast<uint8_t>(c - 1) : static_cast<uint8_t>(c);
  const int block_size = 16;
  std::vector<uint8_t> k_pool(block_size * 256, 0), v_pool(block_size * 256, 0);
  std::copy(k.begin(), k.end(), k_pool.begin());
  std::copy(v.begin(), v.end(), v_pool.begin());
  DeviceBuffer<uint8_t> dk{std::span<const uint8_t>(k_pool)}, dv{std::span<const uint8_t>(v_pool)};
  const std::vector<float> one = {1.0f};
  DeviceBuffer<float> scale{std::span<const float>(one)};
  const std::vector<int32_t> table = {0}, ctx = {1};
  DeviceBuffer<int32_t> d_table{std::span<const int32_t>(table)}, d_ctx{std::span<const int32_t>(ctx)};
  std::mt19937 rng(51);
  const std::vector<uint16_t> q = random_bf16(2 * 128, 1.0f, rng);
  DeviceBuffer<uint16_t> d_q{std::span<const uint16_t>(q)}, out(2 * 128);
  PagedKvCache cache{dk.data(), dv.data(), KvCacheDtype::FP8_E4M3, block_size, 2, 128,
                     scale.data(), scale.data(), 1};
  PagedBatch batch;
  batch.num_seqs = 1;
  batch.context_lens = d_ctx.data();
  batch.block_tables = d_table.data();
  batch.max_blocks_per_seq = 1;
  batch.max_context_len = 1;
  AttentionShape shape;
  shape.heads = 2;
  shape.kv_heads = 2;
  shape.head_dim = 128;
  shape.scale = 0.125f;
  decode_attention(reinterpret_cast<const __nv_bfloat16*>(d_q.data()), 0, cache, batch, shape,
                   reinterpret_cast<__nv_bfloat16*>(out.data()), nullptr, 0, nullptr);
  const std::vector<uint16_t> got = out.download();
  for (int c = 0; c < 256; ++c) {
    // Compared as values: code 0x80 (-0) may come back as +0 (the scale multiply and the softmax
    // weight of 1 do not keep the sign of zero), which is the same number.
    EXPECT_EQ(bf16_to_f32(got[c]), bf16_to_f32(f32_to_bf16(fp8_e4m3_to_f32(v[c]))))
        << "code 0x" << std::hex << int{v[c]};
  }
}

TEST(CudaAttention, RejectsUnsupportedShapesBeforeTouchingTheDevice) {
  // Argument checks run on the host first, so these need no GPU.
  AttentionShape shape;
  shape.heads = 8;
  shape.kv_heads = 2;
  shape.head_dim = 96;
  PagedKvCache cache;
  PagedBatch batch;
  try {
    prefill_attention(nullptr, 0, cache, batch, shape, nullptr, nullptr);
    FAIL() << "head_dim 96 accepted";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 96"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode_attention_workspace_bytes(shape, 1, 100), Unsupported);
  shape.head_dim = 128;
  shape.heads = 6;
  shape.kv_heads = 4;
  EXPECT_THROW(decode_attention(nullptr, 0, cache, batch, shape, nullptr, nullptr, 0, nullptr),
               InvalidArgument);
}

}  // namespace
}  // namespace lowbit::kernels::cuda
