#include "tokenizer/unicode.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

#include "lowbit/error.h"

namespace lowbit::tokenizer {
namespace {

// Checks the UTF-8 sequence at s[i] (Unicode Table 3-7). Returns true for a complete well-formed
// character of length *len; otherwise *len is the length of the maximal subpart to replace
// (at least 1), which is what Rust's from_utf8_lossy replaces with one U+FFFD.
bool check_sequence(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return true;
  }
  size_t width = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    width = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    width = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    width = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return false;
  }
  size_t k = 1;
  for (; k < width && i + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  *len = k;
  return k == width;
}

const UNormalizer2* normalizer_instance(NormalForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormalForm::NFC: n = unorm2_getNFCInstance(&err); break;
    case NormalForm::NFD: n = unorm2_getNFDInstance(&err); break;
    case NormalForm::NFKC: n = unorm2_getNFKCInstance(&err); break;
    case NormalForm::NFKD: n = unorm2_getNFKDInstance(&err); break;
  }
  if (U_FAILURE(err) || n == nullptr) {
    throw Internal(std::string("ICU normalizer unavailable: ") + u_errorName(err));
  }
  return n;
}

std::u16string to_utf16(std::string_view s) {
  std::u16string out(s.size() + 1, u'\0');
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  // Callers pass valid UTF-8; a stray invalid byte becomes U+FFFD rather than an error.
  u_strFromUTF8WithSub(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                       &len, s.data(), static_cast<int32_t>(s.size()), 0xFFFD, nullptr, &err);
  if (U_FAILURE(err)) throw Internal(std::string("UTF-8 to UTF-16: ") + u_errorName(err));
  out.resize(static_cast<size_t>(len));
  return out;
}

std::string to_utf8(const std::u16string& s) {
  std::string out(s.size() * 3 + 1, '\0');
  int32_t len = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len,
              reinterpret_cast<const UChar*>(s.data()), static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) throw Internal(std::string("UTF-16 to UTF-8: ") + u_errorName(err));
  out.resize(static_cast<size_t>(len));
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

char32_t next_char(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_len(b0);
  char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) {
    c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  i += n;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    if (!check_sequence(s, i, &len)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t len = 0;
    if (check_sequence(bytes, i, &len)) {
      out.append(bytes.substr(i, len));
    } else {
      out.append(kReplacementChar);
    }
    i += len;
  }
  return out;
}

bool is_whitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }

bool is_numeric(char32_t c) {
  const auto t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                       (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  const auto t = u_charType(static_cast<UChar32>(c));
  return t == U_CONNECTOR_PUNCTUATION || t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION ||
         t == U_END_PUNCTUATION || t == U_INITIAL_PUNCTUATION || t == U_FINAL_PUNCTUATION ||
         t == U_OTHER_PUNCTUATION;
}

bool is_combining_mark(char32_t c) {
  const auto t = u_charType(static_cast<UChar32>(c));
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK;
}

bool is_mark_nonspacing(char32_t c) {
  return u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  const auto u = static_cast<UChar32>(c);
  const auto t = u_charType(u);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || is_combining_mark(c) ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

bool is_other(char32_t c) {
  const auto t = u_charType(static_cast<UChar32>(c));
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR || t == U_SURROGATE ||
         t == U_PRIVATE_USE_CHAR || t == U_UNASSIGNED;
}

std::string normalize_unicode(std::string_view s, NormalForm form) {
  if (is_ascii(s)) return std::string(s);  // ASCII is invariant under all four forms
  const UNormalizer2* n = normalizer_instance(form);
  const std::u16string src = to_utf16(s);
  // NFKC/NFKD can grow a string by up to 18x per code unit; retry with the reported size.
  std::u16string dst(src.size() * 3 + 16, u'\0');
  UErrorCode err = U_ZERO_ERROR;
  int32_t len = unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()),
                                 static_cast<int32_t>(src.size()),
                                 reinterpret_cast<UChar*>(dst.data()),
                                 static_cast<int32_t>(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    dst.assign(static_cast<size_t>(len) + 1, u'\0');
    err = U_ZERO_ERROR;
    len = unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()),
                           static_cast<int32_t>(src.size()), reinterpret_cast<UChar*>(dst.data()),
                           static_cast<int32_t>(dst.size()), &err);
  }
  if (U_FAILURE(err)) throw Internal(std::string("ICU normalize: ") + u_errorName(err));
  dst.resize(static_cast<size_t>(len));
  return to_utf8(dst);
}

void append_lowercase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  // One character at a time, root locale: the full mapping without context (so a lone capital
  // sigma maps to the non-final form, as Rust's char::to_lowercase does).
  std::string utf8;
  append_utf8(utf8, c);
  const std::u16string src = to_utf16(utf8);
  UChar dst[16];
  UErrorCode err = U_ZERO_ERROR;
  const int32_t len = u_strToLower(dst, 16, reinterpret_cast<const UChar*>(src.data()),
                                   static_cast<int32_t>(src.size()), "", &err);
  if (U_FAILURE(err)) throw Internal(std::string("ICU lowercase: ") + u_errorName(err));
  out += to_utf8(std::u16string(reinterpret_cast<const char16_t*>(dst), static_cast<size_t>(len)));
}

std::string to_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) append_lowercase(out, next_char(s, i));
  return out;
}

}  // namespace lowbit::tokenizer
