// Multiple-choice scoring (tasks.h). The context's ids are the same for every choice of an item
// (lm-eval encodes the context on its own), so the context runs once and each choice continues
// from its KV cache; inputs longer than max_length run on their own, left-truncated.
#include <algorithm>
#include <chrono>
#include <span>
#include <string>

#include "eval/perplexity.h"
#include "eval/py_text.h"
#include "eval/tasks.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::eval {
namespace {

// Σ log p(continuation[j] | ...) where rows[j] is the logits row that predicts continuation[j].
double sum_logprobs(const std::vector<const float*>& rows, const std::vector<int32_t>& continuation,
                    int64_t vocab) {
  double sum = 0;
  for (size_t j = 0; j < continuation.size(); ++j) {
    sum -= negative_log_likelihood(rows[j], vocab, continuation[j]);
  }
  return sum;
}

// One (context, continuation) request on its own: lm-eval's (context + continuation)[-max_length:].
double score_alone(const models::Model& model, const std::vector<int32_t>& context,
                   const std::vector<int32_t>& continuation, int64_t max_length) {
  LOWBIT_CHECK(static_cast<int64_t>(continuation.size()) <= max_length,
               "a choice of " + std::to_string(continuation.size()) +
                   " tokens does not fit in --ctx " + std::to_string(max_length));
  std::vector<int32_t> input = context;
  input.insert(input.end(), continuation.begin(), continuation.end());
  input.pop_back();  // the last token is only predicted
  if (static_cast<int64_t>(input.size()) > max_length) {
    input.erase(input.begin(), input.end() - max_length);
  }
  models::KvCache cache = model.new_cache(static_cast<int64_t>(input.size()));
  const Tensor logits = model.forward(input, cache, /*all_logits=*/true);
  const int64_t vocab = model.config().vocab_size;
  const auto first = static_cast<int64_t>(input.size() - continuation.size());
  std::vector<const float*> rows;
  for (size_t j = 0; j < continuation.size(); ++j) {
    rows.push_back(logits.data_as<const float>() + (first + static_cast<int64_t>(j)) * vocab);
  }
  return sum_logprobs(rows, continuation, vocab);
}

int64_t first_argmax(const std::vector<double>& values) {
  return std::max_element(values.begin(), values.end()) - values.begin();
}

MultipleChoiceItemResult score_item(const models::Model& model, const Tokenizer& tokenizer,
                                    const MultipleChoiceItem& item, const TaskOptions& options,
                                    int32_t prefix, const std::string& where) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> continuations;
  for (const std::string& choice : item.choices) {
    auto [context_ids, continuation_ids] =
        encode_pair(tokenizer, item.query, " " + choice, options.add_bos, prefix);
    LOWBIT_CHECK(!context_ids.empty(), where + ": the query is only whitespace");
    LOWBIT_CHECK(!continuation_ids.empty(), where + ": a choice encodes to no tokens");
    context = std::move(context_ids);
    continuations.push_back(std::move(continuation_ids));
  }
  MultipleChoiceItemResult result;
  size_t longest = 0;
  for (const auto& c : continuations) longest = std::max(longest, c.size());
  const int64_t total = static_cast<int64_t>(context.size() + longest) - 1;
  if (total > options.max_length) {
    for (const auto& c : continuations) {
      result.loglikelihoods.push_back(score_alone(model, context, c, options.max_length));
    }
  } else {
    models::KvCache cache = model.new_cache(total);
    const Tensor context_logits = model.forward(context, cache, /*all_logits=*/false);
    for (const auto& c : continuations) {
      cache.truncate(static_cast<int64_t>(context.size()));
      std::vector<const float*> rows{context_logits.data_as<const float>()};
      Tensor logits;
      if (c.size() > 1) {
        logits = model.forward(std::span<const int32_t>(c.data(), c.size() - 1), cache, true);
        for (size_t j = 0; j + 1 < c.size(); ++j) {
          rows.push_back(logits.data_as<const float>() + static_cast<int64_t>(j) * vocab);
        }
      }
      result.loglikelihoods.push_back(sum_logprobs(rows, c, vocab));
    }
  }
  std::vector<double> normalized;
  for (size_t i = 0; i < item.choices.size(); ++i) {
    result.continuation_tokens.push_back(static_cast<int64_t>(continuations[i].size()));
    normalized.push_back(result.loglikelihoods[i] /
                         static_cast<double>(python_length(item.choices[i])));
  }
  result.pred = first_argmax(result.loglikelihoods);
  result.pred_norm = first_argmax(normalized);
  result.acc = result.pred == item.gold;
  result.acc_norm = result.pred_norm == item.gold;
  return result;
}

}  // namespace

MultipleChoiceResult evaluate_multiple_choice(const models::Model& model,
                                              const Tokenizer& tokenizer, const TaskFile& task,
                                              const TaskOptions& options) {
  LOWBIT_CHECK(task.kind == TaskKind::MultipleChoice,
               task.path + ": not a multiple-choice task (query, choices, gold)");
  const auto start = std::chrono::steady_clock::now();
  const int32_t prefix = lm_eval_prefix_token(model, tokenizer);
  size_t count = task.multiple_choice.size();
  if (options.limit > 0) count = std::min(count, static_cast<size_t>(options.limit));
  MultipleChoiceResult result;
  std::vector<double> acc, acc_norm;
  for (size_t i = 0; i < count; ++i) {
    const std::string where = task.path + " item " + std::to_string(i);
    result.items.push_back(
        score_item(model, tokenizer, task.multiple_choice[i], options, prefix, where));
    acc.push_back(result.items.back().acc ? 1.0 : 0.0);
    acc_norm.push_back(result.items.back().acc_norm ? 1.0 : 0.0);
  }
  result.acc = lm_eval_mean(acc);
  result.acc_stderr = lm_eval_mean_stderr(acc);
  result.acc_norm = lm_eval_mean(acc_norm);
  result.acc_norm_stderr = lm_eval_mean_stderr(acc_norm);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace lowbit::eval
