// Python string algorithms the interpreter needs in several places: string-literal escapes,
// str.split/rsplit, str.replace and str.capitalize.
#include <algorithm>
#include <cstdio>
#include <functional>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/text.h"

namespace lowbit::jinja {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = static_cast<char>(c | 0x20);
  return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

}  // namespace

std::string unescape_literal(const std::string& body,
                             const std::function<void(const std::string&)>& err) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (i + 1 >= body.size()) {
      err("\\ at end of string");
      break;
    }
    char n = body[++i];
    switch (n) {
      case '\n':
        continue;
      case '\\':
        out += '\\';
        continue;
      case '\'':
        out += '\'';
        continue;
      case '"':
        out += '"';
        continue;
      case 'a':
        out += '\a';
        continue;
      case 'b':
        out += '\b';
        continue;
      case 'f':
        out += '\f';
        continue;
      case 'n':
        out += '\n';
        continue;
      case 'r':
        out += '\r';
        continue;
      case 't':
        out += '\t';
        continue;
      case 'v':
        out += '\v';
        continue;
      default:
        break;
    }
    if (n >= '0' && n <= '7') {
      char32_t v = static_cast<char32_t>(n - '0');
      for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
           ++k) {
        v = v * 8 + static_cast<char32_t>(body[++i] - '0');
      }
      text::append_utf8(out, v);
    } else if (n == 'x' || n == 'u' || n == 'U') {
      int digits = n == 'x' ? 2 : n == 'u' ? 4 : 8;
      char32_t v = 0;
      for (int k = 0; k < digits; ++k) {
        int h = i + 1 < body.size() ? hex_value(body[i + 1]) : -1;
        if (h < 0) {
          err(std::string("truncated \\") + n + " escape");
          return out;
        }
        v = v * 16 + static_cast<char32_t>(h);
        ++i;
      }
      if (v > 0x10FFFF) err("illegal Unicode character");
      text::append_utf8(out, v);
    } else if (n == 'N') {
      err("named Unicode escapes (\\N{...}) are not supported");
    } else if (static_cast<unsigned char>(n) >= 0x80) {
      size_t len = static_cast<unsigned char>(n) >= 0xF0   ? 4
                   : static_cast<unsigned char>(n) >= 0xE0 ? 3
                                                           : 2;
      std::u32string cp = text::decode(std::string_view(body).substr(i, len));
      char buf[16];
      char32_t u = cp.empty() ? 0xFFFD : cp[0];
      std::snprintf(buf, sizeof(buf),
                    u < 0x100     ? "\\x%02x"
                    : u < 0x10000 ? "\\u%04x"
                                  : "\\U%08x",
                    static_cast<unsigned>(u));
      out += '\\';
      out += buf + 1;
      i += len - 1;
    } else {
      out += '\\';
      out += n;
    }
  }
  return out;
}

ValueList split_string(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  ValueList parts;
  if (sep.is_none()) {
    std::u32string cps = text::decode(s);
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) of whitespace-separated runs
    for (size_t i = 0; i < cps.size();) {
      while (i < cps.size() && text::is_space(cps[i])) ++i;
      size_t b = i;
      while (i < cps.size() && !text::is_space(cps[i])) ++i;
      if (i > b) words.emplace_back(b, i);
    }
    size_t n = words.size();
    size_t splits = maxsplit < 0 ? n : std::min<size_t>(n, static_cast<size_t>(maxsplit) + 1);
    auto sub = [&](size_t b, size_t e) {
      return Value(text::encode(std::u32string_view(cps).substr(b, e - b)));
    };
    if (splits == 0) return parts;
    if (!from_right) {
      for (size_t w = 0; w + 1 < splits; ++w) parts.push_back(sub(words[w].first, words[w].second));
      // The unsplit remainder keeps its trailing whitespace, as in Python.
      parts.push_back(sub(words[splits - 1].first, splits == n ? words[n - 1].second : cps.size()));
    } else {
      size_t first = n - splits;
      parts.push_back(sub(splits == n ? words[0].first : 0, words[first].second));
      for (size_t w = first + 1; w < n; ++w) parts.push_back(sub(words[w].first, words[w].second));
    }
    return parts;
  }
  if (!sep.is_string()) fail("TypeError: must be str or None, not " + sep.type_name());
  const std::string& d = sep.as_string();
  if (d.empty()) fail("ValueError: empty separator");
  std::vector<std::string> pieces;
  size_t start = 0;
  for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, start)) {
    pieces.push_back(s.substr(start, p - start));
    start = p + d.size();
  }
  pieces.push_back(s.substr(start));
  size_t keep =
      maxsplit < 0 ? pieces.size() : std::min(pieces.size(), static_cast<size_t>(maxsplit) + 1);
  auto joined = [&](size_t b, size_t e) {
    std::string out;
    for (size_t i = b; i < e; ++i) out += (i > b ? d : "") + pieces[i];
    return out;
  };
  if (!from_right) {
    for (size_t i = 0; i + 1 < keep; ++i) parts.emplace_back(pieces[i]);
    parts.emplace_back(joined(keep - 1, pieces.size()));
  } else {
    parts.emplace_back(joined(0, pieces.size() - keep + 1));
    for (size_t i = pieces.size() - keep + 1; i < pieces.size(); ++i) parts.emplace_back(pieces[i]);
  }
  return parts;
}

std::string replace_string(const std::string& s, const std::string& old, const std::string& repl,
                           int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t done = 0;
    for (char32_t c : text::decode(s)) {
      if (count < 0 || done < count) out += repl, ++done;
      text::append_utf8(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  for (size_t p = s.find(old); p != std::string::npos && (count < 0 || done < count);
       p = s.find(old, start)) {
    out += s.substr(start, p - start) + repl;
    start = p + old.size();
    ++done;
  }
  return out + s.substr(start);
}

std::string capitalize_string(const std::string& s) {
  std::u32string cps = text::decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i)
    text::append_utf8(out, i == 0 ? text::to_upper(cps[i]) : text::to_lower(cps[i]));
  return out;
}

}  // namespace lowbit::jinja
