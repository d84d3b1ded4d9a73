#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "lowbit/error.h"
#include "models/model.h"
#include "runtime/stop_strings.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::runtime {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Generator::Generator(const models::Model& model, const Tokenizer* tokenizer)
    : model_(model), tokenizer_(tokenizer) {}

GenerationResult Generator::generate(const GenerationRequest& request,
                                     const TokenCallback& on_token) {
  LOWBIT_CHECK(!request.prompt_ids.empty(), "the prompt is empty: give at least one token");
  LOWBIT_CHECK(request.max_new_tokens >= 0, "max_new_tokens must be >= 0");
  LOWBIT_CHECK(request.stop.empty() || tokenizer_ != nullptr,
               "stop strings need a tokenizer, and this model has none");

  GenerationResult result;
  Sampler sampler(request.sampling);
  StopStringMatcher stops(request.stop);
  std::optional<DecodeStream> stream;
  if (tokenizer_) stream.emplace(*tokenizer_, /*skip_special_tokens=*/true, request.prompt_ids);

  models::KvCache cache =
      model_.new_cache(static_cast<int64_t>(request.prompt_ids.size()) + request.max_new_tokens);
  std::vector<int32_t> context = request.prompt_ids;
  const int64_t vocab = model_.config().vocab_size;

  auto start = std::chrono::steady_clock::now();
  Tensor logits = model_.forward(request.prompt_ids, cache, /*all_logits=*/false);
  result.prefill_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();

  for (int32_t step = 0; step < request.max_new_tokens; ++step) {
    if (step > 0) {
      const int64_t total = static_cast<int64_t>(context.size());
      if (model_.needs_reprefill(cache.length(), total)) {
        // The model's positions changed meaning (Phi3 longrope past its original length):
        // recompute every cached key and value, as transformers intends.
        cache.clear();
        logits = model_.forward(context, cache, /*all_logits=*/false);
      } else {
        logits = model_.forward(std::span<const int32_t>(&context.back(), 1), cache, false);
      }
    }
    std::span<float> row(logits.data_as<float>(), static_cast<size_t>(vocab));
    int32_t id = sampler.sample(row, context);
    context.push_back(id);
    result.output_ids.push_back(id);

    bool is_eos = !request.ignore_eos && std::find(request.eos_ids.begin(), request.eos_ids.end(),
                                                   id) != request.eos_ids.end();
    std::string piece;
    if (stream && !is_eos) piece = stops.push(stream->step(id));
    result.text += piece;
    if (on_token) on_token(id, piece);
    if (is_eos || stops.stopped()) {
      result.finish_reason = FinishReason::STOP;
      break;
    }
  }
  if (stream && !stops.stopped()) {
    std::string tail = stops.push(stream->flush());
    tail += stops.flush();
    result.text += tail;
    if (on_token && !tail.empty()) on_token(-1, tail);
  }
  result.decode_seconds = seconds_since(start);
  return result;
}

}  // namespace lowbit::runtime
