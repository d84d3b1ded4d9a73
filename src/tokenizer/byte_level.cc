#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {
namespace {

struct Alphabet {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8{};
  std::array<int16_t, 0x144> to_byte{};  // every alphabet char is below U+0144

  Alphabet() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
      append_utf8(to_utf8[b], to_char[b]);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t byte_to_alphabet(uint8_t b) { return alphabet().to_char[b]; }

int alphabet_to_byte(char32_t c) {
  return c < alphabet().to_byte.size() ? alphabet().to_byte[c] : -1;
}

std::string bytes_to_alphabet(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += a.to_utf8[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace lowbit::tokenizer
