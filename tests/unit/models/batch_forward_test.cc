// forward_batch() and the KV block pool (paged_kv_cache.h).
//
// The central property: every logits row forward_batch() returns is BITWISE equal to what
// Model::forward gives for the same sequence run alone (prefill of the whole prompt, then one token
// at a time). That is what makes the server's greedy output equal `lowbit generate`'s. Why it
// holds: per row, both run the same kernels in the same order. Row-wise ops (embedding, RMSNorm,
// RoPE with the row's own position and its entry's own frequencies, residual adds) compute a row
// from that row alone. Matmuls compute each output row from its input row alone, on a path picked
// by the call's row count; forward_batch() shares calls only among entries that Model::forward
// would also run on the streaming path (decode steps, short prompts: a shared call of at most the
// streaming limit stays on it) and gives longer entries calls of their own. Attention runs per
// sequence, with the same shape as Model::forward's, through attention_paged(), bit-identical to
// the contiguous kernel (tests/unit/kernels/attention_paged_test.cc). So the comparisons below
// are exact; a tolerance would hide a broken grouping, which changes the last bits only.
//
// Sequences join (prefill) and leave (release) at different steps, with blocks handed out as
// they grow side by side, so block tables are scattered and released blocks get reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lowbit/error.h"
#include "models/model.h"
#include "models/paged_kv_cache.h"

namespace lowbit::models {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = fs::path(LOWBIT_SOURCE_DIR);
const std::string kEmbedded = (kSource / "models/ref-llama-19m").string();

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = dist(gen);
  return ids;
}

int32_t argmax_last_row(const Tensor& logits) {
  const int64_t vocab = logits.dim(1);
  const float* row = logits.data_as<float>() + (logits.dim(0) - 1) * vocab;
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "shape " << got.shape_string() << " vs " << want.shape_string();
  }
  if (std::memcmp(got.data(), want.data(), got.nbytes()) == 0) {
    return ::testing::AssertionSuccess();
  }
  const float* a = got.data_as<float>();
  const float* b = want.data_as<float>();
  float worst = 0.0f;
  int64_t differing = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) ++differing;
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return ::testing::AssertionFailure()
         << differing << " of " << got.numel() << " values differ, max |diff| " << worst;
}

// One sequence of a scenario: its prompt is prefilled at step `join`, then it decodes `decode`
// greedy tokens (one per step) and leaves, its blocks released.
struct Plan {
  std::vector<int32_t> prompt;
  int join = 0;
  int decode = 0;
  bool all_logits = false;
};

struct Outcome {
  std::vector<int32_t> fed;       // the decoded tokens, in order
  std::vector<Tensor> logits;     // the prefill's, then one per decode step
  bool tables_scattered = false;  // held non-consecutive blocks at some point
};

std::vector<Outcome> run_batched(const Model& model, KvBlockPool& pool,
                                 const std::vector<Plan>& plans, const BatchOptions& options = {}) {
  const size_t count = plans.size();
  std::vector<PagedSequence> seqs(count);
  std::vector<Outcome> out(count);
  std::vector<int32_t> next(count);  // the decode token of each sequence (spans point here)
  int last = 0;
  for (const Plan& p : plans) last = std::max(last, p.join + p.decode);
  for (int step = 0; step <= last; ++step) {
    std::vector<BatchEntry> batch;
    std::vector<size_t> who;
    for (size_t s = 0; s < count; ++s) {
      const Plan& p = plans[s];
      BatchEntry e;
      e.seq = &seqs[s];
      if (p.join == step) {
        e.tokens = p.prompt;
        e.all_logits = p.all_logits;
      } else if (p.join < step && static_cast<int>(out[s].fed.size()) < p.decode) {
        next[s] = argmax_last_row(out[s].logits.back());
        out[s].fed.push_back(next[s]);
        e.tokens = std::span<const int32_t>(&next[s], 1);
      } else {
        continue;
      }
      EXPECT_TRUE(pool.reserve(seqs[s], seqs[s].length + static_cast<int64_t>(e.tokens.size())));
      batch.push_back(e);
      who.push_back(s);
    }
    if (batch.empty()) continue;
    std::vector<Tensor> logits = forward_batch(model, batch, pool, options);
    EXPECT_EQ(logits.size(), batch.size());
    for (size_t i = 0; i < who.size(); ++i) {
      const size_t s = who[i];
      out[s].logits.push_back(std::move(logits[i]));
      const std::vector<int32_t>& b = seqs[s].blocks;
      for (size_t j = 1; j < b.size(); ++j) out[s].tables_scattered |= b[j] != b[j - 1] + 1;
      if (plans[s].join + plans[s].decode == step) pool.release(seqs[s]);
    }
  }
  return out;
}

