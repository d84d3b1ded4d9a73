// Bit packing of compressed-tensors (FORMATS.md §2.1-2.2): integer codes of any width 1..8 as a
// dense little-endian bit stream in int32 words (compressed-tensors >= 0.17) or the pre-0.17 layout
// (32/b whole values per word), and FP4 E2M1 codes two to a byte.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::quant {

// Packs rows of signed codes q in [-2^(b-1), 2^(b-1)) along the last dim: [rows, cols] →
// [rows, ceil(cols*b/32)] int32 words (offset to unsigned, element 0 in the low bits).
std::vector<int32_t> pack_int_rows(const int8_t* q, int64_t rows, int64_t cols, int bits);
// Inverse; accepts both layouts, told apart by words_per_row (dense ceil(cols*b/32), legacy
// ceil(cols/(32/b))); throws InvalidArgument when it is neither.
std::vector<int8_t> unpack_int_rows(const int32_t* words, int64_t rows, int64_t words_per_row,
                                    int64_t cols, int bits);
int64_t packed_words_per_row(int64_t cols, int bits);         // dense
int64_t legacy_packed_words_per_row(int64_t cols, int bits);  // pre-0.17

// Zero points are packed along dim 0: [rows, cols] → [ceil(rows*b/32), cols].
std::vector<int32_t> pack_int_columns(const int8_t* q, int64_t rows, int64_t cols, int bits);
std::vector<int8_t> unpack_int_columns(const int32_t* words, int64_t packed_rows, int64_t rows,
                                       int64_t cols, int bits);

// FP4 E2M1: value → 4-bit code (sign bit 3, magnitude index into {0,.5,1,1.5,2,3,4,6}); the value
// must already be on the grid (round_to_fp4 first).
uint8_t fp4_code(float v);
float fp4_value(uint8_t code);
float round_to_fp4(float x);  // compressed-tensors' rounding rule, saturating at ±6
// [rows, cols] codes → [rows, cols/2] bytes (element 2k in the low nibble); cols must be even.
std::vector<uint8_t> pack_fp4_rows(const uint8_t* codes, int64_t rows, int64_t cols);
std::vector<uint8_t> unpack_fp4_rows(const uint8_t* bytes, int64_t rows, int64_t cols);

}  // namespace lowbit::quant
