#include "tokenizer/pattern.h"

#include <oniguruma.h>

#include <algorithm>
#include <mutex>

#include "lowbit/error.h"
#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {
namespace {

// Oniguruma's global tables are set up once per process (onig_initialize is not thread-safe);
// onig_end is never called because compiled regexes live until exit.
void init_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int n = info != nullptr ? onig_error_code_to_str(buf, code, info)
                                : onig_error_code_to_str(buf, code);
  return std::string(reinterpret_cast<const char*>(buf), n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace

Regex::Regex(std::string_view pattern, const std::string& where) {
  init_oniguruma();
  regex_t* re = nullptr;
  OnigErrorInfo info{};
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int r = onig_new(&re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                         ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    throw InvalidArgument(where + ": invalid regex '" + std::string(pattern) +
                          "': " + onig_message(r, &info));
  }
  regex_ = re;
}

Regex::~Regex() {
  if (regex_ != nullptr) onig_free(static_cast<regex_t*>(regex_));
}

std::unique_ptr<Regex> Regex::literal(std::string_view literal, const std::string& where) {
  // Escape every ASCII char that is not alphanumeric with \x{..} so that the result is a plain
  // sequence of literals in any Oniguruma syntax; non-ASCII chars are always literal.
  std::string escaped;
  for (char ch : literal) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                       (c >= 'A' && c <= 'Z');
    if (plain) {
      escaped.push_back(ch);
    } else {
      static const char* kHex = "0123456789ABCDEF";
      escaped += "\\x{";
      escaped.push_back(kHex[c >> 4]);
      escaped.push_back(kHex[c & 15]);
      escaped += "}";
    }
  }
  return std::make_unique<Regex>(escaped, where);
}

std::vector<std::pair<size_t, size_t>> Regex::find_iter(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* re = static_cast<regex_t*>(regex_);
  OnigRegion* region = onig_region_new();
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* end = str + text.size();
  size_t last_end = 0;
  bool skip_next_empty = false;
  int error = 0;
  while (last_end <= text.size()) {
    onig_region_clear(region);
    const int r = onig_search(re, str, end, str + last_end, end, region, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) {
      error = r;
      break;
    }
    const auto s = static_cast<size_t>(region->beg[0]);
    const auto e = static_cast<size_t>(region->end[0]);
    last_end = e;
    if (s == e) {
      // An empty match: step over one char so the search moves on, and drop it when it comes
      // right after a non-empty match (rust-onig's FindMatches).
      last_end += e < text.size() ? utf8_len(static_cast<unsigned char>(text[e])) : 1;
      if (skip_next_empty) {
        skip_next_empty = false;
        continue;
      }
    } else {
      skip_next_empty = true;
    }
    out.emplace_back(s, e);
  }
  onig_region_free(region, 1);
  if (error != 0) {
    throw InvalidArgument("regex search failed (" + onig_message(error, nullptr) +
                          ") on a text of " + std::to_string(text.size()) + " bytes");
  }
  return out;
}

std::vector<Span> Regex::find_matches(std::string_view text) const {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Span> out;
  size_t prev = 0;
  for (const auto& [s, e] : find_iter(text)) {
    if (prev != s) out.push_back({prev, s, false});
    out.push_back({s, e, true});
    prev = e;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), false});
  return out;
}

std::vector<Span> find_char_matches(std::string_view text, const CharPredicate& pred) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Span> out;
  size_t last = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t b = i;
    const char32_t c = next_char(text, i);
    if (pred(c)) {
      if (last < b) out.push_back({last, b, false});
      out.push_back({b, i, true});
      last = i;
    }
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
  return out;
}

std::vector<std::pair<size_t, size_t>> apply_split_behavior(std::vector<Span> matches,
                                                            SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case SplitBehavior::ISOLATED:
      for (const auto& m : matches) out.emplace_back(m.start, m.end);
      break;
    case SplitBehavior::REMOVED:
      for (const auto& m : matches) {
        if (!m.is_match) out.emplace_back(m.start, m.end);
      }
      break;
    case SplitBehavior::CONTIGUOUS: {
      bool previous_match = false;
      for (const auto& m : matches) {
        if (m.is_match == previous_match && !out.empty()) {
          out.back().second = m.end;
        } else {
          out.emplace_back(m.start, m.end);
        }
        previous_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::MERGED_WITH_PREVIOUS: {
      bool previous_match = false;
      for (const auto& m : matches) {
        if (m.is_match && !previous_match && !out.empty()) {
          out.back().second = m.end;
        } else {
          out.emplace_back(m.start, m.end);
        }
        previous_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::MERGED_WITH_NEXT: {
      bool previous_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

}  // namespace lowbit::tokenizer