// Model::forward on each plan's sequence alone, compared row for row with the batched outcome.
void expect_same_as_alone(const Model& model, const std::vector<Plan>& plans,
                          const std::vector<Outcome>& outcomes, const std::string& label) {
  for (size_t s = 0; s < plans.size(); ++s) {
    const Outcome& o = outcomes[s];
    ASSERT_EQ(o.logits.size(), o.fed.size() + 1) << label << " seq " << s;
    KvCache cache = model.new_cache();
    EXPECT_TRUE(same_bits(o.logits[0], model.forward(plans[s].prompt, cache, plans[s].all_logits)))
        << label << " seq " << s << " prefill of " << plans[s].prompt.size();
    for (size_t k = 0; k < o.fed.size(); ++k) {
      const std::vector<int32_t> token = {o.fed[k]};
      EXPECT_TRUE(same_bits(o.logits[k + 1], model.forward(token, cache, false)))
          << label << " seq " << s << " decode step " << k;
    }
  }
}

// N sequences with prompts of 1..40 tokens, joining at steps 0..4 and decoding 11..20 steps.
std::vector<Plan> staggered_plans(int n, int64_t vocab, uint32_t seed) {
  std::vector<Plan> plans(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    Plan& p = plans[static_cast<size_t>(s)];
    p.prompt = random_ids(1 + (s * 13 + n * 7) % 40, vocab, seed + static_cast<uint32_t>(s));
    p.join = (s * 3 + n) % 5;
    p.decode = 20 - (s % 4) * 3;
    p.all_logits = s % 3 == 1;
  }
  return plans;
}

class BatchForwardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = Model::load(kEmbedded).release(); }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static const Model& model() { return *model_; }
  static Model* model_;
};
Model* BatchForwardTest::model_ = nullptr;

// (a) 1..12 sequences, block sizes 1, 3 and 16.
TEST_F(BatchForwardTest, StaggeredBatchesMatchForwardAloneBitwise) {
  const int64_t block_sizes[] = {1, 3, 16};
  for (int n = 1; n <= 12; ++n) {
    const int64_t block_size = block_sizes[n % 3];
    KvBlockPool pool(model(), n * (60 / block_size + 2), block_size);
    const std::vector<Plan> plans = staggered_plans(n, model().config().vocab_size, 100 * n);
    const std::vector<Outcome> outcomes = run_batched(model(), pool, plans);
    expect_same_as_alone(model(), plans, outcomes, "n=" + std::to_string(n));
    EXPECT_EQ(pool.used_blocks(), 0) << "every sequence left and released its blocks";
    if (n >= 2 && block_size < 16) {
      EXPECT_TRUE(std::any_of(outcomes.begin(), outcomes.end(), [](const Outcome& o) {
        return o.tables_scattered;
      })) << "the block tables should be non-contiguous, or paging is not exercised";
    }
  }
}

// More decoding sequences than one shared matmul call may take (AVX2: 32, AVX-512: 64 rows):
// the rows are split into several calls, each still on the streaming path.
TEST_F(BatchForwardTest, ManySequencesDecodeTogether) {
  std::vector<Plan> plans(70);
  for (size_t s = 0; s < plans.size(); ++s) {
    plans[s].prompt = random_ids(1 + static_cast<int64_t>(s % 5), model().config().vocab_size,
                                 7000 + static_cast<uint32_t>(s));
    plans[s].decode = 3;
  }
  KvBlockPool pool(model(), 70 * 3, 4);
  expect_same_as_alone(model(), plans, run_batched(model(), pool, plans), "70 sequences");
}

// (b) Prompts longer than Model::forward's 512-token chunk, beside decoding sequences.
TEST_F(BatchForwardTest, LongPromptsRunInTheSameChunks) {
  const int64_t vocab = model().config().vocab_size;
  std::vector<Plan> plans(5);
  plans[0] = Plan{random_ids(600, vocab, 1), 1, 3, true};
  plans[1] = Plan{random_ids(1030, vocab, 2), 2, 2, false};
  plans[2] = Plan{random_ids(5, vocab, 3), 0, 6, false};
  plans[3] = Plan{random_ids(17, vocab, 4), 0, 6, true};
  plans[4] = Plan{random_ids(70, vocab, 5), 1, 4, false};
  KvBlockPool pool(model(), 200, 16);
  expect_same_as_alone(model(), plans, run_batched(model(), pool, plans), "long prompts");
}

