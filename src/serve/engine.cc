#include "serve/engine.h"

#include <omp.h>

#include <algorithm>

#include "core/log.h"
#include "models/kv_cache_quant.h"
#include "models/model.h"
#include "models/paged_kv_cache.h"
#include "serve/request_state.h"

namespace lowbit::serve {

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Blocks kept free at admission, so that running sequences can grow without preempting each
// other at once (vLLM's watermark, 1% of the pool).
int64_t admission_watermark(int64_t num_blocks) { return std::max<int64_t>(1, num_blocks / 100); }

}  // namespace

// ---- RequestStream --------------------------------------------------------------------------

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(event));
  }
  ready_.notify_all();
}

void RequestStream::finish(RequestSummary summary) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    summary.prompt_logprobs = std::move(summary_.prompt_logprobs);
    summary_ = std::move(summary);
    finished_ = true;
  }
  ready_.notify_all();
}

void RequestStream::set_prompt_logprobs(std::vector<std::optional<TokenLogprob>> logprobs) {
  std::lock_guard<std::mutex> lock(mutex_);
  summary_.prompt_logprobs = std::move(logprobs);
}

RequestSummary RequestStream::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return summary_;
}

namespace {

// Appends `from` to `into` (the reader asked for everything pending at once).
void merge(StreamEvent& into, StreamEvent& from) {
  into.token_ids.insert(into.token_ids.end(), from.token_ids.begin(), from.token_ids.end());
  for (auto& lp : from.logprobs) into.logprobs.push_back(std::move(lp));
  into.text += from.text;
  if (from.finish != FinishReason::NONE) {
    into.finish = from.finish;
    into.stop_reason = from.stop_reason;
    into.stop_reason_is_token = from.stop_reason_is_token;
  }
}

}  // namespace

bool RequestStream::next_for(StreamEvent& out, double seconds, bool* timed_out) {
  out = StreamEvent{};
  if (timed_out != nullptr) *timed_out = false;
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] { return !pending_.empty() || finished_; };
  if (seconds < 0) {
    ready_.wait(lock, ready);
  } else if (!ready_.wait_for(lock, std::chrono::duration<double>(seconds), ready)) {
    if (timed_out != nullptr) *timed_out = true;
    return true;
  }
  if (pending_.empty()) return false;  // finished and drained
  while (!pending_.empty()) {
    merge(out, pending_.front());
    pending_.pop_front();
  }
  return true;
}

bool RequestStream::next(StreamEvent& out) { return next_for(out, -1.0, nullptr); }

// ---- Engine ---------------------------------------------------------------------------------

