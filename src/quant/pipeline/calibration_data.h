// Calibration samples for the oneshot pipeline: token-id sequences built with the model's
// tokenizer from
//   - a plain text file (.txt or anything not JSON): the whole text is tokenized without special
//     tokens and cut into consecutive windows of seq_len - 1 tokens, each preceded by BOS when the
//     tokenizer adds one (a last, shorter window is dropped): every sample is exactly seq_len long,
//     like llm-compressor's concatenate_data;
//   - a JSONL file (.jsonl, one JSON object per line) or a JSON array: one sample per row, from
//     its `text` (tokenized with special tokens) or its `messages` (rendered with the model's chat
//     template and tokenized WITHOUT special tokens, so the template's BOS is not doubled), or
//     pre-tokenized `input_ids`; truncated to seq_len;
//   - a token-id file (calibration ids JSON: {"samples": [[ids...], ...]}) used as is.
// Samples are shuffled (SplitMix64 seeded with `seed` driving a Fisher-Yates shuffle from the last
// index down, j = next() % (i + 1)) and the first num_samples kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::quant {

struct CalibrationOptions {
  std::string path;
  int64_t num_samples = 512;  // llm-compressor's num_calibration_samples
  int64_t seq_len = 2048;     // the max_seq_length of llm-compressor's examples
  uint64_t seed = 42;         // llm-compressor shuffles with seed 42
  bool ids_file = false;      // `path` holds token ids ({"samples": [[...]]})
};

using CalibrationSet = std::vector<std::vector<int32_t>>;

// Throws InvalidArgument naming the file (and line) for unreadable input, rows without text,
// messages without a chat template, or fewer than one usable sample; warns when fewer than
// num_samples are available.
CalibrationSet load_calibration(const CalibrationOptions& options, const std::string& model_dir);

// The deterministic shuffle above (exposed for tests and for the reference scripts' protocol).
std::vector<size_t> shuffled_indices(size_t n, uint64_t seed);

// Writes {"seq_len":..., "num_samples":..., "samples": [...]} (what ids_file reads).
void save_calibration_ids(const CalibrationSet& set, int64_t seq_len, const std::string& path);

}  // namespace lowbit::quant
