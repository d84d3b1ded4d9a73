// A piece of the input on its way through the encode pipeline (tokenizers' `Split` of a
// PreTokenizedString): either an added token, fixed from then on, or text still to be normalized,
// pre-tokenized and given to the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lowbit::tokenizer {

struct Piece {
  std::string text;
  int32_t id = -1;  // >= 0: an added token
  // Whether the piece begins at offset 0 of the input, in the sense of tokenizers'
  // `offsets_original().0 == 0` (Metaspace prepend_scheme "first" depends on it).
  bool at_origin = false;
  // How many leading bytes of `text` derive from the input's first char (prefixes inserted by
  // Prepend and the like count too): a sub-piece that starts inside them is still at the origin.
  size_t origin_span = 0;

  bool is_token() const { return id >= 0; }
};

// The piece for a slice [start, end) of `parent`'s text.
inline Piece sub_piece(const Piece& parent, size_t start, size_t end) {
  Piece p;
  p.text = parent.text.substr(start, end - start);
  p.at_origin = parent.at_origin && start < parent.origin_span;
  p.origin_span = p.at_origin ? parent.origin_span - start : 0;
  return p;
}

// Appends the non-empty slices of `parent` to `out`.
inline void split_piece(const Piece& parent, const std::vector<std::pair<size_t, size_t>>& spans,
                        std::vector<Piece>& out) {
  for (const auto& [s, e] : spans) {
    if (e > s) out.push_back(sub_piece(parent, s, e));
  }
}

// Puts `prefix` in front of the text (tokenizers' NormalizedString::prepend: the new chars are
// aligned with the first char, so they are at the origin when it is).
inline void prepend_to_piece(Piece& p, std::string_view prefix) {
  std::string text;  // (not string::insert, which trips a GCC 12 -Wrestrict false positive)
  text.reserve(prefix.size() + p.text.size());
  text.append(prefix);
  text.append(p.text);
  p.text = std::move(text);
  if (p.origin_span > 0) p.origin_span += prefix.size();
}

}  // namespace lowbit::tokenizer
