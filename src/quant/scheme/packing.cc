// Bit packing of compressed-tensors (compressors/pack_quantized/helpers.py of 0.19.0 for the
// dense layout, 0.16's pack_to_int32 for the legacy one; compressors/nvfp4/helpers.py for FP4).
#include "quant/scheme/packing.h"

#include <cmath>
#include <string>

#include "lowbit/error.h"

namespace lowbit::quant {

int64_t packed_words_per_row(int64_t cols, int bits) { return (cols * bits + 31) / 32; }

int64_t legacy_packed_words_per_row(int64_t cols, int bits) {
  const int64_t per_word = 32 / bits;
  return (cols + per_word - 1) / per_word;
}

namespace {

void check_bits(int bits) {
  LOWBIT_CHECK(bits >= 1 && bits <= 8,
               "integer packing supports 1..8 bits, got " + std::to_string(bits));
}

// One row (or column, with `stride`) of codes into a dense little-endian bit stream: element i
// at bit i*b, straddling word boundaries. The caller zero-fills `out`.
void pack_dense(const int8_t* q, int64_t n, int64_t stride, int bits, uint32_t* out,
                int64_t out_stride) {
  const int offset = 1 << (bits - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int v = q[i * stride];
    LOWBIT_CHECK(v >= -offset && v < offset,
                 "code " + std::to_string(v) + " does not fit in " + std::to_string(bits) + " bits");
    const uint64_t u = static_cast<uint64_t>(v + offset);
    const int64_t bit = i * bits;
    const int64_t word = bit / 32;
    const uint64_t shifted = u << (bit % 32);
    out[word * out_stride] |= static_cast<uint32_t>(shifted);
    if ((bit % 32) + bits > 32) out[(word + 1) * out_stride] |= static_cast<uint32_t>(shifted >> 32);
  }
}

// A contiguous row of B-bit codes, B dividing 32: whole words hold 32 / B codes each, unpacked with
// constant shifts (the compiler vectorizes it; the general loop below costs ~2 ns per code, which
// was a quarter of loading a W4A16 checkpoint). Returns how many codes it wrote.
template <int B>
int64_t unpack_words(const uint32_t* w, int64_t n, int8_t* q) {
  constexpr int kPer = 32 / B, kOffset = 1 << (B - 1);
  constexpr uint32_t kMask = (1u << B) - 1;
  const int64_t words = n / kPer;
  for (int64_t i = 0; i < words; ++i) {
    const uint32_t v = w[i];
#pragma GCC unroll 16
    for (int j = 0; j < kPer; ++j) {
      q[i * kPer + j] = static_cast<int8_t>(static_cast<int>((v >> (j * B)) & kMask) - kOffset);
    }
  }
  return words * kPer;
}

void unpack_dense(const uint32_t* w, int64_t n, int64_t stride, int bits, int8_t* q,
                  int64_t q_stride) {
  const int offset = 1 << (bits - 1);
  const uint64_t mask = (1u << bits) - 1;
  int64_t done = 0;
  if (stride == 1 && q_stride == 1) {
    switch (bits) {
      case 2:
        done = unpack_words<2>(w, n, q);
        break;
      case 4:
        done = unpack_words<4>(w, n, q);
        break;
      case 8:
        done = unpack_words<8>(w, n, q);
        break;
      default:
        break;
    }
  }
  for (int64_t i = done; i < n; ++i) {
    const int64_t bit = i * bits;
    const int64_t word = bit / 32;
    uint64_t v = w[word * stride];
    if ((bit % 32) + bits > 32) v |= static_cast<uint64_t>(w[(word + 1) * stride]) << 32;
    q[i * q_stride] = static_cast<int8_t>(static_cast<int>((v >> (bit % 32)) & mask) - offset);
  }
}

// Pre-0.17: 32/b whole values per word, the high bits of each word unused when b ∤ 32.
void unpack_legacy(const uint32_t* w, int64_t n, int64_t stride, int bits, int8_t* q,
                   int64_t q_stride) {
  const int offset = 1 << (bits - 1);
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t word = w[(i / per_word) * stride];
    const int shift = static_cast<int>(i % per_word) * bits;
    q[i * q_stride] = static_cast<int8_t>(static_cast<int>((word >> shift) & mask) - offset);
  }
}

// Which layout `words` (per packed line) holds: dense when it matches (it is what
// compressed-tensors >= 0.17 writes, and the only one for b in {1,2,4,8}, where both agree);
// legacy otherwise. For b in {3,5,6,7} a few short lines have the same word count in both
// layouts (e.g. 50 3-bit values: 5 words); those are read as dense.
bool is_legacy(int64_t words, int64_t n, int bits, const std::string& what) {
  if (words == packed_words_per_row(n, bits)) return false;
  if (words == legacy_packed_words_per_row(n, bits)) return true;
  throw InvalidArgument(what + ": " + std::to_string(words) + " packed words cannot hold " +
                        std::to_string(n) + " " + std::to_string(bits) + "-bit values (expected " +
                        std::to_string(packed_words_per_row(n, bits)) + ", or " +
                        std::to_string(legacy_packed_words_per_row(n, bits)) +
                        " in the pre-0.17 layout)");
}

}  // namespace

