// UTF-8 and Unicode helpers for the tokenizer, with the semantics of the Rust functions that HF
// tokenizers calls (char::is_whitespace, char::is_numeric, regex `\w`, String::from_utf8_lossy,
// char::to_lowercase, unicode-normalization). Property data comes from ICU.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lowbit::tokenizer {

// Length of the UTF-8 sequence that starts with `lead` (1 for bytes that cannot start one).
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at s[i] of a string known to be valid UTF-8 and moves i past it.
char32_t next_char(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t c);

// Byte index of the first byte that is not part of well-formed UTF-8 (no overlong forms,
// surrogates or values above U+10FFFF), or npos when all of s is valid.
size_t find_invalid_utf8(std::string_view s);

// Rust String::from_utf8_lossy: one U+FFFD per maximal invalid subsequence.
std::string utf8_lossy(std::string_view bytes);

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
inline bool ends_with_replacement(std::string_view s) {
  return s.size() >= 3 && s.substr(s.size() - 3) == kReplacementChar;
}

bool is_whitespace(char32_t c);       // White_Space (Rust char::is_whitespace, regex \s)
bool is_numeric(char32_t c);          // Nd | Nl | No (Rust char::is_numeric)
bool is_punctuation(char32_t c);      // ASCII punctuation or P* (tokenizers' is_punc)
bool is_word_char(char32_t c);        // regex crate \w: Alphabetic | M* | Nd | Pc | Join_Control
bool is_combining_mark(char32_t c);   // M*
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_other(char32_t c);            // C* (Cc Cf Cs Co Cn)

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize_unicode(std::string_view s, NormalForm form);

// Rust char::to_lowercase applied char by char (full mappings, no context, no locale).
std::string to_lowercase(std::string_view s);
void append_lowercase(std::string& out, char32_t c);

}  // namespace lowbit::tokenizer
