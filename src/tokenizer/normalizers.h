// Normalizers of tokenizer.json (tokenizers/src/normalizers): each rewrites one text piece.
#pragma once

#include <memory>

#include "tokenizer/json_util.h"
#include "tokenizer/pattern.h"
#include "tokenizer/piece.h"

namespace lowbit::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(Piece& piece) const = 0;
};

// Builds the normalizer described by `j` (a non-null object with a "type"). Unknown types throw
// Unsupported naming `at`; malformed fields throw InvalidArgument.
std::unique_ptr<Normalizer> parse_normalizer(const Json& j, const JsonPath& at);

// The "pattern" field of obj, {"String": s} (a literal) or {"Regex": r}, compiled as tokenizers
// compiles it (Replace normalizer and decoder, Split pre-tokenizer).
std::unique_ptr<Regex> parse_pattern(const Json& obj, const JsonPath& at);

}  // namespace lowbit::tokenizer
