// The serving engine: continuous batching over a paged KV cache.
//
// One scheduler thread owns the model's KV block pool. Requests arrive from any thread (submit)
// and wait in a bounded FIFO queue; at every step boundary the scheduler drops cancelled
// requests (their blocks return to the pool at once), admits waiting ones while the running set
// and the pool allow, and runs one batched forward pass (models::forward_batch) holding the whole
// prompt of each newly admitted request and the last token of every running one. Each request
// samples its next token from its own logits row with its own sampler (seeded per request), and
// its new text, token ids and log-probabilities are pushed to its RequestStream, which the HTTP
// handler reads. A running request that needs a new block when the pool is exhausted preempts the
// most recently admitted one, which goes back to the head of the queue and recomputes its cache
// when it is readmitted (vLLM's recompute preemption): running requests are never corrupted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lowbit/error.h"
#include "runtime/sampler.h"

namespace lowbit {
class Tokenizer;
namespace models {
class Model;
class KvBlockPool;
class BatchRunner;
}  // namespace models
}  // namespace lowbit

namespace lowbit::serve {

// The engine cannot take the request now (its queue is full): the server answers 503 with
// Retry-After.
class Overloaded : public Error {
 public:
  using Error::Error;
};

struct EngineOptions {
  int64_t max_num_seqs = 32;      // sequences decoded together at most
  int64_t max_model_len = 0;      // prompt + output tokens per sequence; 0: the model's limit
  int64_t kv_cache_bytes = 0;     // KV block pool budget; 0: max_num_seqs full-length sequences
  int64_t block_size = 16;        // token positions per KV block
  int64_t max_waiting = 1024;     // queued requests beyond this are refused (Overloaded)
  int64_t max_prefill_tokens = 2048;  // prompt tokens admitted per step (one prompt may exceed it)
  // true: every sequence's logits are bit-identical to running it alone (`lowbit generate`), so
  // greedy output never depends on what else is batched. Free for unquantized models (their
  // decode rows share matmul calls either way); quantized models then batch only attention, not
  // their matmuls. false: one matmul per layer for the whole step (last-bit differences, as
  // between batch sizes on a GPU). Unset: true for unquantized models, false for quantized ones.
  // See models::BatchOptions.
  std::optional<bool> batch_invariant;
  // Runs the steps instead of the CPU (the GPU backend, apps/cli): the KV pool is then sized by
  // its capacity_tokens() and keeps no bytes here. Null: models::forward_batch on the CPU.
  std::shared_ptr<models::BatchRunner> runner;
  // Automatic prefix caching (vLLM's --enable-prefix-caching): full KV blocks of finished and
  // running sequences are indexed by their token prefix and shared by later requests whose
  // prompts start the same way, which then prefill only the rest. CPU engine only (a runner
  // keeps its own cache); off for length-dependent RoPE. Shared prefixes were computed in other
  // batches, so logits may differ from `lowbit generate`'s in the last bits.
  bool enable_prefix_caching = false;
  // OpenMP threads of the forward passes (0: OpenMP's default). Set on the scheduler thread itself:
  // a new thread does not inherit the omp_set_num_threads of the thread that made it.
  int threads = 0;
};

struct GenerateParams {
  std::vector<int32_t> prompt_ids;
  int64_t max_tokens = 16;  // >= 1; also capped by max_model_len
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;       // stop strings (not part of the output unless included)
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t logprobs = -1;          // -1: none; k >= 0: each sampled token's logprob and the top k
  bool prompt_logprobs = false;   // log-probabilities of the prompt tokens too (echo + logprobs)
};

// One generated (or prompt) token with its log-probability under the raw model distribution.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the k most likely ids with their logprobs
};

enum class FinishReason { NONE, STOP, LENGTH, ABORT };

// What one step adds to a request's output.
struct StreamEvent {
  std::vector<int32_t> token_ids;         // tokens generated this step
  std::vector<TokenLogprob> logprobs;     // one per token when logprobs >= 0
  std::string text;                       // new output text (held back while a stop string may start)
  FinishReason finish = FinishReason::NONE;
  std::string stop_reason;                // the stop string, or the stop token id, that ended it
  bool stop_reason_is_token = false;
};

// Per-request results that are known once: prompt log-probabilities (first token: none) and the
// timing the server reports and exports as metrics.
struct RequestSummary {
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;  // when asked for
  double queued_seconds = 0;     // submit → admitted (last admission, after preemptions)
  double first_token_seconds = 0;  // submit → first token
  double total_seconds = 0;        // submit → finished
  int64_t preemptions = 0;
  // Prompt tokens taken from the prefix cache at the last admission; nullopt when prefix caching
  // is off.
  std::optional<int64_t> cached_tokens;
};

// The channel between the scheduler and one request's reader.
class RequestStream {
 public:
  // Blocks until new output arrives or the request finishes; merges everything pending into
  // `out`. Returns false once the request has finished and everything was read.
  bool next(StreamEvent& out);
  // Like next(), waiting at most `seconds` (false with an empty event on timeout while running).
  bool next_for(StreamEvent& out, double seconds, bool* timed_out);
  // The reader is gone (client disconnected): the scheduler frees the request at the next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // Valid once next() has returned false.
  RequestSummary summary() const;

  // Scheduler side.
  void push(StreamEvent event);
  void finish(RequestSummary summary);
  void set_prompt_logprobs(std::vector<std::optional<TokenLogprob>> logprobs);

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> pending_;
  bool finished_ = false;
  RequestSummary summary_;
  std::atomic<bool> cancelled_{false};
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t block_size = 0;
  int64_t steps = 0;
  int64_t preemptions = 0;
  bool prefix_caching = false;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of which found there
  double kv_usage() const {
    return kv_blocks_total > 0 ? static_cast<double>(kv_blocks_used) / kv_blocks_total : 0.0;
  }
};

class Engine {
 public:
  // Allocates the KV block pool now (OutOfMemory naming the size) and starts the scheduler
  // thread. `tokenizer` may be null: then outputs have no text and stop strings are refused.
  Engine(const models::Model& model, const Tokenizer* tokenizer, EngineOptions options);
  ~Engine();  // finishes queued and running requests as ABORT and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws InvalidArgument for an empty prompt, ids outside the vocabulary, a
  // prompt that leaves no room under max_model_len or can never fit the KV pool, stop strings
  // without a tokenizer; Overloaded when max_waiting requests are queued already.
  std::shared_ptr<RequestStream> submit(GenerateParams params);

  EngineStats stats() const;
  int64_t max_model_len() const { return max_model_len_; }
  bool batch_invariant() const { return batch_invariant_; }
  const EngineOptions& options() const { return options_; }

  struct Request;  // the scheduler's record of one request (engine.cc)

 private:
  void loop();
  bool step();  // one scheduling round; false when there was nothing to do
  void drop_cancelled();
  void admit();
  bool ensure_decode_blocks();
  void preempt(Request& victim);
  // Releases the request's blocks and ends its stream; `announce` pushes an event carrying
  // `reason` (when no step output did).
  void finish(Request& request, FinishReason reason, bool announce = true);
  void publish_stats();

  const models::Model& model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  int64_t max_model_len_ = 0;
  bool batch_invariant_ = true;
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<models::KvBlockPool> pool_;

  mutable std::mutex mutex_;  // guards waiting_, stopping_, and the stats snapshot
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Request>> waiting_;
  bool stopping_ = false;
  EngineStats stats_;

  std::vector<std::unique_ptr<Request>> running_;  // scheduler thread only
  int64_t next_admission_ = 0;                      // scheduler thread only
  std::thread thread_;
};

}  // namespace lowbit::serve
