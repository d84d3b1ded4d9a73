// The tensor-parallel split (gpu/tensor_parallel.h) on the CPU, no GPU needed: every GPU's part of a
// quantized weight must dequantize to exactly the matching rows / columns of the whole weight (the
// reference is the unsplit layer, element by element: a part takes the whole's scales, so equality
// is exact), and the plan must give every rank its heads, KV heads, MLP and vocabulary ranges.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "gpu/tensor_parallel.h"
#include "lowbit/error.h"
#include "models/model_config.h"

namespace lowbit::gpu {
namespace {

models::ModelConfig config(int64_t heads, int64_t kv_heads, int64_t vocab) {
  models::ModelConfig c;
  c.source = "config.json";
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 64;
  c.hidden_size = heads * 64;
  c.vocab_size = vocab;
  return c;
}

TEST(TensorParallelPlan, SplitsHeadsMlpAndVocabularyContiguously) {
  // The embedded model's shape: 6 heads, 2 KV heads, intermediate 1024, vocab 8192.
  const models::ModelConfig c = config(6, 2, 8193);  // an odd vocabulary: the last rank has fewer
  const TpPlan a = plan_tensor_parallel(c, 1024, 0, 2), b = plan_tensor_parallel(c, 1024, 1, 2);
  EXPECT_EQ(a.heads, 3);
  EXPECT_EQ(b.head_begin, 3);
  EXPECT_EQ(a.kv_heads, 1);
  EXPECT_EQ(b.kv_head_begin, 1);
  EXPECT_EQ(b.intermediate_begin, 512);
  EXPECT_EQ(a.vocab_rows, 4097);
  EXPECT_EQ(b.vocab_begin, 4097);
  EXPECT_EQ(b.vocab_rows, 4096);
  const Split q = b.q_rows(64);
  EXPECT_EQ(q.dim, Split::Dim::ROWS);
  EXPECT_EQ(q.begin, 192);
  EXPECT_EQ(q.end, 384);
  EXPECT_EQ(b.o_cols(64).dim, Split::Dim::COLS);
  EXPECT_TRUE(plan_tensor_parallel(c, 1024, 0, 1).q_rows(64).is_whole());
}

TEST(TensorParallelPlan, ReplicatesKvHeadsWhenThereAreFewerThanGpus) {
  // 8 query heads, 2 KV heads over 4 GPUs: ranks 0-1 share KV head 0, ranks 2-3 KV head 1, and
  // each rank's two query heads belong to that KV head's group (heads 0-3 → KV 0, 4-7 → KV 1).
  const models::ModelConfig c = config(8, 2, 100);
  for (int r = 0; r < 4; ++r) {
    const TpPlan p = plan_tensor_parallel(c, 256, r, 4);
    EXPECT_EQ(p.kv_heads, 1);
    EXPECT_EQ(p.kv_head_begin, r / 2) << "rank " << r;
    EXPECT_EQ(p.head_begin / 4, p.kv_head_begin) << "rank " << r;
  }
}

TEST(TensorParallelPlan, RefusesShapesThatDoNotDivideNamingTheField) {
  try {
    plan_tensor_parallel(config(6, 2, 100), 1024, 0, 4);
    FAIL() << "6 heads over 4 GPUs";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_tensor_parallel(config(12, 3, 100), 1024, 0, 2), InvalidArgument);  // KV 3
  EXPECT_THROW(plan_tensor_parallel(config(8, 8, 100), 1000 + 1, 0, 2), InvalidArgument);
  EXPECT_THROW(plan_tensor_parallel(config(8, 8, 100), 1024, 0, 0), InvalidArgument);
}

kernels::IntWeights random_int(int64_t rows, int64_t cols, int64_t group, bool zeros, int seed) {
  std::mt19937 rng(seed);
  kernels::IntWeights w;
  w.bits = 4;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group;
  for (int64_t i = 0; i < rows * cols; ++i) w.codes.push_back(static_cast<uint8_t>(rng() % 16));
  for (int64_t i = 0; i < rows * w.groups(); ++i) {
    w.scales.push_back(0.001f + static_cast<float>(rng() % 1000) * 1e-4f);
    if (zeros) w.zeros.push_back(static_cast<uint8_t>(rng() % 16));
  }
  return w;
}

float dequant(const kernels::IntWeights& w, int64_t r, int64_t c) {
  const int32_t g = w.group_of(c);
  return (static_cast<float>(w.codes[static_cast<size_t>(r * w.cols + c)]) - w.zero(r, g)) *
         w.scales[static_cast<size_t>(r * w.groups() + g)];
}

// Every element of `part` equals the whole's element at the part's offset.
void expect_int_part(const kernels::IntWeights& whole, const kernels::IntWeights& part, int64_t r0,
                     int64_t c0) {
  for (int64_t r = 0; r < part.rows; ++r) {
    for (int64_t c = 0; c < part.cols; ++c) {
      ASSERT_EQ(dequant(part, r, c), dequant(whole, r0 + r, c0 + c)) << r << "," << c;
    }
  }
}

TEST(TensorParallelSlice, IntGroupsFollowTheirRowsAndColumns) {
  for (bool zeros : {false, true}) {
    const kernels::IntWeights w = random_int(6, 256, 64, zeros, zeros ? 2 : 1);
    const kernels::IntWeights top = slice_int_weights(w, Split::rows(0, 4), "q_proj");
    EXPECT_EQ(top.rows, 4);
    expect_int_part(w, top, 0, 0);
    for (int64_t begin : {0, 128}) {
      const kernels::IntWeights part = slice_int_weights(w, Split::cols(begin, begin + 128), "down");
      EXPECT_EQ(part.cols, 128);
      EXPECT_EQ(part.groups(), 2);
      expect_int_part(w, part, 0, begin);
    }
  }
  // Per-channel scales (one group over all columns) need no boundary.
  const kernels::IntWeights channel = random_int(4, 96, 96, false, 3);
  expect_int_part(channel, slice_int_weights(channel, Split::cols(48, 96), "o"), 0, 48);
}

TEST(TensorParallelSlice, IntGroupSplitBetweenGpusOrActOrderIsRefusedNamingTheLayer) {
  const kernels::IntWeights w = random_int(4, 384, 128, false, 4);
  try {
    slice_int_weights(w, Split::cols(0, 192), "model.layers.0.self_attn.o_proj");
    FAIL() << "a group of 128 split at column 192";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.o_proj"), std::string::npos);
  }
  kernels::IntWeights act_order = random_int(4, 256, 64, false, 5);
  for (int64_t c = 0; c < 256; ++c) act_order.g_idx.push_back(static_cast<int32_t>((c * 7) % 4));
  EXPECT_THROW(slice_int_weights(act_order, Split::cols(0, 128), "down"), Unsupported);
  // Rows of an act-order layer keep g_idx: fine. So is a g_idx that is just c / group_size.
  expect_int_part(act_order, slice_int_weights(act_order, Split::rows(2, 4), "gate"), 2, 0);
  kernels::IntWeights trivial = random_int(4, 256, 64, false, 6);
  for (int64_t c = 0; c < 256; ++c) trivial.g_idx.push_back(static_cast<int32_t>(c / 64));
  expect_int_part(trivial, slice_int_weights(trivial, Split::cols(128, 256), "down"), 0, 128);
}

kernels::Fp8Weights random_fp8(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols) {
  std::mt19937 rng(7);
  kernels::Fp8Weights w;
  w.rows = rows;
  w.cols = cols;
  w.block_rows = block_rows;
  w.block_cols = block_cols;
  for (int64_t i = 0; i < rows * cols; ++i) w.codes.push_back(static_cast<uint8_t>(rng() % 0x7f));
  const int64_t scale_rows = (rows + block_rows - 1) / block_rows;
  for (int64_t i = 0; i < scale_rows * w.scale_cols(); ++i) {
    w.scales.push_back(0.01f + static_cast<float>(rng() % 100) * 1e-3f);
  }
  return w;
}

void expect_fp8_part(const kernels::Fp8Weights& whole, const kernels::Fp8Weights& part, int64_t r0,
                     int64_t c0) {
  for (int64_t r = 0; r < part.rows; ++r) {
    for (int64_t c = 0; c < part.cols; ++c) {
      const size_t i = static_cast<size_t>(r * part.cols + c);
      const size_t j = static_cast<size_t>((r0 + r) * whole.cols + c0 + c);
      ASSERT_EQ(part.codes[i], whole.codes[j]);
      ASSERT_EQ(part.scale(r, c), whole.scale(r0 + r, c0 + c)) << r << "," << c;
    }
  }
}

TEST(TensorParallelSlice, Fp8TensorChannelAndBlockScalesFollowTheirElements) {
  const kernels::Fp8Weights tensor = random_fp8(8, 256, 8, 256);  // one scale
  expect_fp8_part(tensor, slice_fp8_weights(tensor, Split::rows(4, 8), "q"), 4, 0);
  expect_fp8_part(tensor, slice_fp8_weights(tensor, Split::cols(128, 256), "o"), 0, 128);
  const kernels::Fp8Weights channel = random_fp8(8, 256, 1, 256);
  expect_fp8_part(channel, slice_fp8_weights(channel, Split::rows(2, 6), "q"), 2, 0);
  expect_fp8_part(channel, slice_fp8_weights(channel, Split::cols(0, 128), "o"), 0, 0);
  const kernels::Fp8Weights block = random_fp8(256, 512, 128, 128);
  expect_fp8_part(block, slice_fp8_weights(block, Split::rows(128, 256), "gate"), 128, 0);
  expect_fp8_part(block, slice_fp8_weights(block, Split::cols(256, 512), "down"), 0, 256);
  EXPECT_THROW(slice_fp8_weights(block, Split::cols(0, 192), "down"), Unsupported);
}

TEST(TensorParallelSlice, MatricesAndBiases) {
  const std::vector<int> m = {0, 1, 2, 3, 4, 5};  // [2, 3]
  EXPECT_EQ(slice_matrix(m, 2, 3, Split::rows(1, 2)), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(slice_matrix(m, 2, 3, Split::cols(1, 3)), (std::vector<int>{1, 2, 4, 5}));
  EXPECT_EQ(slice_matrix(m, 2, 3, Split::whole()), m);
  const std::vector<float> bias = {1, 2, 3, 4};
  EXPECT_EQ(slice_bias(bias, Split::rows(2, 4), 1), (std::vector<float>{3, 4}));
  // A row-parallel layer's bias is added once: by rank 0.
  EXPECT_EQ(slice_bias(bias, Split::cols(0, 8), 0), bias);
  EXPECT_TRUE(slice_bias(bias, Split::cols(8, 16), 1).empty());
}

}  // namespace
}  // namespace lowbit::gpu
