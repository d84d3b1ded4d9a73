// GPT-2's byte-level alphabet (tokenizers/src/pre_tokenizers/byte_level.rs::bytes_char): a
// bijection between the 256 byte values and 256 printable chars, used to spell byte-level BPE
// vocabularies. Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to the same code point; the other 68
// map to U+0100 upward in increasing byte order (space is U+0120 'Ġ', newline U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lowbit::tokenizer {

// Code point for each byte.
char32_t byte_to_alphabet(uint8_t b);
// The byte for an alphabet char, or -1 for chars outside the alphabet.
int alphabet_to_byte(char32_t c);
// Maps every byte of `bytes` to its alphabet char (UTF-8 encoded).
std::string bytes_to_alphabet(std::string_view bytes);

}  // namespace lowbit::tokenizer
