// Unpacking the int32 words AutoGPTQ / GPTQModel and AutoAWQ store their codes in. Both put
// 32/bits codes per word, the first code in the lowest bits; GPTQ packs along the input dimension
// (qweight [in / per_word, out]) and along the output dimension for zeros, AWQ packs along the
// output dimension in the interleaved order of its GEMM kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lowbit::quant {

// words: [rows / per_word, cols] → codes [rows, cols] (packed along rows).
std::vector<uint8_t> unpack_along_rows(const int32_t* words, int64_t rows, int64_t cols, int bits);
// words: [rows, cols / per_word] → codes [rows, cols] (packed along columns). `order` maps the
// position of a code in its word to its column within the word's span (AWQ: {0,2,4,6,1,3,5,7});
// empty means sequential.
std::vector<uint8_t> unpack_along_cols(const int32_t* words, int64_t rows, int64_t cols, int bits,
                                       const std::vector<int>& order = {});

// [rows, cols] row-major → [cols, rows]: GPTQ and AWQ store [in, out], the kernels take [out, in].
template <typename T>
std::vector<T> transposed(const T* m, int64_t rows, int64_t cols) {
  std::vector<T> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = m[r * cols + c];
  }
  return out;
}

}  // namespace lowbit::quant
