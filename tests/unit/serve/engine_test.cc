// The continuous-batching engine on the embedded model: batched outputs equal one-at-a-time
// generation token for token (the server's "32 concurrent requests give the same output" promise
// rests on this), queueing, preemption, cancellation, overload and log-probabilities.
#include "serve/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "models/model.h"
#include "models/paged_kv_cache.h"
#include "runtime/generator.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {
namespace {

const std::string kModelDir = std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m";

EngineOptions with_max_len(int64_t max_model_len) {
  EngineOptions options;
  options.max_model_len = max_model_len;
  return options;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = models::Model::load(kModelDir).release();
    tokenizer_ = new Tokenizer(Tokenizer::from_dir(kModelDir));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
  }

  // Prompts of different lengths cut from the held-out text.
  static std::vector<std::vector<int32_t>> prompts(size_t count) {
    std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/data/text/heldout.txt");
    std::stringstream text;
    text << in.rdbuf();
    const std::vector<int32_t> ids = tokenizer_->encode(text.str().substr(0, 20000));
    std::vector<std::vector<int32_t>> out;
    size_t at = 1;
    for (size_t i = 0; i < count; ++i) {
      const size_t length = 1 + (i * 7) % 37;  // 1..37 tokens
      std::vector<int32_t> prompt{ids[0]};     // BOS
      prompt.insert(prompt.end(), ids.begin() + static_cast<long>(at),
                    ids.begin() + static_cast<long>(at + length));
      at += length + 3;
      out.push_back(prompt);
    }
    return out;
  }

  static std::vector<int32_t> generate_alone(const std::vector<int32_t>& prompt, int32_t tokens) {
    runtime::Generator generator(*model_, tokenizer_);
    runtime::GenerationRequest request;
    request.prompt_ids = prompt;
    request.max_new_tokens = tokens;
    request.ignore_eos = true;
    return generator.generate(request).output_ids;
  }

  static std::vector<int32_t> collect(RequestStream& stream, FinishReason* reason = nullptr) {
    std::vector<int32_t> ids;
    StreamEvent event;
    while (stream.next(event)) {
      ids.insert(ids.end(), event.token_ids.begin(), event.token_ids.end());
      if (event.finish != FinishReason::NONE && reason != nullptr) *reason = event.finish;
    }
    return ids;
  }

  static GenerateParams greedy(const std::vector<int32_t>& prompt, int64_t tokens) {
    GenerateParams params;
    params.prompt_ids = prompt;
    params.max_tokens = tokens;
    params.ignore_eos = true;
    return params;
  }

  // The engine publishes its stats after the step in which requests finished, which may be just
  // after their readers saw the end: wait (bounded) for the step to complete.
  static int64_t blocks_used_when_idle(const Engine& engine) {
    for (int i = 0; i < 400 && engine.stats().kv_blocks_used != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return engine.stats().kv_blocks_used;
  }

  static models::Model* model_;
  static Tokenizer* tokenizer_;
};

models::Model* EngineTest::model_ = nullptr;
Tokenizer* EngineTest::tokenizer_ = nullptr;

// Greedy decoding is deterministic, so batching must not change a single token: forward_batch
// gives each row the arithmetic of a lone forward pass (tests/unit/models/batch_forward_test.cc).
// Run with every max_num_seqs from "all at once" to "a few at a time" (requests then wait in the
// queue and join the batch at step boundaries, mid-way through the others' decoding).
TEST_F(EngineTest, BatchedGreedyOutputEqualsOneAtATime) {
  const auto all = prompts(12);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : all) expected.push_back(generate_alone(p, 24));
  for (int64_t max_seqs : {32, 5, 1}) {
    EngineOptions options;
    options.max_num_seqs = max_seqs;
    options.max_model_len = 256;
    Engine engine(*model_, tokenizer_, options);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : all) streams.push_back(engine.submit(greedy(p, 24)));
    for (size_t i = 0; i < all.size(); ++i) {
      FinishReason reason = FinishReason::NONE;
      EXPECT_EQ(collect(*streams[i], &reason), expected[i]) << "prompt " << i << ", max_num_seqs "
                                                             << max_seqs;
      EXPECT_EQ(reason, FinishReason::LENGTH);
      const RequestSummary summary = streams[i]->summary();
      EXPECT_EQ(summary.output_tokens, 24);
      EXPECT_EQ(summary.prompt_tokens, static_cast<int64_t>(all[i].size()));
    }
    EXPECT_EQ(blocks_used_when_idle(engine), 0) << "every finished request returns its blocks";
  }
}

