// cat(...): builds a message from strings and numbers by appending. Used instead of
// `"(" + std::to_string(x) + ...`, which GCC 12 at -O3 flags with a false -Wrestrict warning.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace lowbit::models {

inline void append_part(std::string& out, std::string_view s) { out += s; }

template <typename T>
requires std::is_arithmetic_v<T>
void append_part(std::string& out, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    std::ostringstream text;
    text << value;
    out += text.str();
  } else {
    out += std::to_string(value);
  }
}

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  (append_part(out, parts), ...);
  return out;
}

}  // namespace lowbit::models
