// attention_paged() against attention() on the same values: the serving engine's batched forward
// promises logits bit-identical to Model::forward, which holds only if reading the cache through a
// block table changes addresses and nothing else. So the comparison is bitwise (memcmp), over
// awkward shapes: block sizes 1, 3 and 16 with runs cut anywhere, GQA and plain heads, sliding
// windows, 1 / 5 queries (direct path) and 8 / 70 (matmul path, one and two query blocks), and
// 0..300 cached positions. Blocks are handed out in a scrambled order and every pool row that
// does not hold a cache position is NaN, so a read through a wrong index cannot go unnoticed.
// An fp8 pool (one code per value, the serving engine's --kv-cache-dtype fp8 storage) must give
// the bits of attention() on the decoded values, fp8(code) · scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/ref/attention_group.h"
#include "kernels/ref/attention_group_impl.h"

namespace lowbit::kernels {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// A cache of `context` rows copied into a pool of blocks: the table lists the blocks in a
// scrambled order among spare ones, and every row not holding a position is NaN. The pool starts
// `shift` floats into its buffer, so that its rows' alignment differs from the contiguous copy's
// (a vectorizer that peeled loops for alignment would then sum in another order).
struct PagedCopy {
  std::vector<float> k_buffer, v_buffer;
  std::vector<int32_t> table;
  int64_t shift = 0;

