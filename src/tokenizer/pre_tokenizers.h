// Pre-tokenizers of tokenizer.json (tokenizers/src/pre_tokenizers): split text pieces into the
// words the model sees. Added-token pieces pass through untouched.
#pragma once

#include <memory>
#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/piece.h"

namespace lowbit::tokenizer {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// Builds the pre-tokenizer described by `j` (a non-null object with a "type"). Unknown types
// throw Unsupported naming `at`; malformed fields throw InvalidArgument.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& j, const JsonPath& at);

enum class PrependScheme { ALWAYS, FIRST, NEVER };

// The fields of a Metaspace object, shared by the pre-tokenizer and the decoder.
struct MetaspaceConfig {
  char32_t replacement;
  PrependScheme scheme;
  bool split;
};
MetaspaceConfig parse_metaspace_config(const Json& j, const JsonPath& at);

}  // namespace lowbit::tokenizer
