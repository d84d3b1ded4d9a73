#include "eval/greedy_compare.h"

#include <algorithm>
#include <set>
#include <string>

#include "lowbit/error.h"
#include "models/model.h"
#include "runtime/generator.h"

namespace lowbit::eval {

std::vector<std::vector<int32_t>> greedy_prompts(const std::vector<int32_t>& tokens,
                                                 const GreedyOptions& options) {
  LOWBIT_CHECK(options.prompts > 0 && options.prompt_tokens > 0 && options.new_tokens > 0,
               "greedy prompts: the prompt count, prompt length and new tokens must be > 0");
  const auto size = static_cast<int64_t>(tokens.size());
  const int64_t length = options.prompt_tokens;
  LOWBIT_CHECK(size >= length, "greedy prompts: the text has " + std::to_string(size) +
                                   " tokens, fewer than one prompt of " + std::to_string(length));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t p = 0; p < options.prompts; ++p) {
    const int64_t begin = p * (size - length) / options.prompts;
    prompts.emplace_back(tokens.begin() + begin, tokens.begin() + begin + length);
  }
  return prompts;
}

double GreedyRun::mean_length() const {
  if (lengths.empty()) return 0;
  double sum = 0;
  for (int64_t n : lengths) sum += static_cast<double>(n);
  return sum / static_cast<double>(lengths.size());
}

double GreedyRun::decode_tokens_per_second() const {
  return decode_seconds > 0 ? static_cast<double>(decode_tokens) / decode_seconds : 0;
}

double GreedyRun::repeated_ngram_fraction(int n) const {
  int64_t total = 0, repeated = 0;
  for (size_t p = 0; p < outputs.size(); ++p) {
    const auto length = static_cast<size_t>(lengths[p]);
    if (length < static_cast<size_t>(n)) continue;
    std::set<std::vector<int32_t>> seen;
    for (size_t i = 0; i + static_cast<size_t>(n) <= length; ++i) {
      const auto begin = outputs[p].begin() + static_cast<std::ptrdiff_t>(i);
      if (!seen.emplace(begin, begin + n).second) ++repeated;
      ++total;
    }
  }
  return total > 0 ? static_cast<double>(repeated) / static_cast<double>(total) : 0;
}

GreedyRun greedy_run(const models::Model& model, const std::vector<std::vector<int32_t>>& prompts,
                     int new_tokens, const std::vector<int32_t>& eos_ids) {
  GreedyRun run;
  runtime::Generator generator(model, /*tokenizer=*/nullptr);
  for (const std::vector<int32_t>& prompt : prompts) {
    runtime::GenerationRequest request;
    request.prompt_ids = prompt;
    request.max_new_tokens = new_tokens;
    request.eos_ids = eos_ids;
    runtime::GenerationResult result = generator.generate(request);
    int64_t length = static_cast<int64_t>(result.output_ids.size());
    if (!result.output_ids.empty() &&
        std::find(eos_ids.begin(), eos_ids.end(), result.output_ids.back()) != eos_ids.end()) {
      --length;
    }
    run.prefill_seconds += result.prefill_seconds;
    run.decode_seconds += result.decode_seconds;
    run.decode_tokens += std::max<int64_t>(0, static_cast<int64_t>(result.output_ids.size()) - 1);
    run.lengths.push_back(length);
    run.outputs.push_back(std::move(result.output_ids));
  }
  return run;
}

namespace {

void append(GreedyRun& total, GreedyRun&& part) {
  total.prefill_seconds += part.prefill_seconds;
  total.decode_seconds += part.decode_seconds;
  total.decode_tokens += part.decode_tokens;
  total.lengths.insert(total.lengths.end(), part.lengths.begin(), part.lengths.end());
  for (auto& output : part.outputs) total.outputs.push_back(std::move(output));
}

}  // namespace

std::pair<GreedyRun, GreedyRun> greedy_run_pair(const models::Model& model,
                                                const models::Model& baseline,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int new_tokens) {
  std::pair<GreedyRun, GreedyRun> runs;
  for (const std::vector<int32_t>& prompt : prompts) {
    append(runs.first, greedy_run(model, {prompt}, new_tokens, model.config().eos_token_ids));
    append(runs.second,
           greedy_run(baseline, {prompt}, new_tokens, baseline.config().eos_token_ids));
  }
  return runs;
}

double mean_common_prefix(const GreedyRun& a, const GreedyRun& b) {
  LOWBIT_CHECK(a.outputs.size() == b.outputs.size(),
               "mean_common_prefix: the runs have different prompt counts");
  if (a.outputs.empty()) return 0;
  double sum = 0;
  for (size_t p = 0; p < a.outputs.size(); ++p) {
    const std::vector<int32_t>& x = a.outputs[p];
    const std::vector<int32_t>& y = b.outputs[p];
    const auto mismatch = std::mismatch(x.begin(), x.end(), y.begin(), y.end());
    sum += static_cast<double>(mismatch.first - x.begin());
  }
  return sum / static_cast<double>(a.outputs.size());
}

}  // namespace lowbit::eval
