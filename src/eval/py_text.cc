#include "eval/py_text.h"

#include <fstream>
#include <sstream>

#include "lowbit/error.h"


namespace lowbit::eval {
namespace {

// Decodes the code point starting at s[i] and its byte length. Invalid sequences count as one
// byte each (the texts lm-eval reads are valid UTF-8; this only keeps the scan total).
char32_t decode_at(std::string_view s, size_t i, size_t& length) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) n = 1;
  if (n == 1) {
    length = 1;
    return b0;
  }
  char32_t c = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  length = n;
  return c;
}

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

bool is_python_space(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return true;
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int64_t python_length(std::string_view utf8) {
  int64_t n = 0;
  for (char c : utf8) n += is_continuation_byte(c) ? 0 : 1;
  return n;
}

size_t python_trailing_space_bytes(std::string_view utf8) {
  // Walk forward (decoding from the end is ambiguous for invalid text) and remember where the
  // last non-space code point ended.
  size_t end_of_text = 0;
  for (size_t i = 0; i < utf8.size();) {
    size_t length = 1;
    const char32_t c = decode_at(utf8, i, length);
    i += length;
    if (!is_python_space(c)) end_of_text = i;
  }
  return utf8.size() - end_of_text;
}

int64_t python_split_count(std::string_view utf8) {
  int64_t pieces = 1;
  bool in_space = false;
  for (size_t i = 0; i < utf8.size();) {
    size_t length = 1;
    const bool space = is_python_space(decode_at(utf8, i, length));
    i += length;
    if (space && !in_space) ++pieces;
    in_space = space;
  }
  return pieces;
}

std::string read_text_file_universal_newlines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open the text file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string raw = buffer.str();
  std::string text;
  text.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\r') {
      text += raw[i];
    } else {
      text += '\n';
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    }
  }
  return text;
}

}  // namespace lowbit::eval
