// Generation tasks with exact match (tasks.h): gsm8k's prompt format, greedy decoding with its
// stop strings, and its two answer filters.
#include <algorithm>
#include <chrono>
#include <string>

#include "eval/answer_extraction.h"
#include "eval/tasks.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "runtime/generator.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::eval {
namespace {

// gsm8k's doc_to_text.
std::string question_text(const GenerationItem& item) {
  return "Question: " + item.question + "\nAnswer:";
}

}  // namespace

std::string generation_prompt(const TaskFile& task, int num_fewshot, const GenerationItem& item) {
  std::string prompt;
  // Each example: doc_to_text + target_delimiter " " + doc_to_target + fewshot_delimiter "\n\n".
  for (int k = 0; k < num_fewshot; ++k) {
    const GenerationItem& shot = task.generation[static_cast<size_t>(k)];
    prompt += question_text(shot) + " " + shot.answer + "\n\n";
  }
  return prompt + question_text(item);
}

GenerationTaskResult evaluate_generation(const models::Model& model, const Tokenizer& tokenizer,
                                         const TaskFile& task, const TaskOptions& options) {
  LOWBIT_CHECK(task.kind == TaskKind::Generation,
               task.path + ": not a generation task (question, answer)");
  LOWBIT_CHECK(options.num_fewshot >= 0, "--num-fewshot must be >= 0");
  LOWBIT_CHECK(options.max_gen_tokens > 0, "the generation limit must be > 0 tokens");
  const size_t shots = static_cast<size_t>(options.num_fewshot);
  LOWBIT_CHECK(shots < task.generation.size(),
               task.path + ": --num-fewshot " + std::to_string(shots) + " leaves no item to score (" +
                   std::to_string(task.generation.size()) + " items)");
  const auto start = std::chrono::steady_clock::now();
  size_t count = task.generation.size() - shots;
  if (options.limit > 0) count = std::min(count, static_cast<size_t>(options.limit));
  // lm-eval keeps max_length - max_gen_toks tokens of the context, dropping the oldest.
  const int64_t max_context = std::max<int64_t>(1, options.max_length - options.max_gen_tokens);

  runtime::Generator generator(model, &tokenizer);
  GenerationTaskResult result;
  std::vector<double> strict, flexible;
  for (size_t i = 0; i < count; ++i) {
    const GenerationItem& item = task.generation[shots + i];
    runtime::GenerationRequest request;
    request.prompt_ids =
        tokenizer.encode(generation_prompt(task, options.num_fewshot, item), options.add_bos);
    if (static_cast<int64_t>(request.prompt_ids.size()) > max_context) {
      request.prompt_ids.erase(request.prompt_ids.begin(), request.prompt_ids.end() - max_context);
    }
    request.max_new_tokens = options.max_gen_tokens;
    request.stop = {"\n\n", "Question:"};
    request.eos_ids = model.config().eos_token_ids;
    GenerationItemResult scored;
    scored.output = generator.generate(request).text;
    scored.strict = gsm8k_strict_extract(scored.output);
    scored.flexible = gsm8k_flexible_extract(scored.output);
    scored.strict_match = gsm8k_exact_match(scored.strict, item.answer);
    scored.flexible_match = gsm8k_exact_match(scored.flexible, item.answer);
    strict.push_back(scored.strict_match ? 1.0 : 0.0);
    flexible.push_back(scored.flexible_match ? 1.0 : 0.0);
    result.items.push_back(std::move(scored));
  }
  result.strict = lm_eval_mean(strict);
  result.strict_stderr = lm_eval_mean_stderr(strict);
  result.flexible = lm_eval_mean(flexible);
  result.flexible_stderr = lm_eval_mean_stderr(flexible);
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace lowbit::eval
