#include "eval/tasks.h"

#include <cmath>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "eval/py_text.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::eval {
namespace {

std::string task_name(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const std::string suffix = ".jsonl";
  if (name.size() > suffix.size() && name.ends_with(suffix)) name.resize(name.size() - suffix.size());
  return name;
}

const nlohmann::json& field(const nlohmann::json& line, const char* key, const std::string& where) {
  if (!line.contains(key)) throw InvalidArgument(where + ": missing field '" + key + "'");
  return line[key];
}

std::string string_field(const nlohmann::json& line, const char* key, const std::string& where) {
  const nlohmann::json& value = field(line, key, where);
  if (!value.is_string()) throw InvalidArgument(where + ": field '" + key + "' must be a string");
  return value.get<std::string>();
}

MultipleChoiceItem parse_multiple_choice(const nlohmann::json& line, const std::string& where) {
  MultipleChoiceItem item;
  item.query = string_field(line, "query", where);
  const nlohmann::json& choices = field(line, "choices", where);
  if (!choices.is_array() || choices.size() < 2) {
    throw InvalidArgument(where + ": field 'choices' must be an array of at least 2 strings");
  }
  for (const nlohmann::json& choice : choices) {
    if (!choice.is_string() || choice.get<std::string>().empty()) {
      // acc_norm divides by the choice's length: an empty choice has none.
      throw InvalidArgument(where + ": field 'choices' must hold non-empty strings");
    }
    item.choices.push_back(choice.get<std::string>());
  }
  const nlohmann::json& gold = field(line, "gold", where);
  if (!gold.is_number_integer() || gold.get<int64_t>() < 0 ||
      gold.get<int64_t>() >= static_cast<int64_t>(item.choices.size())) {
    throw InvalidArgument(where + ": field 'gold' must be an index into 'choices' (0.." +
                          std::to_string(item.choices.size() - 1) + ")");
  }
  item.gold = gold.get<int64_t>();
  return item;
}

}  // namespace

TaskFile load_task_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open the task file");
  TaskFile task;
  task.path = path;
  task.name = task_name(path);
  std::string text;
  bool kind_known = false;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    nlohmann::json line;
    try {
      line = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw InvalidArgument(where + ": not a JSON object (" + e.what() + ")");
    }
    if (!line.is_object()) throw InvalidArgument(where + ": not a JSON object");
    if (!kind_known) {
      if (line.contains("query") || line.contains("choices")) {
        task.kind = TaskKind::MultipleChoice;
      } else if (line.contains("question") || line.contains("answer")) {
        task.kind = TaskKind::Generation;
      } else {
        throw InvalidArgument(where + ": neither a multiple-choice item (query, choices, gold) "
                                      "nor a generation item (question, answer)");
      }
      kind_known = true;
    }
    if (task.kind == TaskKind::MultipleChoice) {
      task.multiple_choice.push_back(parse_multiple_choice(line, where));
    } else {
      task.generation.push_back(
          {string_field(line, "question", where), string_field(line, "answer", where)});
    }
  }
  if (!kind_known) throw InvalidArgument(path + ": the task file has no items");
  return task;
}

double lm_eval_mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;  // Python 3.11's sum(): plain left-to-right addition
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

double lm_eval_mean_stderr(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double mu = lm_eval_mean(values);
  // `(x - mu) ** 2` is libm's pow in Python; a volatile exponent keeps the compiler from turning
  // pow into x * x, which may differ from it in the last bit.
  volatile double two = 2.0;
  double sum = 0;
  for (double v : values) sum += std::pow(v - mu, two);
  const auto n = static_cast<double>(values.size());
  return std::sqrt(sum / (n - 1)) / std::sqrt(n);
}

int32_t lm_eval_prefix_token(const models::Model& model, const Tokenizer& tokenizer) {
  // lm-eval: the tokenizer's BOS, else its EOS; config.json's ids stand in for a tokenizer
  // without tokenizer_config.json.
  auto token_id = [&](const std::string& token) -> std::optional<int32_t> {
    return token.empty() ? std::nullopt : tokenizer.token_to_id(token);
  };
  if (auto id = token_id(tokenizer.bos_token())) return *id;
  if (model.config().bos_token_id) return *model.config().bos_token_id;
  if (auto id = token_id(tokenizer.eos_token())) return *id;
  LOWBIT_CHECK(!model.config().eos_token_ids.empty(),
               model.directory() + ": lm-eval's prefix token needs a BOS or EOS token, and there "
                                   "is none");
  return model.config().eos_token_ids.front();
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_pair(const Tokenizer& tokenizer,
                                                                  const std::string& context,
                                                                  const std::string& continuation,
                                                                  bool add_special_tokens,
                                                                  int32_t prefix_token) {
  if (context.empty()) {
    return {{prefix_token}, tokenizer.encode(continuation, add_special_tokens)};
  }
  const size_t spaces = python_trailing_space_bytes(context);
  const std::string moved_context = context.substr(0, context.size() - spaces);
  const std::string moved_continuation = context.substr(context.size() - spaces) + continuation;
  const std::vector<int32_t> whole =
      tokenizer.encode(moved_context + moved_continuation, add_special_tokens);
  std::vector<int32_t> context_ids = tokenizer.encode(moved_context, add_special_tokens);
  std::vector<int32_t> continuation_ids;
  if (context_ids.size() < whole.size()) {
    continuation_ids.assign(whole.begin() + static_cast<std::ptrdiff_t>(context_ids.size()),
                            whole.end());
  }
  return {std::move(context_ids), std::move(continuation_ids)};
}

}  // namespace lowbit::eval