// (c) fp8 KV cache: the pool stores one fp8 code per value (a quarter of the fp32 bytes) in the
// layers the cache quantizes, and the values attention decodes from them are those Model::forward
// writes to its fp32 cache: e4m3, e5m2 with layer 0 skipped (kept in fp32), and scales computed
// from the first pass (--calculate-kv-scales).
TEST(BatchForwardFp8Test, Fp8KvCacheMatchesForwardAloneBitwise) {
  struct Case {
    std::string dtype;
    std::vector<std::string> skip;
    bool calculate;
  };
  const Case cases[] = {{"fp8", {}, false}, {"fp8_e5m2", {"0"}, false}, {"fp8_e4m3", {}, true}};
  for (const Case& c : cases) {
    LoadOptions options;
    options.kv_cache.dtype = c.dtype;
    options.kv_cache.skip_layers = c.skip;
    options.kv_cache.calculate_scales = c.calculate;
    const std::unique_ptr<Model> model = Model::load(kEmbedded, options);
    ASSERT_NE(model->kv_cache_quantizer(), nullptr);
    ASSERT_TRUE(model->kv_cache_quantizer()->active());
    const ModelConfig& config = model->config();
    const int64_t values_per_layer = 4 * 2 * config.num_kv_heads * config.head_dim;
    const int64_t fp8_layers = config.num_layers - static_cast<int64_t>(c.skip.size());
    EXPECT_EQ(KvBlockPool::bytes_per_block(*model, 4),
              values_per_layer * (fp8_layers + 4 * (config.num_layers - fp8_layers)))
        << c.dtype;
    const std::vector<Plan> plans = staggered_plans(6, config.vocab_size, 42);
    KvBlockPool pool(*model, 6 * 20, 4);
    for (int l = 0; l < pool.num_layers(); ++l) {
      EXPECT_EQ(pool.fp8(l), !(l == 0 && !c.skip.empty())) << c.dtype << " layer " << l;
    }
    expect_same_as_alone(*model, plans, run_batched(*model, pool, plans), c.dtype + " kv");
  }
}

// A pool made for the model without an fp8 cache does not run the fp8 model (and vice versa).
TEST(BatchForwardFp8Test, PoolOfAnotherKvDtypeIsRejected) {
  LoadOptions options;
  options.kv_cache.dtype = "fp8";
  const std::unique_ptr<Model> fp8_model = Model::load(kEmbedded, options);
  const std::unique_ptr<Model> plain_model = Model::load(kEmbedded);
  KvBlockPool fp8_pool(*fp8_model, 8, 4), plain_pool(*plain_model, 8, 4);
  const std::vector<int32_t> tokens = {5, 6, 7};
  for (auto [model, pool] : {std::pair{fp8_model.get(), &plain_pool},
                             std::pair{plain_model.get(), &fp8_pool}}) {
    PagedSequence seq;
    ASSERT_TRUE(pool->reserve(seq, 3));
    const BatchEntry entry{tokens, &seq};
    EXPECT_THROW(forward_batch(*model, {&entry, 1}, *pool), InvalidArgument);
    EXPECT_EQ(seq.length, 0);
  }
}

// Linear layers run by a quantization method (here fp8 with per-tensor dynamic inputs, whose
// scale depends on every row of a call) take no shared calls, so equality still holds.
TEST(BatchForwardQuantizedTest, PerTensorFp8InputsMatchForwardAloneBitwise) {
  LoadOptions options;
  options.quantization = "fp8_per_tensor";
  const std::unique_ptr<Model> model = Model::load(kEmbedded, options);
  const std::vector<Plan> plans = staggered_plans(5, model->config().vocab_size, 77);
  KvBlockPool pool(*model, 5 * 20, 4);
  expect_same_as_alone(*model, plans, run_batched(*model, pool, plans), "fp8_per_tensor");
}

