// Post-processors of tokenizer.json (tokenizers/src/processors): add special tokens (BOS and the
// like) around the ids of one encoded sequence. Offsets and type ids are not tracked by lowbit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tokenizer/json_util.h"

namespace lowbit::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // The final ids of a single sequence; special tokens only when add_special_tokens.
  virtual std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special_tokens) const = 0;
};

// Builds the post-processor described by `j` (a non-null object). Unknown types throw Unsupported
// naming `at`; malformed fields throw InvalidArgument.
std::unique_ptr<PostProcessor> parse_post_processor(const Json& j, const JsonPath& at);

}  // namespace lowbit::tokenizer