std::vector<int32_t> pack_int_rows(const int8_t* q, int64_t rows, int64_t cols, int bits) {
  check_bits(bits);
  const int64_t wpr = packed_words_per_row(cols, bits);
  std::vector<int32_t> out(static_cast<size_t>(rows * wpr), 0);
  auto* words = reinterpret_cast<uint32_t*>(out.data());
  for (int64_t r = 0; r < rows; ++r) pack_dense(q + r * cols, cols, 1, bits, words + r * wpr, 1);
  return out;
}

std::vector<int8_t> unpack_int_rows(const int32_t* words, int64_t rows, int64_t words_per_row,
                                    int64_t cols, int bits) {
  check_bits(bits);
  const bool legacy = is_legacy(words_per_row, cols, bits, "packed rows");
  std::vector<int8_t> q(static_cast<size_t>(rows * cols));
  const auto* w = reinterpret_cast<const uint32_t*>(words);
  for (int64_t r = 0; r < rows; ++r) {
    if (legacy) unpack_legacy(w + r * words_per_row, cols, 1, bits, q.data() + r * cols, 1);
    else unpack_dense(w + r * words_per_row, cols, 1, bits, q.data() + r * cols, 1);
  }
  return q;
}

std::vector<int32_t> pack_int_columns(const int8_t* q, int64_t rows, int64_t cols, int bits) {
  check_bits(bits);
  const int64_t packed_rows = packed_words_per_row(rows, bits);
  std::vector<int32_t> out(static_cast<size_t>(packed_rows * cols), 0);
  auto* words = reinterpret_cast<uint32_t*>(out.data());
  for (int64_t c = 0; c < cols; ++c) pack_dense(q + c, rows, cols, bits, words + c, cols);
  return out;
}

std::vector<int8_t> unpack_int_columns(const int32_t* words, int64_t packed_rows, int64_t rows,
                                       int64_t cols, int bits) {
  check_bits(bits);
  const bool legacy = is_legacy(packed_rows, rows, bits, "packed zero points");
  std::vector<int8_t> q(static_cast<size_t>(rows * cols));
  const auto* w = reinterpret_cast<const uint32_t*>(words);
  for (int64_t c = 0; c < cols; ++c) {
    if (legacy) unpack_legacy(w + c, rows, cols, bits, q.data() + c, cols);
    else unpack_dense(w + c, rows, cols, bits, q.data() + c, cols);
  }
  return q;
}

// pack_fp4_to_uint8's mapping: index from 2|v| truncated to an integer, sign from signbit (so
// -0.0 keeps code 8). Values off the grid map as there (2.5 → 5 → index 0): round first.
uint8_t fp4_code(float v) {
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  const float twice = std::fabs(v * 2.0f);
  const int t = std::isnan(twice) || twice >= 128.0f ? 0 : static_cast<int>(twice);
  uint8_t idx = 0;
  switch (t) {
    case 1: idx = 1; break;
    case 2: idx = 2; break;
    case 3: idx = 3; break;
    case 4: idx = 4; break;
    case 6: idx = 5; break;
    case 8: idx = 6; break;
    default: idx = t >= 12 ? 7 : 0;
  }
  return sign | idx;
}

float fp4_value(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[code & 7];
  return (code & 8) ? -m : m;
}

// cast_to_fp4 (CPU path): thresholds on |x|, ties to the even mantissa; times torch.sign(x), so
// -0.0 gives +0.0 but a small negative value gives -0.0.
float round_to_fp4(float x) {
  if (std::isnan(x)) return x;
  const float sign = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
  const float a = std::fabs(x);
  float m;
  if (a <= 0.25f) m = 0.0f;
  else if (a < 0.75f) m = 0.5f;
  else if (a <= 1.25f) m = 1.0f;
  else if (a < 1.75f) m = 1.5f;
  else if (a <= 2.5f) m = 2.0f;
  else if (a < 3.5f) m = 3.0f;
  else if (a <= 5.0f) m = 4.0f;
  else m = 6.0f;
  return m * sign;
}

std::vector<uint8_t> pack_fp4_rows(const uint8_t* codes, int64_t rows, int64_t cols) {
  LOWBIT_CHECK(cols % 2 == 0, "fp4 packing needs an even number of columns, got " +
                                  std::to_string(cols));
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols / 2));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>((codes[2 * i] & 0xF) | ((codes[2 * i + 1] & 0xF) << 4));
  return out;
}

std::vector<uint8_t> unpack_fp4_rows(const uint8_t* bytes, int64_t rows, int64_t cols) {
  LOWBIT_CHECK(cols % 2 == 0, "fp4 unpacking needs an even number of columns, got " +
                                  std::to_string(cols));
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < codes.size() / 2; ++i) {
    codes[2 * i] = bytes[i] & 0xF;
    codes[2 * i + 1] = static_cast<uint8_t>(bytes[i] >> 4);
  }
  return codes;
}

}  // namespace lowbit::quant