// exact = false: one call per layer for all rows. Rows may leave the streaming path, which sums
// in another order: differences are fp32 rounding, |Δ| ≤ ~2·k·eps·Σ|x·w| per matmul, far below
// the 1e-3 logit tolerance the model tests use against transformers; the greedy tokens agree.
TEST_F(BatchForwardTest, InexactModeIsCloseToForwardAlone) {
  const std::vector<Plan> plans = staggered_plans(12, model().config().vocab_size, 5);
  KvBlockPool pool(model(), 12 * 20, 4);
  BatchOptions options;
  options.exact = false;
  const std::vector<Outcome> outcomes = run_batched(model(), pool, plans, options);
  for (size_t s = 0; s < plans.size(); ++s) {
    KvCache cache = model().new_cache();
    Tensor want = model().forward(plans[s].prompt, cache, plans[s].all_logits);
    for (size_t k = 0; k <= outcomes[s].fed.size(); ++k) {
      if (k > 0) {
        const std::vector<int32_t> token = {outcomes[s].fed[k - 1]};
        want = model().forward(token, cache, false);
      }
      const Tensor& got = outcomes[s].logits[k];
      ASSERT_EQ(got.shape(), want.shape());
      float worst = 0.0f;
      for (int64_t i = 0; i < got.numel(); ++i) {
        worst = std::max(worst, std::fabs(got.data_as<float>()[i] - want.data_as<float>()[i]));
      }
      EXPECT_LT(worst, 1e-3f) << "seq " << s << " call " << k;
      EXPECT_EQ(argmax_last_row(got), argmax_last_row(want)) << "seq " << s << " call " << k;
    }
  }
}

