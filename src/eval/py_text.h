// The few Python string semantics lm-eval's numbers depend on, for UTF-8 text: len(str) (code
// points), str.rstrip() and len(re.split(r"\s+", s)). Python's whitespace (str.isspace, and `\s`
// of a str pattern) is the Unicode White_Space set plus the ASCII separators \x1c-\x1f.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lowbit::eval {

bool is_python_space(char32_t c);

// len(s) of the decoded string: the number of code points (bytes that are not UTF-8
// continuation bytes).
int64_t python_length(std::string_view utf8);

// The number of bytes of trailing whitespace: s.rstrip() is s.substr(0, s.size() - this).
size_t python_trailing_space_bytes(std::string_view utf8);

// len(re.split(r"\s+", s)): one more than the number of maximal whitespace runs (a leading or
// trailing run counts too, as it yields an empty piece).
int64_t python_split_count(std::string_view utf8);

// A text file read as Python's open() in text mode reads it (universal newlines): "\r\n" and a
// lone "\r" become "\n". IoError naming the file when it cannot be read.
std::string read_text_file_universal_newlines(const std::string& path);

}  // namespace lowbit::eval