Engine::Engine(const models::Model& model, const Tokenizer* tokenizer, EngineOptions options)
    : model_(model), tokenizer_(tokenizer), options_(options) {
  const auto& config = model.config();
  LOWBIT_CHECK(options_.max_num_seqs >= 1, "--max-num-seqs must be at least 1");
  LOWBIT_CHECK(options_.block_size >= 1, "--block-size must be at least 1");
  max_model_len_ = options_.max_model_len > 0 ? options_.max_model_len
                                              : config.max_position_embeddings;
  LOWBIT_CHECK(max_model_len_ >= 2, "--max-model-len must be at least 2 (one prompt token, one output)");
  if (options_.max_model_len > config.max_position_embeddings && config.max_position_embeddings > 0) {
    log_warn("--max-model-len " + std::to_string(options_.max_model_len) +
              " exceeds the model's max_position_embeddings " +
              std::to_string(config.max_position_embeddings));
  }
  const int64_t block_bytes = models::KvBlockPool::bytes_per_block(model, options_.block_size);
  int64_t blocks = 0;
  if (options_.runner) {  // its own KV storage: the pool counts its blocks
    blocks = options_.runner->capacity_tokens() / options_.block_size;
    LOWBIT_CHECK(blocks >= 1, options_.runner->describe() + ": no room for a KV block");
  } else if (options_.kv_cache_bytes > 0) {
    blocks = options_.kv_cache_bytes / block_bytes;
    LOWBIT_CHECK(blocks >= 1, "--kv-cache-memory " + std::to_string(options_.kv_cache_bytes) +
                                  " bytes is less than one KV block (" +
                                  std::to_string(block_bytes) + " bytes)");
  } else {
    blocks = options_.max_num_seqs * ((max_model_len_ + options_.block_size - 1) / options_.block_size);
  }
  pool_ = std::make_unique<models::KvBlockPool>(model, blocks, options_.block_size,
                                                /*with_storage=*/!options_.runner);
  if (options_.enable_prefix_caching) {
    if (options_.runner) {
      log_warn("--enable-prefix-caching is ignored: " + options_.runner->describe() +
               " keeps its own KV cache, which does not share prefixes yet (the CPU engine does)");
    } else if (model.rotary().length_dependent()) {
      log_warn("--enable-prefix-caching is ignored: this model's RoPE depends on the sequence "
               "length, so cached keys of one request are not those of another");
    } else {
      pool_->enable_prefix_caching();
    }
  }
  stats_.prefix_caching = pool_->prefix_caching();
  eos_ids_ = config.eos_token_ids;
  const bool quantized = model.quantization().rfind("none", 0) != 0;
  batch_invariant_ = options_.batch_invariant.value_or(!quantized);
  stats_.kv_blocks_total = blocks;
  stats_.block_size = options_.block_size;
  log_info("KV cache: " + std::to_string(blocks) + " blocks of " +
            std::to_string(options_.block_size) + " tokens (" +
            (options_.runner ? "on " + options_.runner->describe()
                             : std::to_string(blocks * block_bytes / (1 << 20)) + " MiB" +
                                   (model.kv_cache_quantizer() != nullptr &&
                                            model.kv_cache_quantizer()->active()
                                        ? ", one fp8 byte per value"
                                        : "")) +
            "), max model length " +
            std::to_string(max_model_len_) + ", up to " + std::to_string(options_.max_num_seqs) +
            " sequences per step, " +
            (batch_invariant_ ? "batch-invariant" : "one matmul per layer per step") + " batching" +
            (pool_->prefix_caching() ? ", prefix caching" : ""));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> Engine::submit(GenerateParams params) {
  const int64_t prompt = static_cast<int64_t>(params.prompt_ids.size());
  LOWBIT_CHECK(prompt >= 1, "the prompt is empty: give at least one token");
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < params.prompt_ids.size(); ++i) {
    const int32_t id = params.prompt_ids[i];
    LOWBIT_CHECK(id >= 0 && id < vocab, "prompt token " + std::to_string(i) + " is " +
                                            std::to_string(id) + ", outside the vocabulary [0, " +
                                            std::to_string(vocab) + ")");
  }
  LOWBIT_CHECK(prompt < max_model_len_,
               "the prompt has " + std::to_string(prompt) + " tokens; the maximum model length is " +
                   std::to_string(max_model_len_) + ", which leaves no room for output");
  LOWBIT_CHECK(params.max_tokens >= 1, "max_tokens must be at least 1");
  LOWBIT_CHECK(params.stop.empty() || tokenizer_ != nullptr,
               "stop strings need a tokenizer, and this model has none");
  const int64_t needed = pool_->blocks_for(prompt + 1);
  LOWBIT_CHECK(needed <= pool_->num_blocks(),
               "the prompt needs " + std::to_string(needed) + " KV blocks but the whole cache has " +
                   std::to_string(pool_->num_blocks()) + ": raise --kv-cache-memory");
  params.sampling.validate();
  auto request = std::make_unique<Request>(std::move(params), tokenizer_);
  std::shared_ptr<RequestStream> stream = request->stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting) {
      throw Overloaded("the server is busy: " + std::to_string(waiting_.size()) +
                       " requests are already waiting");
    }
    waiting_.push_back(std::move(request));
    stats_.waiting = static_cast<int64_t>(waiting_.size());
  }
  wake_.notify_all();
  return stream;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Engine::loop() {
  if (options_.threads > 0) omp_set_num_threads(options_.threads);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_) break;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A failed step (out of memory, a bug) ends the requests in it, not the server.
      log_message(LogLevel::ERROR, std::string("engine step failed: ") + e.what());
      for (auto& r : running_) finish(*r, FinishReason::ABORT);
      running_.clear();
    }
  }
  std::deque<std::unique_ptr<Request>> waiting;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting.swap(waiting_);
  }
  for (auto& r : running_) finish(*r, FinishReason::ABORT);
  for (auto& r : waiting) finish(*r, FinishReason::ABORT);
  running_.clear();
}

