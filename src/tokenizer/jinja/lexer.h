// Jinja lexer with transformers' environment baked in: trim_blocks and lstrip_blocks on,
// keep_trailing_newline off, default delimiters, no line statements. It reproduces jinja2's
// lexer.py rules, including the "-"/"+" whitespace modifiers and its `line_starting` state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lowbit::jinja {

enum class TokenType {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;  // data, name, operator, or the unescaped string literal
  int64_t int_value = 0;
  double float_value = 0.0;
  size_t offset = 0;  // byte offset in the normalized source, for line:col in errors
};

struct LexedTemplate {
  std::string source;         // newlines normalized to \n, one trailing newline dropped
  std::vector<Token> tokens;  // ends with kEof
};

// Throws InvalidArgument ("chat template: syntax error at L:C: ...") on malformed input.
LexedTemplate tokenize(const std::string& source);

// Python's "unicode-escape" decoding of a string literal's body, applied (as jinja does) after
// non-ASCII characters were turned into backslash escapes: so a backslash before a non-ASCII
// character escapes the backslash of that escape and leaves e.g. "\\xe9" as four characters.
// err is called (and must throw) on a malformed escape.
std::string unescape_literal(const std::string& body,
                             const std::function<void(const std::string&)>& err);

// "line L, column C" of a byte offset, for error messages.
std::string describe_position(const std::string& source, size_t offset);

}  // namespace lowbit::jinja
