// Generator: prompt ids in, streamed tokens out, for one sequence. Prefill runs the whole prompt in
// one forward pass; decode runs one token at a time against the KV cache. Stops on an EOS id, a
// stop string or max_new_tokens, whichever comes first.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace lowbit {
class Tokenizer;
namespace models {
class Model;
}
}  // namespace lowbit

namespace lowbit::runtime {

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  int32_t max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
  std::vector<int32_t> eos_ids;   // generation ends after emitting one of these (not printed)
  bool ignore_eos = false;
};

enum class FinishReason { STOP, LENGTH };

struct GenerationResult {
  std::vector<int32_t> output_ids;  // generated ids (an EOS that ended generation is included)
  std::string text;                 // decoded output, stop string excluded (empty without tokenizer)
  FinishReason finish_reason = FinishReason::LENGTH;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Called for every generated token with the text it completes (may be empty while a UTF-8
// character or a possible stop string is incomplete). At the end, text still held back is delivered
// once more with id -1.
using TokenCallback = std::function<void(int32_t id, const std::string& text)>;

class Generator {
 public:
  // `tokenizer` may be null (models shipped without one); then stop strings are not allowed.
  Generator(const models::Model& model, const Tokenizer* tokenizer);

  GenerationResult generate(const GenerationRequest& request, const TokenCallback& on_token = {});

 private:
  const models::Model& model_;
  const Tokenizer* tokenizer_;
};

}  // namespace lowbit::runtime