// A pool far too small for all requests at once: the engine queues and preempts, never corrupts,
// and every request still gets all its tokens. (Recomputed caches go through the prefill path,
// whose summation order differs from decode's, so tokens after a preemption are not compared.)
TEST_F(EngineTest, SmallCachePreemptsAndFinishesEveryRequest) {
  const auto all = prompts(8);
  EngineOptions options;
  options.max_num_seqs = 8;
  options.max_model_len = 128;
  options.block_size = 4;
  options.kv_cache_bytes = 24 * models::KvBlockPool::bytes_per_block(*model_, 4);  // 96 tokens
  Engine engine(*model_, tokenizer_, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : all) streams.push_back(engine.submit(greedy(p, 30)));
  for (size_t i = 0; i < all.size(); ++i) {
    const auto ids = collect(*streams[i]);
    EXPECT_EQ(ids.size(), 30u) << "request " << i;
    if (streams[i]->summary().preemptions == 0) {
      EXPECT_EQ(ids, generate_alone(all[i], 30)) << "request " << i << " was never preempted";
    }
  }
  EXPECT_GT(engine.stats().preemptions, 0) << "the pool was meant to run out";
  EXPECT_EQ(blocks_used_when_idle(engine), 0);
}

// --kv-cache-dtype fp8 stores one byte per cached value instead of four: the same
// --kv-cache-memory holds four times the blocks, and requests still finish with all their tokens.
TEST_F(EngineTest, Fp8KvCacheHoldsFourTimesTheBlocksInTheSameBudget) {
  models::LoadOptions load;
  load.kv_cache.dtype = "fp8";
  const std::unique_ptr<models::Model> fp8_model = models::Model::load(kModelDir, load);
  const int64_t budget = 40 * models::KvBlockPool::bytes_per_block(*model_, 4);
  EXPECT_EQ(models::KvBlockPool::bytes_per_block(*fp8_model, 4) * 4,
            models::KvBlockPool::bytes_per_block(*model_, 4));
  EngineOptions options;
  options.max_num_seqs = 4;
  options.max_model_len = 128;
  options.block_size = 4;
  options.kv_cache_bytes = budget;
  Engine plain(*model_, tokenizer_, options);
  Engine fp8(*fp8_model, tokenizer_, options);
  EXPECT_EQ(plain.stats().kv_blocks_total, 40);
  EXPECT_EQ(fp8.stats().kv_blocks_total, 160);
  const auto all = prompts(4);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : all) streams.push_back(fp8.submit(greedy(p, 20)));
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(collect(*streams[i]).size(), 20u) << i;
  EXPECT_EQ(blocks_used_when_idle(fp8), 0);
}

// --enable-prefix-caching: a request whose prompt starts like a finished one's takes its full
// blocks from the cache (never the last prompt token, whose logits it needs), reports them as
// cached tokens, and generates what a cold engine generates; the counters add up.
TEST_F(EngineTest, PrefixCachingReusesFinishedPromptsBlocks) {
  const std::vector<int32_t> prompt = prompts(6)[5];  // 37 tokens: BOS + 36
  ASSERT_EQ(prompt.size(), 37u);
  EngineOptions options = with_max_len(256);
  options.block_size = 8;
  options.enable_prefix_caching = true;
  Engine engine(*model_, tokenizer_, options);
  EXPECT_TRUE(engine.stats().prefix_caching);
  auto first = engine.submit(greedy(prompt, 12));
  const std::vector<int32_t> cold = collect(*first);
  EXPECT_EQ(first->summary().cached_tokens, 0);
  EXPECT_EQ(cold, generate_alone(prompt, 12));

  auto again = engine.submit(greedy(prompt, 12));
  EXPECT_EQ(collect(*again), cold);
  EXPECT_EQ(again->summary().cached_tokens, 32) << "4 full blocks of 8 (36 positions may be shared)";

  // Same start, another ending: the blocks before the first difference.
  std::vector<int32_t> other = prompt;
  other[20] = other[20] == 5 ? 6 : 5;
  auto third = engine.submit(greedy(other, 4));
  EXPECT_EQ(collect(*third).size(), 4u);
  EXPECT_EQ(third->summary().cached_tokens, 16);
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.prefix_cache_queries, 3 * 37);
  EXPECT_EQ(stats.prefix_cache_hits, 32 + 16);
  EXPECT_EQ(blocks_used_when_idle(engine), 0) << "parked prefix blocks count as free";

  // Off (the default): no cached tokens reported at all.
  Engine plain(*model_, tokenizer_, with_max_len(256));
  auto r = plain.submit(greedy(prompt, 2));
  collect(*r);
  EXPECT_FALSE(r->summary().cached_tokens.has_value());
  EXPECT_FALSE(plain.stats().prefix_caching);
}

