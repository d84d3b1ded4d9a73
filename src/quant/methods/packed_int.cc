#include "quant/methods/packed_int.h"

#include <cstddef>

namespace lowbit::quant {

std::vector<uint8_t> unpack_along_rows(const int32_t* words, int64_t rows, int64_t cols, int bits) {
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const int shift = static_cast<int>(r % per_word) * bits;
    const int32_t* row = words + (r / per_word) * cols;
    for (int64_t c = 0; c < cols; ++c) {
      out[static_cast<size_t>(r * cols + c)] =
          static_cast<uint8_t>((static_cast<uint32_t>(row[c]) >> shift) & mask);
    }
  }
  return out;
}

std::vector<uint8_t> unpack_along_cols(const int32_t* words, int64_t rows, int64_t cols, int bits,
                                       const std::vector<int>& order) {
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1u;
  const int64_t words_per_row = cols / per_word;
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t w = 0; w < words_per_row; ++w) {
      const uint32_t word = static_cast<uint32_t>(words[r * words_per_row + w]);
      for (int i = 0; i < per_word; ++i) {
        const int64_t c = w * per_word + (order.empty() ? i : order[static_cast<size_t>(i)]);
        out[static_cast<size_t>(r * cols + c)] = static_cast<uint8_t>((word >> (i * bits)) & mask);
      }
    }
  }
  return out;
}

}  // namespace lowbit::quant
