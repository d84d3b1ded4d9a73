// UTF-8 and Python str helpers for the Jinja interpreter. Templates and messages are UTF-8, but
// Python's str semantics are per code point (len, slicing, strip, isspace), so the helpers here
// convert where a code point view is needed and keep bytes otherwise.
#pragma once

#include <string>
#include <string_view>

namespace lowbit::jinja::text {

// Decodes UTF-8; an invalid byte becomes U+FFFD so that malformed input never throws here.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
// Number of code points (Python len()).
size_t length(std::string_view s);
bool is_ascii(std::string_view s);

// Python str.isspace(): the Unicode whitespace set, which also drives strip() and split().
bool is_space(char32_t c);
// Approximates Python's str.isprintable() for repr(): control, format, separator (other than
// U+0020), surrogate and private-use code points are escaped. Unassigned ones are not detected.
bool is_printable(char32_t c);
// Python's \w for the ASCII range plus every non-ASCII letter or digit the C library knows.
bool is_word(char32_t c);
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_cased_upper(char32_t c);
bool is_cased_lower(char32_t c);

// Python str.upper()/lower(): simple case mapping from the C library's C.UTF-8 tables, plus the
// one special mapping templates meet in practice (ß -> SS).
std::string upper(std::string_view s);
std::string lower(std::string_view s);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);

// Python str.strip/lstrip/rstrip. chars == nullptr strips whitespace (is_space).
std::string strip(std::string_view s, bool left, bool right, const std::u32string* chars = nullptr);

// Python str.splitlines() line boundaries.
bool is_line_break(char32_t c);

}  // namespace lowbit::jinja::text