void Engine::finish(Request& request, FinishReason reason, bool announce) {
  pool_->release(request.seq);
  if (announce) {
    StreamEvent event;
    event.finish = reason;
    request.stream->push(std::move(event));
  }
  const Clock::time_point now = Clock::now();
  RequestSummary summary;
  summary.prompt_tokens = request.prompt_len;
  summary.output_tokens = request.output_count();
  summary.queued_seconds = seconds_between(request.submitted, request.admitted);
  summary.first_token_seconds =
      request.first_token ? seconds_between(request.submitted, *request.first_token) : 0.0;
  summary.total_seconds = seconds_between(request.submitted, now);
  summary.preemptions = request.preemptions;
  if (pool_->prefix_caching()) summary.cached_tokens = request.cached_tokens;
  request.stream->finish(std::move(summary));
}

void Engine::drop_cancelled() {
  for (auto& r : running_) {
    if (r->stream->cancelled()) finish(*r, FinishReason::ABORT);
  }
  std::erase_if(running_, [](const auto& r) { return r->stream->cancelled(); });
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& r : waiting_) {
    if (r->stream->cancelled()) finish(*r, FinishReason::ABORT);
  }
  std::erase_if(waiting_, [](const auto& r) { return r->stream->cancelled(); });
}

void Engine::admit() {
  int64_t prefill_tokens = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    Request& r = *waiting_.front();
    const int64_t tokens = static_cast<int64_t>(r.context.size());
    // Cached full blocks of the prompt's start (never the last token: its logits are needed;
    // never with prompt logprobs, which need every position's logits).
    const bool lookup = pool_->prefix_caching() && !r.params.prompt_logprobs;
    const int64_t cached = lookup ? pool_->share_prefix(r.seq, r.context, tokens - 1) : 0;
    const int64_t computed = tokens - cached;
    const int64_t needed = pool_->blocks_for(tokens) - static_cast<int64_t>(r.seq.blocks.size());
    // The watermark keeps room for running sequences to grow; an idle engine takes any request
    // that fits at all.
    const int64_t reserve = running_.empty() ? 0 : admission_watermark(pool_->num_blocks());
    if ((prefill_tokens > 0 && prefill_tokens + computed > options_.max_prefill_tokens) ||
        pool_->free_blocks() - needed < reserve || !pool_->reserve(r.seq, tokens)) {
      pool_->release(r.seq);  // the shared prefix, if any, goes back (parked) until next time
      break;
    }
    if (lookup) {
      stats_.prefix_cache_queries += tokens;
      stats_.prefix_cache_hits += cached;
    }
    r.cached_tokens = cached;
    r.admitted = Clock::now();
    r.admitted_order = next_admission_++;
    r.needs_prefill = true;
    prefill_tokens += computed;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void Engine::preempt(Request& victim) {
  // Recompute preemption: drop the cache, keep the tokens; readmission prefills them again.
  pool_->release(victim.seq);
  victim.needs_prefill = true;
  ++victim.preemptions;
  log_debug("preempted a request with " + std::to_string(victim.context.size()) +
             " tokens: the KV cache is full");
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.preemptions;
}

// Every running sequence that decodes this step needs room for one more position. When the
// pool runs dry, the most recently admitted sequences go back to the queue (front).
bool Engine::ensure_decode_blocks() {
  std::sort(running_.begin(), running_.end(),
            [](const auto& a, const auto& b) { return a->admitted_order < b->admitted_order; });
  std::vector<std::unique_ptr<Request>> preempted;
  for (size_t i = 0; i < running_.size();) {
    Request& r = *running_[i];
    const int64_t needed = r.needs_prefill ? static_cast<int64_t>(r.context.size())
                                           : r.seq.length + 1;
    if (pool_->reserve(r.seq, needed)) {
      ++i;
      continue;
    }
    if (running_.size() == 1) {
      // Alone and still out of room: the sequence has outgrown the whole cache.
      log_warn("a request reached the KV cache's capacity (" +
                std::to_string(pool_->num_blocks() * pool_->block_size()) + " tokens) and ends");
      finish(r, FinishReason::LENGTH);
      running_.clear();
      break;
    }
    // Free the latest-admitted sequence (possibly r itself) and retry.
    preempt(*running_.back());
    preempted.push_back(std::move(running_.back()));
    running_.pop_back();
  }
  if (!preempted.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& r : preempted) waiting_.push_front(std::move(r));
  }
  return !running_.empty();
}

