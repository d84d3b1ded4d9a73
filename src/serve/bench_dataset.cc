#include "serve/bench_dataset.h"

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

// One dataset entry as a request; `where` names the file and line for errors.
BenchRequest parse_entry(const nlohmann::json& entry, const std::string& where,
                         std::optional<int64_t> output_len_override, int64_t default_output_len) {
  LOWBIT_CHECK(entry.is_object(), where + ": expected a JSON object");
  BenchRequest request;
  if (entry.contains("prompt")) {
    LOWBIT_CHECK(entry["prompt"].is_string(), where + ": \"prompt\" must be a string");
    request.prompt = entry["prompt"];
  } else if (entry.contains("conversations")) {
    const auto& turns = entry["conversations"];
    LOWBIT_CHECK(turns.is_array(), where + ": \"conversations\" must be an array");
    for (const auto& turn : turns) {
      const std::string from = turn.is_object() ? turn.value("from", "") : "";
      if ((from == "human" || from == "user") && turn.contains("value") &&
          turn["value"].is_string()) {
        request.prompt = turn["value"];
        break;
      }
    }
    LOWBIT_CHECK(!request.prompt.is_null(),
                 where + ": no human turn with a string \"value\" in \"conversations\"");
  } else {
    throw InvalidArgument(where + ": needs \"prompt\" or \"conversations\"");
  }
  request.output_len = default_output_len;
  if (entry.contains("output_len")) {
    LOWBIT_CHECK(entry["output_len"].is_number_integer() && entry["output_len"].get<int64_t>() >= 1,
                 where + ": \"output_len\" must be a positive integer");
    request.output_len = entry["output_len"];
  }
  if (output_len_override) request.output_len = *output_len_override;
  return request;
}

}  // namespace

std::vector<BenchRequest> load_dataset_file(const std::string& path, int64_t num_prompts,
                                            std::optional<int64_t> output_len_override,
                                            int64_t default_output_len) {
  LOWBIT_CHECK(num_prompts >= 1, "bench serve: --num-prompts must be at least 1");
  std::ifstream in(path);
  if (!in) throw IoError("bench serve: cannot open dataset " + path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string content = text.str();
  const size_t first = content.find_first_not_of(" \t\r\n");
  LOWBIT_CHECK(first != std::string::npos, path + ": the dataset is empty");

  std::vector<BenchRequest> entries;
  if (content[first] == '[') {
    nlohmann::json array;
    try {
      array = nlohmann::json::parse(content);
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument(path + ": not valid JSON: " + e.what());
    }
    for (size_t i = 0; i < array.size(); ++i) {
      entries.push_back(parse_entry(array[i], path + " entry " + std::to_string(i),
                                    output_len_override, default_output_len));
    }
  } else {
    std::istringstream lines(content);
    size_t line_number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path + " line " + std::to_string(line_number);
      nlohmann::json entry;
      try {
        entry = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw InvalidArgument(where + ": not valid JSON: " + e.what());
      }
      entries.push_back(parse_entry(entry, where, output_len_override, default_output_len));
    }
  }
  LOWBIT_CHECK(!entries.empty(), path + ": the dataset has no requests");
  std::vector<BenchRequest> requests;
  for (int64_t i = 0; i < num_prompts; ++i)
    requests.push_back(entries[static_cast<size_t>(i) % entries.size()]);
  return requests;
}

std::vector<BenchRequest> random_dataset(int64_t num_prompts, int64_t input_len, int64_t output_len,
                                         int64_t vocab, uint64_t seed, int64_t prefix_len) {
  LOWBIT_CHECK(num_prompts >= 1, "bench serve: --num-prompts must be at least 1");
  LOWBIT_CHECK(input_len >= 1, "bench serve: --input-len must be at least 1");
  LOWBIT_CHECK(prefix_len >= 0, "bench serve: --random-prefix-len must not be negative");
  LOWBIT_CHECK(output_len >= 1, "bench serve: --output-len must be at least 1");
  LOWBIT_CHECK(vocab > 10,
               "bench serve: --random-vocab must be above 10 (ids are drawn from [10, vocab))");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> token(10, vocab - 1);
  std::vector<int64_t> prefix(static_cast<size_t>(prefix_len));
  for (auto& id : prefix) id = token(rng);
  std::vector<BenchRequest> requests(static_cast<size_t>(num_prompts));
  for (auto& request : requests) {
    std::vector<int64_t> ids = prefix;
    for (int64_t i = 0; i < input_len; ++i) ids.push_back(token(rng));
    request.prompt = ids;
    request.prompt_len = prefix_len + input_len;
    request.output_len = output_len;
  }
  return requests;
}

std::vector<double> arrival_times(int64_t num_requests, double request_rate, uint64_t seed) {
  LOWBIT_CHECK(request_rate > 0, "bench serve: --request-rate must be positive (or inf)");
  std::vector<double> times(static_cast<size_t>(num_requests), 0.0);
  if (std::isinf(request_rate) || times.empty()) return times;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(request_rate);
  double t = 0;
  for (auto& time : times) {
    t += gap(rng);
    time = t;
  }
  // Rescale so that the run's offered load is exactly the requested rate, whatever the seed.
  const double scale = (static_cast<double>(num_requests) / request_rate) / times.back();
  for (auto& time : times) time *= scale;
  return times;
}

}  // namespace lowbit::serve