TEST_F(EngineTest, CancelledRequestEndsAndFreesItsBlocks) {
  Engine engine(*model_, tokenizer_, with_max_len(512));
  auto stream = engine.submit(greedy(prompts(1)[0], 400));
  StreamEvent event;
  ASSERT_TRUE(stream->next(event));
  stream->cancel();
  FinishReason reason = FinishReason::NONE;
  const auto rest = collect(*stream, &reason);
  EXPECT_EQ(reason, FinishReason::ABORT);
  EXPECT_LT(rest.size(), 399u);
  EXPECT_EQ(blocks_used_when_idle(engine), 0);
}

TEST_F(EngineTest, FullQueueRefusesWithOverloaded) {
  EngineOptions options;
  options.max_num_seqs = 1;
  options.max_waiting = 2;
  options.max_model_len = 512;
  Engine engine(*model_, tokenizer_, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  bool refused = false;
  for (int i = 0; i < 8 && !refused; ++i) {
    try {
      streams.push_back(engine.submit(greedy(prompts(1)[0], 200)));
    } catch (const Overloaded&) {
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
  for (auto& s : streams) s->cancel();
}

TEST_F(EngineTest, RejectsBadRequests) {
  Engine engine(*model_, tokenizer_, with_max_len(16));
  EXPECT_THROW(engine.submit(greedy({}, 4)), InvalidArgument);
  EXPECT_THROW(engine.submit(greedy({1, 99999}, 4)), InvalidArgument);
  EXPECT_THROW(engine.submit(greedy(std::vector<int32_t>(16, 5), 4)), InvalidArgument);
  EXPECT_THROW(engine.submit(greedy({1, 2}, 0)), InvalidArgument);
}

// Log-probabilities are those of the raw model distribution: compared with a log-softmax (in
// double) of Model::forward's logits for the same context. 1e-4: the engine's fp32 log-softmax
// against a double one over 8192 logits.
TEST_F(EngineTest, LogprobsMatchTheModelDistribution) {
  const auto prompt = prompts(3)[2];
  GenerateParams params = greedy(prompt, 4);
  params.logprobs = 3;
  params.prompt_logprobs = true;
  Engine engine(*model_, tokenizer_, with_max_len(128));
  auto stream = engine.submit(params);
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> ids;
  StreamEvent event;
  while (stream->next(event)) {
    ids.insert(ids.end(), event.token_ids.begin(), event.token_ids.end());
    logprobs.insert(logprobs.end(), event.logprobs.begin(), event.logprobs.end());
  }
  ASSERT_EQ(logprobs.size(), 4u);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  models::KvCache cache = model_->new_cache();
  Tensor logits = model_->forward(all, cache, /*all_logits=*/true);
  const int64_t vocab = model_->config().vocab_size;
  auto reference = [&](size_t position, int32_t id) {
    const float* row = logits.data_as<float>() + static_cast<int64_t>(position) * vocab;
    double max = row[0];
    for (int64_t j = 0; j < vocab; ++j) max = std::max(max, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - max);
    return row[id] - max - std::log(sum);
  };
  for (size_t t = 0; t < logprobs.size(); ++t) {
    const size_t position = prompt.size() - 1 + t;
    EXPECT_NEAR(logprobs[t].logprob, reference(position, ids[t]), 1e-4);
    ASSERT_EQ(logprobs[t].top.size(), 3u);
    EXPECT_EQ(logprobs[t].top[0].first, ids[t]) << "greedy picks the most likely token";
    EXPECT_GE(logprobs[t].top[0].second, logprobs[t].top[1].second);
  }
  const RequestSummary summary = stream->summary();
  ASSERT_EQ(summary.prompt_logprobs.size(), prompt.size());
  EXPECT_FALSE(summary.prompt_logprobs[0].has_value()) << "nothing predicts the first token";
  for (size_t i = 1; i < prompt.size(); ++i) {
    ASSERT_TRUE(summary.prompt_logprobs[i].has_value());
    EXPECT_NEAR(summary.prompt_logprobs[i]->logprob, reference(i - 1, prompt[i]), 1e-4);
  }
}

// A runner with its own KV storage (the CPU's forward_batch) that, like the GPU runner, answers
// argmax_only entries with the token id instead of the logits, and records which entries asked.
class ArgmaxRunner : public models::BatchRunner {
 public:
  ArgmaxRunner(const models::Model& model, int64_t blocks)
      : model_(model), pool_(model, blocks, 16) {}
  std::vector<Tensor> run(std::span<const models::BatchEntry> batch) override {
    std::vector<Tensor> out = models::forward_batch(model_, batch, pool_, {});
    for (size_t i = 0; i < batch.size(); ++i) {
      (batch[i].argmax_only ? argmax_entries : logit_entries)++;
      if (!batch[i].argmax_only) continue;
      const float* row = out[i].data_as<float>();
      const int64_t vocab = out[i].dim(1);
      Tensor id = Tensor::zeros(DType::I32, {1});
      id.data_as<int32_t>()[0] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      out[i] = std::move(id);
    }
    return out;
  }
  int64_t capacity_tokens() const override { return pool_.num_blocks() * 16; }
  std::string describe() const override { return "test runner"; }
  int64_t argmax_entries = 0, logit_entries = 0;

 private:
  const models::Model& model_;
  models::KvBlockPool pool_;
};

// Greedy requests without logprobs let the runner pick the token (BatchEntry::argmax_only): the
// output is the same as one-at-a-time generation; a request with logprobs still gets logits.
TEST_F(EngineTest, RunnerArgmaxGivesTheSameGreedyOutput) {
  const auto all = prompts(6);
  auto runner = std::make_shared<ArgmaxRunner>(*model_, 6 * 16);
  EngineOptions options = with_max_len(256);
  options.runner = runner;
  Engine engine(*model_, tokenizer_, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : all) streams.push_back(engine.submit(greedy(p, 16)));
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(collect(*streams[i]), generate_alone(all[i], 16)) << "prompt " << i;
  }
  EXPECT_GT(runner->argmax_entries, 0);
  EXPECT_EQ(runner->logit_entries, 0) << "every request was greedy without logprobs";

  GenerateParams with_logprobs = greedy(all[0], 4);
  with_logprobs.logprobs = 1;
  StreamEvent event;
  auto stream = engine.submit(with_logprobs);
  int64_t logprobs = 0;
  while (stream->next(event)) logprobs += static_cast<int64_t>(event.logprobs.size());
  EXPECT_EQ(logprobs, 4);
  EXPECT_GT(runner->logit_entries, 0) << "logprobs need the logits on the host";
}

TEST_F(EngineTest, StopStringEndsWithoutIt) {
  const auto prompt = prompts(4)[3];
  const auto alone = generate_alone(prompt, 40);
  const std::string text = tokenizer_->decode(alone, true);
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(8, 3);
  GenerateParams params = greedy(prompt, 40);
  params.stop = {stop};
  Engine engine(*model_, tokenizer_, with_max_len(128));
  auto stream = engine.submit(params);
  std::string out;
  StreamEvent event;
  FinishReason reason = FinishReason::NONE;
  std::string stop_reason;
  while (stream->next(event)) {
    out += event.text;
    if (event.finish != FinishReason::NONE) {
      reason = event.finish;
      stop_reason = event.stop_reason;
    }
  }
  EXPECT_EQ(reason, FinishReason::STOP);
  EXPECT_EQ(stop_reason, stop);
  EXPECT_EQ(out, text.substr(0, text.find(stop)));
}

}  // namespace
}  // namespace lowbit::serve