// (d) Pool accounting.
TEST_F(BatchForwardTest, PoolReservesReleasesAndRefusesWhenFull) {
  KvBlockPool pool(model(), 10, 4);
  EXPECT_EQ(pool.num_blocks(), 10);
  EXPECT_EQ(pool.free_blocks(), 10);
  EXPECT_EQ(pool.blocks_for(0), 0);
  EXPECT_EQ(pool.blocks_for(4), 1);
  EXPECT_EQ(pool.blocks_for(5), 2);
  const ModelConfig& c = model().config();
  EXPECT_EQ(KvBlockPool::bytes_per_block(model(), 4),
            4 * c.num_layers * 2 * c.num_kv_heads * c.head_dim * 4);
  EXPECT_EQ(pool.row_size(), c.num_kv_heads * c.head_dim);
  EXPECT_EQ(pool.keys(1, 2) - pool.keys(0, 0), (1 * 10 + 2) * 4 * pool.row_size());
  EXPECT_EQ(pool.values(0, 3) - pool.values(0, 2), 4 * pool.row_size());

  // Two sequences growing one block at a time, alternately: their tables interleave.
  PagedSequence a, b;
  for (int64_t tokens = 4; tokens <= 12; tokens += 4) {
    ASSERT_TRUE(pool.reserve(a, tokens));
    ASSERT_TRUE(pool.reserve(b, tokens));
  }
  EXPECT_EQ(a.blocks, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(b.blocks, (std::vector<int32_t>{1, 3, 5}));
  EXPECT_EQ(pool.used_blocks(), 6);
  EXPECT_TRUE(pool.reserve(a, 10));  // already held: nothing taken
  EXPECT_EQ(pool.used_blocks(), 6);

  // 4 blocks left: a request for 5 more is refused and changes nothing.
  a.length = 7;
  const std::vector<int32_t> before = a.blocks;
  EXPECT_FALSE(pool.reserve(a, 12 + 5 * 4));
  EXPECT_EQ(a.blocks, before);
  EXPECT_EQ(a.length, 7);
  EXPECT_EQ(pool.free_blocks(), 4);
  EXPECT_TRUE(pool.reserve(a, 12 + 4 * 4));  // exactly what is left
  EXPECT_EQ(pool.free_blocks(), 0);
  PagedSequence c2;
  EXPECT_FALSE(pool.reserve(c2, 1));
  EXPECT_TRUE(c2.blocks.empty());

  pool.release(b);
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(b.length, 0);
  EXPECT_EQ(pool.free_blocks(), 3);
  ASSERT_TRUE(pool.reserve(c2, 9));
  EXPECT_EQ(c2.blocks, (std::vector<int32_t>{1, 3, 5}));  // b's blocks, reused
  pool.release(a);
  pool.release(c2);
  EXPECT_EQ(pool.free_blocks(), 10);
  pool.release(c2);  // empty: nothing happens
  EXPECT_EQ(pool.free_blocks(), 10);
}

TEST_F(BatchForwardTest, PoolRejectsBadSizes) {
  EXPECT_THROW(KvBlockPool(model(), 10, 0), InvalidArgument);
  EXPECT_THROW(KvBlockPool(model(), 0, 16), InvalidArgument);
  EXPECT_THROW(KvBlockPool(model(), int64_t{1} << 31, 16), InvalidArgument);  // int32 block ids
  EXPECT_THROW(KvBlockPool(model(), int64_t{1} << 30, int64_t{1} << 40), OutOfMemory);
  EXPECT_THROW(KvBlockPool(model(), int64_t{1} << 30, int64_t{1} << 20), OutOfMemory);
  KvBlockPool pool(model(), 4, 2);
  PagedSequence foreign;
  foreign.blocks = {7};
  EXPECT_THROW(pool.release(foreign), InvalidArgument);
  EXPECT_EQ(pool.free_blocks(), 4);
}

// (e) Errors: InvalidArgument, and no sequence advanced.
TEST_F(BatchForwardTest, RejectsBadBatchesAndChangesNothing) {
  KvBlockPool pool(model(), 20, 4);
  PagedSequence good, short_seq;
  const std::vector<int32_t> prompt = random_ids(6, model().config().vocab_size, 9);
  ASSERT_TRUE(pool.reserve(good, 7));
  forward_batch(model(), std::vector<BatchEntry>{{prompt, &good, false}}, pool);
  ASSERT_EQ(good.length, 6);
  ASSERT_TRUE(pool.reserve(short_seq, 3));

  const std::vector<int32_t> one = {5};
  const std::vector<int32_t> bad_id = {5, static_cast<int32_t>(model().config().vocab_size)};
  const std::vector<int32_t> negative = {-1};
  const std::vector<int32_t> none;
  const std::vector<int32_t> five = {5, 6, 7, 8, 9};
  auto expect_rejected = [&](std::vector<BatchEntry> batch, const std::string& what) {
    EXPECT_THROW(forward_batch(model(), batch, pool), InvalidArgument) << what;
    EXPECT_EQ(good.length, 6) << what;
    EXPECT_EQ(short_seq.length, 0) << what;
  };
  expect_rejected({}, "empty batch");
  expect_rejected({{one, &good, false}, {bad_id, &short_seq, false}}, "id == vocab");
  expect_rejected({{negative, &short_seq, false}, {one, &good, false}}, "negative id");
  expect_rejected({{one, &good, false}, {none, &short_seq, false}}, "no tokens");
  expect_rejected({{one, &good, false}, {one, nullptr, false}}, "no sequence");
  expect_rejected({{one, &good, false}, {five, &short_seq, false}}, "5 tokens in 4 positions");
  expect_rejected({{one, &good, false}, {one, &good, false}}, "a sequence twice");
  PagedSequence forged;
  forged.blocks = {99};
  expect_rejected({{one, &good, false}, {one, &forged, false}}, "block outside the pool");

  const std::unique_ptr<Model> other =
      Model::load((kSource / "tests/golden/arch/llama-gqa").string());
  KvBlockPool other_pool(*other, 4, 4);
  EXPECT_THROW(
      forward_batch(model(), std::vector<BatchEntry>{{one, &short_seq, false}}, other_pool),
      InvalidArgument);
  EXPECT_EQ(short_seq.length, 0);

  // Still usable, and still equal to Model::forward.
  const std::vector<Tensor> logits =
      forward_batch(model(), std::vector<BatchEntry>{{one, &good, false}}, pool);
  KvCache cache = model().new_cache();
  model().forward(prompt, cache, false);
  EXPECT_TRUE(same_bits(logits[0], model().forward(one, cache, false)));
  EXPECT_EQ(good.length, 7);
}

// Architectures with q/k norms (Qwen3), mixture-of-experts feed-forward (Mixtral, Qwen3-MoE:
// moe_forward over shared calls), a sliding window shorter than the prompts, dynamic and
// long-context RoPE (frequencies from each entry's own length), Gemma's scaled embedding.
class BatchForwardArchTest : public ::testing::TestWithParam<const char*> {};

TEST_P(BatchForwardArchTest, MatchesForwardAloneBitwise) {
  const std::unique_ptr<Model> model =
      Model::load((kSource / "tests/golden/arch" / GetParam()).string());
  const std::vector<Plan> plans = staggered_plans(7, model->config().vocab_size, 3);
  KvBlockPool pool(*model, 7 * 22, 3);
  expect_same_as_alone(*model, plans, run_batched(*model, pool, plans), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchForwardArchTest,
                         ::testing::Values("qwen3-qknorm", "mixtral-moe", "qwen3-moe",
                                           "mistral-sliding-window", "llama-rope-dynamic",
                                           "phi3-partial-rotary-longrope", "gemma"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace lowbit::models
