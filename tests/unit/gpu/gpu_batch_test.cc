// GpuModel::forward_batch (continuous batching on the GPU) against transformers' golden logits of
// the embedded model: three prompts of different lengths run together, first a batched prefill of
// their first halves, then steps that mix one sequence's multi-token chunk with the others' single
// tokens (the varlen prefill kernel), then pure decode steps (the batched decode kernel) as the
// sequences finish one by one. Every row is compared with the golden row of its position, with
// gpu_model_test.cc's tolerances (logit_compare.h); a wrong block table, slot, query start or
// gathered LM-head row moves logits by far more. On two GPUs when two are visible, too.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "gpu/gpu_model.h"
#include "kernels/cuda/device_buffer.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "logit_compare.h"

namespace lowbit::gpu {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = LOWBIT_SOURCE_DIR;

struct Prompt {
  std::vector<int32_t> ids;
  Tensor golden;  // [n, vocab] fp32
};

std::vector<Prompt> golden_prompts() {
  const auto file = formats::SafetensorsFile::open(
      (kSourceDir / "tests/golden/ref-llama-19m/reference_logits.safetensors").string());
  std::vector<Prompt> prompts;
  for (int p = 0; p < 3; ++p) {
    const Tensor ids = file->get("prompt" + std::to_string(p) + ".input_ids");
    const int64_t* data = ids.data_as<const int64_t>();
    prompts.push_back({std::vector<int32_t>(data, data + ids.numel()),
                       file->get("prompt" + std::to_string(p) + ".logits").to_f32()});
  }
  return prompts;
}

// Runs the three prompts as described above; returns a failure description or "".
std::string run_schedule(GpuModel& gpu, const std::vector<Prompt>& prompts) {
  const int64_t vocab = gpu.cpu_model().config().vocab_size;
  std::vector<GpuSequence> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) seqs.push_back(gpu.new_sequence());
  std::vector<size_t> done(prompts.size(), 0);  // tokens of each prompt already run
  auto check = [&](size_t i, const Tensor& logits, size_t first, size_t rows) -> std::string {
    const std::string diff = compare_rows(logits.data_as<const float>(),
                                          prompts[i].golden.data_as<const float>() + first * vocab,
                                          static_cast<int64_t>(rows), vocab);
    return diff.empty() ? "" : "prompt " + std::to_string(i) + " rows from " + std::to_string(first) + ": " + diff;
  };
  // Step 1: batched prefill of each prompt's first half; prompt 0 asks for every row.
  {
    std::vector<GpuModel::BatchItem> items;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const size_t half = std::max<size_t>(1, prompts[i].ids.size() / 2);
      items.push_back({std::span<const int32_t>(prompts[i].ids.data(), half), &seqs[i], i == 0});
    }
    const std::vector<Tensor> out = gpu.forward_batch(items);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const size_t n = items[i].tokens.size();
      const std::string d = i == 0 ? check(i, out[i], 0, n) : check(i, out[i], n - 1, 1);
      if (!d.empty()) return "prefill: " + d;
      done[i] = n;
    }
  }
  // Then steps until every prompt is consumed: prompt 2 (the longest left) takes 3 tokens per
  // step while it can (mixed steps), the others one.
  for (int step = 0;; ++step) {
    std::vector<GpuModel::BatchItem> items;
    std::vector<size_t> which;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const size_t left = prompts[i].ids.size() - done[i];
      if (left == 0) continue;
      const size_t take = (i == 2 && step % 2 == 0) ? std::min<size_t>(3, left) : 1;
      items.push_back({std::span<const int32_t>(prompts[i].ids.data() + done[i], take), &seqs[i], false});
      which.push_back(i);
    }
    if (items.empty()) break;
    const std::vector<Tensor> out = gpu.forward_batch(items);
    for (size_t j = 0; j < items.size(); ++j) {
      const size_t i = which[j];
      done[i] += items[j].tokens.size();
      const std::string d = check(i, out[j], done[i] - 1, 1);
      if (!d.empty()) return "step " + std::to_string(step) + ": " + d;
      if (seqs[i].length() != static_cast<int64_t>(done[i])) return "sequence length not advanced";
    }
  }
  return "";
}

class GpuBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(GpuBatchTest, MixedPrefillAndDecodeStepsMatchTransformers) {
  auto cpu = load_model_for_gpu((kSourceDir / "models/ref-llama-19m").string(), {}, 0);
  auto gpu = GpuModel::load(*cpu);
  EXPECT_EQ(run_schedule(*gpu, golden_prompts()), "");
}

TEST_F(GpuBatchTest, MixedStepsMatchTransformersOnTwoGpus) {
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  auto cpu = load_model_for_gpu((kSourceDir / "models/ref-llama-19m").string(), {}, 0);
  GpuModelOptions options;
  options.tensor_parallel_size = 2;
  auto gpu = GpuModel::load(*cpu, options);
  EXPECT_EQ(run_schedule(*gpu, golden_prompts()), "");
}

TEST_F(GpuBatchTest, RejectsBadBatchesWithoutChangingAnySequence) {
  auto cpu = load_model_for_gpu((kSourceDir / "models/ref-llama-19m").string(), {}, 0);
  GpuModelOptions options;
  options.max_step_tokens = 8;
  options.max_seq_len = 64;
  auto gpu = GpuModel::load(*cpu, options);
  GpuSequence a = gpu->new_sequence(), b = gpu->new_sequence();
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  const std::vector<int32_t> bad = {1, 999999};
  using Items = std::vector<GpuModel::BatchItem>;
  EXPECT_THROW(gpu->forward_batch(Items{{ids, &a, false}, {ids, &a, false}}), InvalidArgument);
  EXPECT_THROW(gpu->forward_batch(Items{{ids, &a, false}, {ids, &b, false}}), InvalidArgument);  // 10 > 8 rows
  EXPECT_THROW(gpu->forward_batch(Items{{ids, &a, false}, {bad, &b, false}}), InvalidArgument);
  EXPECT_THROW(gpu->forward_batch(Items{}), InvalidArgument);
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(b.length(), 0);
  const std::vector<Tensor> out = gpu->forward_batch(Items{{ids, &a, true}, {std::span<const int32_t>(ids.data(), 2), &b, false}});
  EXPECT_EQ(out[0].dim(0), 5);
  EXPECT_EQ(out[1].dim(0), 1);
  EXPECT_EQ(a.length(), 5);
  EXPECT_EQ(b.length(), 2);
}

}  // namespace
}  // namespace lowbit::gpu
