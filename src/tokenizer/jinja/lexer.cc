#include "tokenizer/jinja/lexer.h"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <functional>

#include "lowbit/error.h"
#include "tokenizer/jinja/text.h"

namespace lowbit::jinja {

std::string describe_position(const std::string& source, size_t offset) {
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return std::to_string(line) + ":" +
         std::to_string(text::length(source.substr(line_start, offset - line_start)) + 1);
}

namespace {

// jinja2 splits the source on \r\n, \r and \n, drops one empty last line, and rejoins with \n.
std::string normalize_newlines(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out += in[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string source) { result_.source = std::move(source); }

  LexedTemplate run() {
    const std::string& s = src();
    while (pos_ < s.size()) {
      size_t p = find_tag_start(pos_);
      if (p == std::string::npos) {
        emit(TokenType::kData, s.substr(pos_), pos_);
        break;
      }
      lex_tag_start(p);
    }
    emit(TokenType::kEof, "", s.size());
    return std::move(result_);
  }

 private:
  const std::string& src() const { return result_.source; }

  [[noreturn]] void error(size_t offset, const std::string& message) const {
    throw InvalidArgument("chat template: syntax error at " + describe_position(src(), offset) +
                          ": " + message);
  }

  void emit(TokenType type, std::string text, size_t offset) {
    if (type == TokenType::kData && text.empty()) return;
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.offset = offset;
    result_.tokens.push_back(std::move(t));
  }

  bool starts_with(size_t p, const char* lit) const {
    return src().compare(p, std::strlen(lit), lit) == 0;
  }

  size_t find_tag_start(size_t from) const {
    const std::string& s = src();
    for (size_t p = s.find('{', from); p != std::string::npos; p = s.find('{', p + 1)) {
      if (p + 1 < s.size() && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  // Length in bytes of the (Unicode) whitespace run at p.
  size_t whitespace_run(size_t p) const {
    const std::string& s = src();
    size_t q = p;
    while (q < s.size()) {
      size_t len = 1;
      auto b = static_cast<unsigned char>(s[q]);
      if (b >= 0xC0) len = b >= 0xF0 ? 4 : (b >= 0xE0 ? 3 : 2);
      std::u32string cp = text::decode(std::string_view(s).substr(q, len));
      if (cp.size() != 1 || !text::is_space(cp[0])) break;
      q += len;
    }
    return q - p;
  }

  // The text before a tag, after the "-" (strip all whitespace) or lstrip_blocks rule.
  std::string strip_before(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return text::strip(text, false, true);
    if (sign == '+' || is_variable) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
      std::string tail = text.substr(l_pos);
      if (text::strip(tail, true, true).empty()) text.erase(l_pos);
    }
    return text;
  }

  // Matches the end of a block tag at p: "+%}", "-%}" plus whitespace, or "%}" plus one newline
  // (trim_blocks). Returns the end offset, or npos.
  size_t match_block_end(size_t p) const {
    if (starts_with(p, "+%}")) return p + 3;
    if (starts_with(p, "-%}")) return p + 3 + whitespace_run(p + 3);
    if (starts_with(p, "%}")) return p + 2 + (p + 2 < src().size() && src()[p + 2] == '\n' ? 1 : 0);
    return std::string::npos;
  }

  void finish_tag(size_t end) {
    line_starting_ = end > 0 && src()[end - 1] == '\n';
    pos_ = end;
  }

  // "{% raw %}" at p (with optional sign and "-%}"); returns the end offset or npos.
  size_t match_raw_begin(size_t p) const {
    if (!starts_with(p, "{%")) return std::string::npos;
    size_t q = p + 2;
    if (q < src().size() && (src()[q] == '-' || src()[q] == '+')) ++q;
    q += whitespace_run(q);
    if (!starts_with(q, "raw")) return std::string::npos;
    q += 3;
    q += whitespace_run(q);
    if (starts_with(q, "-%}")) return q + 3 + whitespace_run(q + 3);
    if (starts_with(q, "%}")) return q + 2;
    return std::string::npos;
  }

  void lex_tag_start(size_t p) {
    const std::string& s = src();
    char kind = s[p + 1];
    char sign = (p + 2 < s.size() && (s[p + 2] == '-' || s[p + 2] == '+')) ? s[p + 2] : 0;
    emit(TokenType::kData, strip_before(s.substr(pos_, p - pos_), sign, kind == '{'), pos_);
    size_t raw_end = kind == '%' ? match_raw_begin(p) : std::string::npos;
    if (raw_end != std::string::npos) {
      finish_tag(raw_end);
      lex_raw_body();
      return;
    }
    size_t body = p + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      lex_comment(p, body);
    } else if (kind == '%') {
      emit(TokenType::kBlockBegin, "", p);
      lex_inside_tag(body, false);
    } else {
      emit(TokenType::kVariableBegin, "", p);
      lex_inside_tag(body, true);
    }
  }

  void lex_comment(size_t begin, size_t body) {
    const std::string& s = src();
    for (size_t i = body; i + 1 < s.size(); ++i) {
      if (starts_with(i, "+#}")) return finish_tag(i + 3);
      if (starts_with(i, "-#}")) return finish_tag(i + 3 + whitespace_run(i + 3));
      if (starts_with(i, "#}"))
        return finish_tag(i + 2 + (i + 2 < s.size() && s[i + 2] == '\n' ? 1 : 0));
    }
    error(begin, "Missing end of comment tag");
  }

  void lex_raw_body() {
    const std::string& s = src();
    for (size_t i = s.find("{%", pos_); i != std::string::npos; i = s.find("{%", i + 1)) {
      size_t q = i + 2;
      char sign = (q < s.size() && (s[q] == '-' || s[q] == '+')) ? s[q] : 0;
      if (sign) ++q;
      q += whitespace_run(q);
      if (!starts_with(q, "endraw")) continue;
      q += 6;
      q += whitespace_run(q);
      size_t end = match_block_end(q);
      if (end == std::string::npos) continue;
      emit(TokenType::kData, strip_before(s.substr(pos_, i - pos_), sign, false), pos_);
      return finish_tag(end);
    }
    error(pos_, "Missing end of raw directive");
  }

  void lex_inside_tag(size_t p, bool is_variable) {
    const std::string& s = src();
    std::vector<char> balance;
    pos_ = p;
    while (pos_ < s.size()) {
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (!is_variable) {
          end = match_block_end(pos_);
        } else if (starts_with(pos_, "-}}")) {
          end = pos_ + 3 + whitespace_run(pos_ + 3);
        } else if (starts_with(pos_, "}}")) {
          end = pos_ + 2;
        }
        if (end != std::string::npos) {
          emit(is_variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", pos_);
          return finish_tag(end);
        }
      }
      if (size_t ws = whitespace_run(pos_)) {
        pos_ += ws;
        continue;
      }
      if (lex_number() || lex_name() || lex_string()) continue;
      lex_operator(balance);
    }
    // Unclosed tag: the parser reports the unexpected end of template.
  }

  // (\d+_)*\d+ at p; returns the end or npos.
  size_t digit_run(size_t p) const {
    const std::string& s = src();
    if (p >= s.size() || !is_digit(s[p])) return std::string::npos;
    while (p < s.size() && is_digit(s[p])) ++p;
    while (p + 1 < s.size() && s[p] == '_' && is_digit(s[p + 1])) {
      ++p;
      while (p < s.size() && is_digit(s[p])) ++p;
    }
    return p;
  }

  size_t exponent_at(size_t p) const {
    const std::string& s = src();
    if (p >= s.size() || (s[p] != 'e' && s[p] != 'E')) return std::string::npos;
    ++p;
    if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
    return digit_run(p);
  }

  size_t float_end(size_t p) const {
    const std::string& s = src();
    if (p > 0 && s[p - 1] == '.') return std::string::npos;
    size_t a = digit_run(p);
    if (a == std::string::npos) return std::string::npos;
    size_t frac = (a < s.size() && s[a] == '.') ? digit_run(a + 1) : std::string::npos;
    if (frac != std::string::npos) {
      size_t e = exponent_at(frac);
      if (e != std::string::npos) return e;
    }
    size_t e = exponent_at(a);
    if (e != std::string::npos) return e;
    return frac;
  }

  size_t integer_end(size_t p, int* base) const {
    const std::string& s = src();
    *base = 10;
    if (p + 1 < s.size() && s[p] == '0') {
      char b = static_cast<char>(s[p + 1] | 0x20);
      const char* digits = b == 'b'   ? "01"
                           : b == 'o' ? "01234567"
                           : b == 'x' ? "0123456789abcdefABCDEF"
                                      : nullptr;
      if (digits != nullptr) {
        size_t q = p + 2;
        size_t last = std::string::npos;
        while (q < s.size()) {
          size_t r = q + (s[q] == '_' ? 1 : 0);
          if (r >= s.size() || std::strchr(digits, s[r]) == nullptr || s[r] == 0) break;
          q = r + 1;
          last = q;
        }
        if (last != std::string::npos) {
          *base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
          return last;
        }
      }
    }
    if (p < s.size() && s[p] == '0') {
      size_t q = p + 1;
      while (q < s.size() && (s[q] == '0' || (s[q] == '_' && q + 1 < s.size() && s[q + 1] == '0')))
        ++q;
      return q;
    }
    return digit_run(p);
  }

  bool lex_number() {
    const std::string& s = src();
    size_t end = float_end(pos_);
    std::string digits;
    if (end != std::string::npos) {
      for (size_t i = pos_; i < end; ++i) {
        if (s[i] != '_') digits += s[i];
      }
      Token t;
      t.type = TokenType::kFloat;
      std::from_chars(digits.data(), digits.data() + digits.size(), t.float_value);
      t.offset = pos_;
      result_.tokens.push_back(t);
      pos_ = end;
      return true;
    }
    int base = 10;
    end = integer_end(pos_, &base);
    if (end == std::string::npos) return false;
    for (size_t i = pos_ + (base == 10 ? 0 : 2); i < end; ++i) {
      if (s[i] != '_') digits += s[i];
    }
    Token t;
    t.type = TokenType::kInteger;
    auto parsed = std::from_chars(digits.data(), digits.data() + digits.size(), t.int_value, base);
    if (parsed.ec != std::errc()) error(pos_, "integer literal does not fit in 64 bits");
    t.offset = pos_;
    result_.tokens.push_back(t);
    pos_ = end;
    return true;
  }

  bool lex_name() {
    const std::string& s = src();
    size_t q = pos_;
    auto name_char = [](char c) {
      return static_cast<unsigned char>(c) >= 0x80 || c == '_' || is_digit(c) ||
             ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    };
    while (q < s.size() && name_char(s[q])) ++q;
    if (q == pos_) return false;
    emit(TokenType::kName, s.substr(pos_, q - pos_), pos_);
    pos_ = q;
    return true;
  }

  bool lex_string();
  void lex_operator(std::vector<char>& balance);

  LexedTemplate result_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

bool Lexer::lex_string() {
  const std::string& s = src();
  char quote = s[pos_];
  if (quote != '\'' && quote != '"') return false;
  size_t q = pos_ + 1;
  while (q < s.size() && s[q] != quote) q += s[q] == '\\' ? 2 : 1;
  if (q >= s.size()) error(pos_, std::string("unexpected char '") + quote + "'");
  size_t start = pos_;
  std::string value = unescape_literal(s.substr(pos_ + 1, q - pos_ - 1),
                                       [&](const std::string& m) { error(start, m); });
  emit(TokenType::kString, std::move(value), pos_);
  pos_ = q + 1;
  return true;
}

void Lexer::lex_operator(std::vector<char>& balance) {
  const std::string& s = src();
  static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
  for (const char* op : kTwo) {
    if (starts_with(pos_, op)) {
      emit(TokenType::kOperator, op, pos_);
      pos_ += 2;
      return;
    }
  }
  char c = s[pos_];
  if (std::strchr("+-/*%~[](){}<>=.:|,;", c) == nullptr || c == 0) {
    error(pos_, std::string("unexpected char '") + c + "'");
  }
  if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
  if (c == ')' || c == ']' || c == '}') {
    if (balance.empty()) error(pos_, std::string("unexpected '") + c + "'");
    if (balance.back() != c)
      error(pos_, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
    balance.pop_back();
  }
  emit(TokenType::kOperator, std::string(1, c), pos_);
  ++pos_;
}

}  // namespace

LexedTemplate tokenize(const std::string& source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace lowbit::jinja
