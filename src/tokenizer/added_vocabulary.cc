#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "core/log.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {
namespace {

// The char that ends text[0, end), or 0 when there is none.
char32_t char_before(std::string_view text, size_t end) {
  if (end == 0) return 0;
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_char(text, start);
}

// Start of the run of whitespace that ends at `end`.
size_t whitespace_run_before(std::string_view text, size_t end) {
  size_t pos = end;
  while (pos > 0) {
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_whitespace(next_char(text, i))) break;
    pos = start;
  }
  return pos;
}

// End of the run of whitespace that starts at `start`.
size_t whitespace_run_after(std::string_view text, size_t start) {
  size_t pos = start;
  while (pos < text.size()) {
    size_t i = pos;
    if (!is_whitespace(next_char(text, i))) break;
    pos = i;
  }
  return pos;
}

bool same_token(const AddedToken& a, const AddedToken& b) {
  return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip &&
         a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t id) {
  int32_t node = 0;
  for (char ch : key) {
    const auto b = static_cast<uint8_t>(ch);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, INT32_MIN));
    if (it != children.end() && it->first == b) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes.size());
      children.insert(it, {b, child});
      nodes.emplace_back();  // invalidates `children`; not used after this point
      node = child;
    }
  }
  nodes[node].token_id = id;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                             size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, INT32_MIN));
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token_id >= 0) best = {nodes[node].token_id, i + 1 - pos};
  }
  return best;
}

void AddedVocabulary::load(const Json& added_tokens, const JsonPath& at, const BpeModel& model,
                           const Normalizer* normalizer) {
  require_array(added_tokens, at);
  auto next_id = static_cast<int64_t>(model.vocab_size());
  size_t mismatches = 0;
  std::string first_mismatch;
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const JsonPath tat = at[i];
    const Json& t = require_object(added_tokens[i], tat);
    AddedToken token;
    token.content = get_string(t, "content", tat);
    token.single_word = get_bool(t, "single_word", tat, false);
    token.lstrip = get_bool(t, "lstrip", tat, false);
    token.rstrip = get_bool(t, "rstrip", tat, false);
    token.special = get_bool(t, "special", tat, false);
    token.normalized = get_bool(t, "normalized", tat, !token.special);
    const int64_t json_id = get_int(t, "id", tat, 0, INT32_MAX, -1);
    if (token.content.empty()) continue;  // tokenizers ignores empty tokens
    if (auto known = token_to_id(token.content)) {
      if (same_token(by_id_[*known], token)) continue;
    }
    int64_t id = 0;
    if (auto existing = token_to_id(token.content)) {
      id = *existing;
    } else if (auto in_model = model.token_to_id(token.content)) {
      id = *in_model;
    } else {
      if (next_id > INT32_MAX) tat.fail("too many tokens for 32-bit ids");
      id = next_id++;
    }
    if (json_id >= 0 && json_id != id && mismatches++ == 0) {
      first_mismatch = tat.str() + ": token '" + token.content + "' has id " +
                       std::to_string(json_id) + " in the file but gets id " + std::to_string(id);
    }
    const auto id32 = static_cast<int32_t>(id);
    if (token.normalized && normalizer != nullptr) {
      Piece p{token.content, -1, true, token.content.size()};
      normalizer->normalize(p);
      if (p.text != token.content) normalized_form_[id32] = p.text;
    }
    by_content_[token.content] = id32;
    if (token.special) special_.insert(token.content);
    by_id_[id32] = std::move(token);
  }
  if (mismatches > 0) {  // HF warns too, and uses the ids it assigned
    log_warn(first_mismatch + (mismatches > 1 ? " (and " + std::to_string(mismatches - 1) +
                                                    " more such tokens)" : "") +
             "; using the ids HF tokenizers assigns");
  }
  rebuild_tries(at);
}

void AddedVocabulary::rebuild_tries(const JsonPath& at) {
  std::vector<int32_t> ids;
  for (const auto& [id, token] : by_id_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  raw_trie_ = Trie{};
  normalized_trie_ = Trie{};
  for (int32_t id : ids) {
    const AddedToken& token = by_id_.at(id);
    Trie& trie = token.normalized ? normalized_trie_ : raw_trie_;
    const std::string* pattern = &token.content;
    if (token.normalized) {
      auto it = normalized_form_.find(id);
      if (it != normalized_form_.end()) pattern = &it->second;
    }
    if (pattern->empty()) continue;  // cannot match anything
    if (trie.longest_at(*pattern, 0).second == pattern->size()) {
      // tokenizers' Aho-Corasick builder refuses duplicate patterns, so the file cannot load.
      at.fail("tokens " + std::to_string(trie.longest_at(*pattern, 0).first) + " and " +
              std::to_string(id) + " match the same text '" + *pattern + "'");
    }
    trie.insert(*pattern, id);
  }
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedVocabulary::id_to_token(int32_t id) const {
  auto n = normalized_form_.find(id);
  if (n != normalized_form_.end()) return &n->second;
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second.content;
}

bool AddedVocabulary::is_special_content(std::string_view s) const {
  return special_.find(s) != special_.end();
}

bool AddedVocabulary::is_special_id(int32_t id) const {
  const std::string* s = id_to_token(id);
  return s != nullptr && is_special_content(*s);
}

size_t AddedVocabulary::count_not_in(const BpeModel& model) const {
  size_t n = 0;
  for (const auto& [content, id] : by_content_) n += model.token_to_id(content) ? 0 : 1;
  return n;
}

// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches; a skipped single_word match
// still consumes its span (the automaton resumes after it).
std::vector<AddedVocabulary::Split> AddedVocabulary::find_matches(std::string_view sentence,
                                                                  const Trie& trie) const {
  std::vector<Split> splits;
  if (trie.empty()) {
    splits.push_back({0, sentence.size(), -1});
    return splits;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < sentence.size()) {
    const auto [id, len] = trie.longest_at(sentence, pos);
    if (id < 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;
    const AddedToken& token = by_id_.at(id);
    if (token.single_word) {
      const bool word_before = start > 0 && is_word_char(char_before(sentence, start));
      size_t i = stop;
      const bool word_after = stop < sentence.size() && is_word_char(next_char(sentence, i));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(whitespace_run_before(sentence, start), start_offset);
    if (token.rstrip) stop = whitespace_run_after(sentence, stop);
    if (start_offset < start) splits.push_back({start_offset, start, -1});
    splits.push_back({start, stop, id});
    start_offset = stop;
  }
  if (start_offset != sentence.size()) splits.push_back({start_offset, sentence.size(), -1});
  return splits;
}

void AddedVocabulary::extract(std::vector<Piece>& pieces, bool normalized_pass) const {
  const Trie& trie = normalized_pass ? normalized_trie_ : raw_trie_;
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& p : pieces) {
    if (p.is_token()) {
      out.push_back(std::move(p));
      continue;
    }
    for (const Split& s : find_matches(p.text, trie)) {
      if (s.end <= s.start) continue;
      Piece sub = sub_piece(p, s.start, s.end);
      sub.id = s.id;
      out.push_back(std::move(sub));
    }
  }
  pieces = std::move(out);
}

}  // namespace lowbit::tokenizer