bool Engine::step() {
  drop_cancelled();
  admit();
  if (!ensure_decode_blocks()) {
    publish_stats();
    return false;
  }

  std::vector<models::BatchEntry> batch;
  batch.reserve(running_.size());
  for (auto& r : running_) {
    models::BatchEntry entry;
    entry.tokens = r->step_tokens();
    entry.seq = &r->seq;
    entry.all_logits = r->needs_prefill && r->params.prompt_logprobs && !r->prompt_logprobs_done;
    entry.argmax_only = !entry.all_logits && argmax_is_enough(*r);
    batch.push_back(entry);
  }
  models::BatchOptions batch_options;
  batch_options.exact = batch_invariant_;
  std::vector<Tensor> logits = options_.runner
                                   ? options_.runner->run(batch)
                                   : models::forward_batch(model_, batch, *pool_, batch_options);
  // The blocks this step filled become shareable (before anything finishes and releases them).
  for (auto& r : running_) pool_->index_blocks(r->seq, r->context);

  const int64_t vocab = model_.config().vocab_size;
  StepLimits limits{max_model_len_, eos_ids_};
  std::vector<bool> done(running_.size(), false);
  for (size_t i = 0; i < running_.size(); ++i) {
    Request& r = *running_[i];
    if (logits[i].dtype() == DType::I32) {  // the runner chose the argmax on its device
      r.needs_prefill = false;
      const FinishReason reason =
          process_step_token(r, logits[i].data_as<int32_t>()[0], {}, limits);
      if (reason != FinishReason::NONE) {
        finish(r, reason, /*announce=*/false);
        done[i] = true;
      }
      continue;
    }
    const float* rows = logits[i].data_as<float>();
    const int64_t n = logits[i].dim(0);
    if (batch[i].all_logits) {
      r.stream->set_prompt_logprobs(
          prompt_logprobs(std::span<const int32_t>(r.context.data(), static_cast<size_t>(r.prompt_len)),
                          rows, vocab, std::max(r.params.logprobs, 0)));
      r.prompt_logprobs_done = true;
    }
    r.needs_prefill = false;
    const FinishReason reason = process_step_output(r, rows, n, vocab, limits);
    if (reason != FinishReason::NONE) {
      finish(r, reason, /*announce=*/false);
      done[i] = true;
    }
  }
  std::vector<std::unique_ptr<Request>> still;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (!done[i]) still.push_back(std::move(running_[i]));
  }
  running_.swap(still);
  publish_stats();
  return true;
}

void Engine::publish_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.steps;
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  stats_.kv_blocks_used = pool_->used_blocks();
}

}  // namespace lowbit::serve
