// Automatic prefix caching in the KV block pool (KvBlockPool::share_prefix / index_blocks and the
// PrefixIndex behind them): which blocks a new sequence shares, reference counting, parking and
// eviction order, and that a sequence continued from a shared prefix computes the logits of one
// that prefilled its whole prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "lowbit/error.h"
#include "models/model.h"
#include "models/paged_kv_cache.h"
#include "models/prefix_index.h"

namespace lowbit::models {
namespace {

const std::string kEmbedded = std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m";

class PrefixCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = Model::load(kEmbedded).release(); }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static const Model& model() { return *model_; }
  static Model* model_;
};
Model* PrefixCacheTest::model_ = nullptr;

std::vector<int32_t> iota_tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(PrefixIndexTest, FindsOnlyTheSameTokensUnderTheSameChain) {
  PrefixIndex index(4, 2);
  const std::vector<int32_t> a = {5, 6}, b = {5, 7};
  const uint64_t ha = PrefixIndex::chain(PrefixIndex::kRootHash, a);
  EXPECT_NE(ha, PrefixIndex::chain(PrefixIndex::kRootHash, b));
  EXPECT_NE(ha, PrefixIndex::chain(ha, a));  // the same block after another prefix
  EXPECT_TRUE(index.insert(3, ha, a));
  EXPECT_FALSE(index.insert(1, ha, a));  // a second block with the same prefix stays unindexed
  EXPECT_FALSE(index.indexed(1));
  EXPECT_EQ(index.find(ha, a), 3);
  EXPECT_EQ(index.find(ha, b), -1);  // a hash that matched other tokens (a collision) misses
  EXPECT_EQ(index.evict(), -1);      // nothing parked
  index.park(3);
  EXPECT_EQ(index.parked(), 1);
  index.unpark(3);
  EXPECT_EQ(index.parked(), 0);
  index.park(3);
  EXPECT_EQ(index.evict(), 3);
  EXPECT_FALSE(index.indexed(3));
  EXPECT_EQ(index.find(ha, a), -1);
}

TEST_F(PrefixCacheTest, SharesFullBlocksCountsHoldersParksAndEvictsOldestFirst) {
  KvBlockPool pool(model(), 8, 4);
  const std::vector<int32_t> tokens = iota_tokens(11, 100);  // 2 full blocks + 3
  PagedSequence a;
  EXPECT_EQ(pool.share_prefix(a, tokens, 10), 0) << "off until enabled";
  pool.enable_prefix_caching();
  EXPECT_EQ(pool.share_prefix(a, tokens, 10), 0) << "nothing cached yet";
  ASSERT_TRUE(pool.reserve(a, 11));
  a.length = 11;  // as forward_batch leaves it
  pool.index_blocks(a, tokens);
  EXPECT_EQ(a.hashed_blocks, 2);

  PagedSequence b, c, d;
  EXPECT_EQ(pool.share_prefix(b, tokens, 10), 8);
  EXPECT_EQ(b.blocks, (std::vector<int32_t>{a.blocks[0], a.blocks[1]}));
  EXPECT_EQ(b.length, 8);
  EXPECT_EQ(pool.share_prefix(c, tokens, 7), 4) << "at most max_tokens positions";
  std::vector<int32_t> other = tokens;
  other[5] = 1;  // differs in the second block
  EXPECT_EQ(pool.share_prefix(d, other, 10), 4);
  EXPECT_EQ(pool.used_blocks(), 3) << "shared blocks are counted once";

  // a leaves: its third block is free again, the two shared ones are still held.
  const std::vector<int32_t> a_blocks = a.blocks;
  pool.release(a);
  EXPECT_EQ(pool.used_blocks(), 2);
  pool.release(c);
  pool.release(d);
  pool.release(b);  // the last holder: both indexed blocks are parked, still shareable
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), 8);
  PagedSequence e;
  EXPECT_EQ(pool.share_prefix(e, tokens, 10), 8);
  pool.release(e);

  // Fill the pool: the 6 never-indexed blocks go first, then the parked ones, the second
  // (tail) block before the first (head).
  PagedSequence f;
  ASSERT_TRUE(pool.reserve(f, 6 * 4));
  EXPECT_EQ(pool.share_prefix(e, tokens, 10), 8) << "parked blocks survive while others are free";
  pool.release(e);
  ASSERT_TRUE(pool.reserve(f, 7 * 4));
  EXPECT_EQ(f.blocks.back(), a_blocks[1]) << "the tail block is evicted first";
  EXPECT_EQ(pool.share_prefix(e, tokens, 10), 4);
  pool.release(e);
  ASSERT_TRUE(pool.reserve(f, 8 * 4));
  EXPECT_EQ(pool.share_prefix(e, tokens, 10), 0);
  EXPECT_FALSE(pool.reserve(e, 1));
  pool.release(f);
  EXPECT_EQ(pool.free_blocks(), 8);
  PagedSequence stale;
  stale.blocks = {a_blocks[0]};
  EXPECT_THROW(pool.release(stale), InvalidArgument) << "a block nobody holds";
}

// A sequence whose first 32 prompt positions come from another sequence's blocks computes only
// the rest; its logits equal (within fp32 summation-order noise) those of a sequence that
// prefilled the whole prompt. Tolerance: the shared keys and values were computed in a call of
// another row count (another matmul path, same products in another order: ~1e-7 relative per
// value), which moves logits of magnitude ~10 by a few 1e-6 after 8 layers (measured: 4.8e-6);
// 1e-4 leaves a factor of 20 and is still far below the gaps that decide a token.
TEST_F(PrefixCacheTest, ContinuingASharedPrefixComputesTheSameLogits) {
  const int64_t vocab = model().config().vocab_size;
  std::vector<int32_t> first = iota_tokens(45, 7), second = iota_tokens(45, 7);
  for (size_t i = 36; i < second.size(); ++i) second[i] = static_cast<int32_t>((i * 31) % vocab);
  KvBlockPool pool(model(), 64, 16);
  pool.enable_prefix_caching();
  PagedSequence a;
  ASSERT_TRUE(pool.reserve(a, 45));
  const BatchEntry ea{first, &a};
  forward_batch(model(), {&ea, 1}, pool);
  pool.index_blocks(a, first);
  ASSERT_EQ(a.hashed_blocks, 2);

  PagedSequence shared, fresh;
  ASSERT_EQ(pool.share_prefix(shared, second, 44), 32);
  ASSERT_TRUE(pool.reserve(shared, 45));
  ASSERT_TRUE(pool.reserve(fresh, 45));
  const BatchEntry es{std::span<const int32_t>(second).subspan(32), &shared};
  const BatchEntry ef{second, &fresh};
  const Tensor from_shared = forward_batch(model(), {&es, 1}, pool)[0];
  const Tensor from_scratch = forward_batch(model(), {&ef, 1}, pool)[0];
  ASSERT_EQ(from_shared.numel(), vocab);
  const float* x = from_shared.data_as<float>();
  const float* y = from_scratch.data_as<float>();
  float worst = 0.0f;
  for (int64_t i = 0; i < vocab; ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  EXPECT_LE(worst, 1e-4f);
  EXPECT_EQ(std::max_element(x, x + vocab) - x, std::max_element(y, y + vocab) - y);
  EXPECT_EQ(shared.length, 45);
}

}  // namespace
}  // namespace lowbit::models
