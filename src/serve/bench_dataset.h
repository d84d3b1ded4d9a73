// The requests `lowbit bench serve` sends and when it sends them.
//
// Datasets:
//  - a file: JSON Lines, one request per line, either {"prompt": "...", "output_len": N}
//  (output_len
//    optional) or ShareGPT-style {"conversations": [{"from": "human", "value": "..."}, ...]}, whose
//    first human (or "user") turn is the prompt; a file that starts with '[' is read as one JSON
//    array of such objects (the published ShareGPT files are). Requests are taken in file order,
//    starting over at the top when --num-prompts exceeds the file (vLLM samples with replacement
//    instead; file order keeps runs reproducible without a seed).
//  - random: prompts of exactly input_len token ids drawn uniformly from [10, vocab) with a seeded
//    generator, sent as a token-id prompt ("prompt": [ids...], which /v1/completions accepts), so
//    the prompt length is exact without a tokenizer on the client. Ids below 10 are skipped because
//    models keep their special tokens (bos, eos, pad, unk) there; the default vocab of 1000 stays
//    inside every real model's vocabulary. vLLM's random dataset also samples ids, but decodes them
//    to text with the model's tokenizer first.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lowbit::serve {

struct BenchRequest {
  nlohmann::json prompt;    // a string, or an array of token ids
  int64_t prompt_len = -1;  // known length in tokens (random prompts); -1: ask the server's usage
  int64_t output_len = 0;   // max_tokens
};

// Reads a dataset file as described above. output_len_override (--output-len) wins over a line's
// own output_len; lines without one get default_output_len. Throws IoError when the file cannot be
// read and InvalidArgument naming the file and line for a malformed one.
std::vector<BenchRequest> load_dataset_file(const std::string& path, int64_t num_prompts,
                                            std::optional<int64_t> output_len_override,
                                            int64_t default_output_len);

// prefix_len > 0 (vLLM's --random-prefix-len): every prompt starts with the same prefix_len ids
// (drawn first), then input_len ids of its own, so a server's prefix cache can share the prefix.
std::vector<BenchRequest> random_dataset(int64_t num_prompts, int64_t input_len, int64_t output_len,
                                         int64_t vocab, uint64_t seed, int64_t prefix_len = 0);

// Send times in seconds from the start of the run. request_rate = inf: all zero (everything at
// once). Otherwise a Poisson process: exponential gaps with mean 1/rate from a seeded generator,
// rescaled, as vLLM does, so that the last request goes out at exactly n / rate.
std::vector<double> arrival_times(int64_t num_requests, double request_rate, uint64_t seed);

}  // namespace lowbit::serve