  PagedCopy(const std::vector<float>& k, const std::vector<float>& v, int64_t context, int64_t row,
            int64_t block_size, uint32_t seed)
      : shift(seed % 16) {
    const int64_t used = (context + block_size - 1) / block_size;
    const int64_t pool_blocks = used * 2 + 1;
    std::vector<int32_t> ids(static_cast<size_t>(pool_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    table.assign(ids.begin(), ids.begin() + used);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    k_buffer.assign(static_cast<size_t>(shift + pool_blocks * block_size * row), nan);
    v_buffer.assign(k_buffer.size(), nan);
    for (int64_t j = 0; j < context; ++j) {
      const int64_t block = table[static_cast<size_t>(j / block_size)];
      const int64_t dst = shift + (block * block_size + j % block_size) * row;
      std::copy_n(k.begin() + j * row, row, k_buffer.begin() + dst);
      std::copy_n(v.begin() + j * row, row, v_buffer.begin() + dst);
    }
  }
  const float* k_pool() const { return k_buffer.data() + shift; }
  const float* v_pool() const { return v_buffer.data() + shift; }
  KvPages pages(int64_t block_size) const {
    return KvPages{k_pool(), v_pool(), table.data(), block_size};
  }
};

struct Heads {
  int heads, kv_heads, head_dim;
};

AttentionShape shape_of(const Heads& h, int64_t queries, int64_t past, int64_t window) {
  AttentionShape s;
  s.queries = queries;
  s.past = past;
  s.heads = h.heads;
  s.kv_heads = h.kv_heads;
  s.head_dim = h.head_dim;
  s.window = window;
  s.scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim));
  return s;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(AttentionPagedTest, BitIdenticalToContiguous) {
  const Heads head_shapes[] = {{4, 2, 16}, {6, 2, 64}, {4, 4, 8}, {8, 1, 32}};
  const int64_t block_sizes[] = {1, 3, 16};
  const int64_t query_counts[] = {1, 5, 8, 70};
  const int64_t pasts[] = {0, 1, 2, 15, 16, 17, 47, 129, 300};
  const int64_t windows[] = {0, 7, 33};
  int cases = 0;
  uint32_t seed = 1;
  for (const Heads& h : head_shapes) {
    for (const int64_t queries : query_counts) {
      for (const int64_t past : pasts) {
        const int64_t context = past + queries;
        const int64_t row = int64_t{h.kv_heads} * h.head_dim;
        const auto q =
            random_vector(static_cast<size_t>(queries * h.heads * h.head_dim), ++seed, 2.0f);
        const auto k = random_vector(static_cast<size_t>(context * row), ++seed, 2.0f);
        const auto v = random_vector(static_cast<size_t>(context * row), ++seed, 1.0f);
        for (const int64_t window : windows) {
          const AttentionShape s = shape_of(h, queries, past, window);
          std::vector<float> expected(q.size(), -7.0f);
          attention(q.data(), k.data(), v.data(), s, expected.data());
          ASSERT_TRUE(std::all_of(expected.begin(), expected.end(),
                                  [](float x) { return std::isfinite(x); }));
          for (const int64_t block_size : block_sizes) {
            const PagedCopy paged(k, v, context, row, block_size, ++seed);
            std::vector<float> out(q.size(), -9.0f);
            attention_paged(q.data(), paged.pages(block_size), s, out.data());
            EXPECT_TRUE(bitwise_equal(out, expected))
                << "heads " << h.heads << "/" << h.kv_heads << "x" << h.head_dim << " queries "
                << queries << " past " << past << " window " << window << " block " << block_size;
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 4 * 9 * 3 * 3);
}

// One block larger than the context (a fixed-capacity cache) is the contiguous layout; the rows
// past the context are never read.
TEST(AttentionPagedTest, OversizedSingleBlockIsContiguous) {
  AttentionShape s;
  s.queries = 3;
  s.past = 20;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.scale = 0.25f;
  const int64_t context = 23, row = 32;
  const auto q = random_vector(3 * 4 * 16, 11, 2.0f);
  auto k = random_vector(static_cast<size_t>(context * row), 12, 2.0f);
  auto v = random_vector(static_cast<size_t>(context * row), 13, 1.0f);
  std::vector<float> expected(q.size()), out(q.size());
  attention(q.data(), k.data(), v.data(), s, expected.data());
  k.resize(static_cast<size_t>(64 * row), std::numeric_limits<float>::quiet_NaN());
  v.resize(k.size(), std::numeric_limits<float>::quiet_NaN());
  const int32_t table[1] = {0};
  attention_paged(q.data(), KvPages{k.data(), v.data(), table, 64}, s, out.data());
  EXPECT_TRUE(bitwise_equal(out, expected));
}

// Every ISA build of the decode kernel this CPU can run: the paged walk equals the same build's
// contiguous one bitwise (the dispatched one is covered above; this covers the others).
TEST(AttentionPagedTest, EveryIsaGroupKernelPagesBitIdentically) {
  const int group = 3, hd = 64, kv_heads = 2;
  const int64_t total = 77, row = int64_t{kv_heads} * hd, block_size = 5;
  const auto q = random_vector(static_cast<size_t>(group * kv_heads * hd), 21, 2.0f);
  const auto k = random_vector(static_cast<size_t>(total * row), 22, 2.0f);
  const auto v = random_vector(static_cast<size_t>(total * row), 23, 1.0f);
  const PagedCopy paged(k, v, total, row, block_size, 24);
  const cpu::CpuFeatures& f = cpu::cpu_features();
  std::vector<std::pair<std::string, detail::GroupAttentionFn>> kernels = {
      {"baseline", detail::group_attention_baseline}};
  if (f.has_avx2_kernels()) kernels.push_back({"avx2", detail::group_attention_avx2});
  if (f.has_avx512_kernels()) kernels.push_back({"avx512", detail::group_attention_avx512});
  for (const auto& [name, kernel] : kernels) {
    for (int64_t lo : {int64_t{0}, int64_t{4}, int64_t{31}}) {
      for (int g = 0; g < kv_heads; ++g) {
        std::vector<float> scores(static_cast<size_t>(group * total));
        std::vector<float> expected(static_cast<size_t>(group * hd)), out(expected.size());
        detail::GroupAttentionArgs a{};
        a.q = q.data() + g * group * hd;
        a.k = k.data() + g * hd;
        a.v = v.data() + g * hd;
        a.kv_stride = row;
        a.lo = lo;
        a.hi = total;
        a.group = group;
        a.head_dim = hd;
        a.scale = 0.125f;
        a.scores = scores.data();
        a.out = expected.data();
        kernel(a);
        a.k = paged.k_pool() + g * hd;
        a.v = paged.v_pool() + g * hd;
        a.table = paged.table.data();
        a.block_size = block_size;
        a.out = out.data();
        kernel(a);
        EXPECT_TRUE(bitwise_equal(out, expected)) << name << " lo " << lo << " head " << g;
      }
    }
  }
}

// The prefill path's softmax is the baseline build's scalar loop made SIMD where no rounding
// changes: bitwise the plain definition (running maximum from -inf with NaN skipped, then row[0];
// exp_approx; the sum in index order; one reciprocal), on every length 1..70 (vector body and
// tail) and on rows with a NaN first, in the middle, or everywhere and with scores below exp's
// clamp at -87. No tolerance: the prefill's bits are what the quantizer tests' perplexities pin.
TEST(AttentionPagedTest, PrefillSoftmaxMatchesTheScalarBits) {
  auto scalar = [](std::vector<float> row) {
    float max_score = -std::numeric_limits<float>::infinity();
    for (float v : row) max_score = v > max_score ? v : max_score;
    max_score = row[0] > max_score ? row[0] : max_score;
    float sum = 0.0f;
    for (float& v : row) {
      v = detail::exp_approx(v - max_score);
      sum += v;
    }
    const float inv = 1.0f / sum;
    for (float& v : row) v *= inv;
    return row;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> rows;
  for (size_t n = 1; n <= 70; ++n) rows.push_back(random_vector(n, static_cast<uint32_t>(n), 9.0f));
  for (size_t n : {size_t{1}, size_t{6}, size_t{13}}) {
    std::vector<float> first_nan = random_vector(n, 100, 3.0f), middle_nan = first_nan;
    first_nan[0] = nan;
    middle_nan[n / 2] = nan;
    rows.push_back(first_nan);
    rows.push_back(middle_nan);
    rows.push_back(std::vector<float>(n, nan));
  }
  std::vector<float> wide = random_vector(37, 7, 1.0f);
  wide[3] = 200.0f;  // every other score falls below the clamp after subtracting the maximum
  wide[20] = -0.0f;
  rows.push_back(wide);
  for (const std::vector<float>& row : rows) {
    std::vector<float> got = row;
    detail::prefill_softmax_row(got.data(), static_cast<int64_t>(got.size()));
    EXPECT_TRUE(bitwise_equal(got, scalar(row))) << "length " << row.size();
  }
}

// fp8 codes (e4m3 and e5m2, one scale or one per KV head) in a scrambled pool whose unused rows
// hold NaN codes: attention_paged equals attention() on the decoded values fp8(code) · scale bit
// for bit, on the direct (1, 5 queries) and the matmul path (8, 70).
TEST(AttentionPagedTest, Fp8CodesEqualTheDecodedValuesBitwise) {
  struct Format {
    bool e5m2;
    uint8_t nan_code;
    float scale;  // keeps |values| around 1-10
  };
  const Format formats[] = {{false, 0x7F, 0.02f}, {true, 0x7F, 0.0005f}};
  const Heads h{6, 2, 32};
  const int64_t row = int64_t{h.kv_heads} * h.head_dim;
  int cases = 0;
  uint32_t seed = 100;
  for (const Format& f : formats) {
    auto decode = [&](uint8_t c) { return f.e5m2 ? fp8_e5m2_to_f32(c) : fp8_e4m3_to_f32(c); };
    for (const int scale_count : {1, h.kv_heads}) {
      std::vector<float> k_scales, v_scales;
      for (int g = 0; g < scale_count; ++g) {
        k_scales.push_back(f.scale * static_cast<float>(g + 1));
        v_scales.push_back(0.5f * f.scale * static_cast<float>(g + 2));
      }
      for (const int64_t queries : {1, 5, 8, 70}) {
        for (const int64_t past : {0, 17, 129}) {
          const int64_t context = past + queries;
          std::mt19937 gen(++seed);
          std::uniform_int_distribution<int> byte(0, 255);
          auto random_codes = [&] {
            std::vector<uint8_t> c(static_cast<size_t>(context * row));
            for (uint8_t& x : c) {
              do x = static_cast<uint8_t>(byte(gen));
              while (!std::isfinite(decode(x)) || std::fabs(decode(x)) > 448.0f);
            }
            return c;
          };
          const std::vector<uint8_t> k_codes = random_codes(), v_codes = random_codes();
          std::vector<float> k(k_codes.size()), v(v_codes.size());
          for (size_t i = 0; i < k.size(); ++i) {
            const size_t g = scale_count == 1 ? 0 : (i % static_cast<size_t>(row)) / h.head_dim;
            k[i] = decode(k_codes[i]) * k_scales[g];
            v[i] = decode(v_codes[i]) * v_scales[g];
          }
          const auto q =
              random_vector(static_cast<size_t>(queries * h.heads * h.head_dim), ++seed, 0.3f);
          for (const int64_t window : {0, 7}) {
            const AttentionShape s = shape_of(h, queries, past, window);
            std::vector<float> expected(q.size(), -7.0f);
            attention(q.data(), k.data(), v.data(), s, expected.data());
            ASSERT_TRUE(std::all_of(expected.begin(), expected.end(),
                                    [](float x) { return std::isfinite(x); }));
            for (const int64_t block_size : {1, 3, 16}) {
              const int64_t used = (context + block_size - 1) / block_size;
              std::vector<int32_t> ids(static_cast<size_t>(2 * used + 1));
              std::iota(ids.begin(), ids.end(), 0);
              std::shuffle(ids.begin(), ids.end(), std::mt19937(++seed));
              const std::vector<int32_t> table(ids.begin(), ids.begin() + used);
              std::vector<uint8_t> k_pool(ids.size() * block_size * row, f.nan_code);
              std::vector<uint8_t> v_pool(k_pool.size(), f.nan_code);
              for (int64_t j = 0; j < context; ++j) {
                const int64_t dst =
                    (table[static_cast<size_t>(j / block_size)] * block_size + j % block_size) * row;
                std::copy_n(k_codes.begin() + j * row, row, k_pool.begin() + dst);
                std::copy_n(v_codes.begin() + j * row, row, v_pool.begin() + dst);
              }
              KvPages pages;
              pages.table = table.data();
              pages.block_size = block_size;
              pages.k_codes = k_pool.data();
              pages.v_codes = v_pool.data();
              pages.k_scales = k_scales.data();
              pages.v_scales = v_scales.data();
              pages.scale_count = scale_count;
              pages.e5m2 = f.e5m2;
              std::vector<float> out(q.size(), -9.0f);
              attention_paged(q.data(), pages, s, out.data());
              EXPECT_TRUE(bitwise_equal(out, expected))
                  << (f.e5m2 ? "e5m2" : "e4m3") << " scales " << scale_count << " queries "
                  << queries << " past " << past << " window " << window << " block "
                  << block_size;
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 2 * 4 * 3 * 2 * 3);
}

}  // namespace
}  // namespace lowbit::kernels
