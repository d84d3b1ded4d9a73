// Decoders of tokenizer.json (tokenizers/src/decoders): turn the token strings of the ids back
// into text. Each maps a list of strings to a list of strings; the result is concatenated.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace lowbit::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder described by `j` (a non-null object). Unknown types throw Unsupported naming
// `at`; malformed fields throw InvalidArgument.
std::unique_ptr<Decoder> parse_decoder(const Json& j, const JsonPath& at);

// transformers' clean_up_tokenization (" ." -> "." and the like). The WordPiece decoder's variant
// also turns " do not" into " don't".
void cleanup_tokenization_spaces(std::string& text, bool wordpiece_variant = false);

}  // namespace lowbit::tokenizer
