// pack_wna16: checks an IntWeights and repacks it into the tiled layout of wna16_kernels.h.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/cpu/wna16_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu::detail {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Index of the first value >= limit, or -1.
template <typename T>
int64_t first_at_least(const std::vector<T>& values, int64_t limit) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (static_cast<int64_t>(values[i]) >= limit) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

void validate_int_weights(const IntWeights& w) {
  const std::string at = "pack_wna16: IntWeights.";
  LOWBIT_CHECK(w.bits >= 2 && w.bits <= 8, at + "bits = " + str(w.bits) + " is outside 2..8");
  LOWBIT_CHECK(w.rows >= 0 && w.cols >= 0,
               at + "rows/cols = " + str(w.rows) + "/" + str(w.cols) + " is negative");
  LOWBIT_CHECK(w.group_size > 0, at + "group_size = " + str(w.group_size) + " is not positive");
  const int64_t limit = int64_t{1} << w.bits;
  LOWBIT_CHECK(static_cast<int64_t>(w.codes.size()) == w.rows * w.cols,
               at + "codes has " + str(static_cast<int64_t>(w.codes.size())) +
                   " values, expected rows × cols = " + str(w.rows * w.cols));
  if (int64_t i = first_at_least(w.codes, limit); i >= 0) {
    throw InvalidArgument(at + "codes[" + str(i) + "] = " + str(w.codes[static_cast<size_t>(i)]) +
                          " does not fit in " + str(w.bits) + " bits");
  }
  const int64_t groups = w.groups();
  LOWBIT_CHECK(static_cast<int64_t>(w.scales.size()) == w.rows * groups,
               at + "scales has " + str(static_cast<int64_t>(w.scales.size())) +
                   " values, expected rows × groups = " + str(w.rows * groups));
  LOWBIT_CHECK(w.zeros.empty() || static_cast<int64_t>(w.zeros.size()) == w.rows * groups,
               at + "zeros has " + str(static_cast<int64_t>(w.zeros.size())) +
                   " values, expected 0 or rows × groups = " + str(w.rows * groups));
  if (int64_t i = first_at_least(w.zeros, limit); i >= 0) {
    throw InvalidArgument(at + "zeros[" + str(i) + "] = " + str(w.zeros[static_cast<size_t>(i)]) +
                          " does not fit in " + str(w.bits) + " bits");
  }
  LOWBIT_CHECK(w.g_idx.empty() || static_cast<int64_t>(w.g_idx.size()) == w.cols,
               at + "g_idx has " + str(static_cast<int64_t>(w.g_idx.size())) +
                   " values, expected 0 or cols = " + str(w.cols));
  for (size_t c = 0; c < w.g_idx.size(); ++c) {
    LOWBIT_CHECK(w.g_idx[c] >= 0 && w.g_idx[c] < groups,
                 at + "g_idx[" + str(static_cast<int64_t>(c)) + "] = " + str(w.g_idx[c]) +
                     " is outside [0, " + str(groups) + ")");
  }
}

Wna16PackedCpu::Wna16PackedCpu(Wna16Kernel kernel, const IntWeights& w) : kernel_(kernel) {
  validate_int_weights(w);
  // The bf16-dot kernel only has a 2..4-bit path: the exact AVX-512 kernel runs wider codes, with
  // the i16-dot decode (wna16_kernels.h: i16_decode).
  if (kernel_ == Wna16Kernel::AVX512_BF16DOT && w.bits > 4) {
    kernel_ = Wna16Kernel::AVX512;
    i16_decode_ = wna16_kernel_supported(Wna16Kernel::AVX2_I16DOT);
  }
  Wna16Layout& L = layout_;
  L.bits = w.bits;
  L.nibbles = w.bits <= 4;
  L.block_bytes = L.nibbles ? 16 : 32;
  L.rows = w.rows;
  L.cols = w.cols;
  L.tiles = (w.rows + kWna16TileRows - 1) / kWna16TileRows;
  L.groups = w.groups();
  L.default_zero = static_cast<float>(1 << (w.bits - 1));
  const bool identity = order_columns(w);
  L.col_blocks = group_blocks_.back();
  L.padded_cols = L.col_blocks * kWna16BlockCols;
  pack_codes(w);
  pack_scales(w);
  if (identity) column_of_.clear();  // columns already in order; padding (if any) at the end
  L.codes = codes_.data();
  L.scales = scales_.empty() ? nullptr : scales_.data();
  L.scales_f16 = scales_f16_.empty() ? nullptr : scales_f16_.data();
  L.zeros = zeros_.empty() ? nullptr : zeros_.data();
  L.group_blocks = group_blocks_.data();
  L.block_group = block_group_.data();
  L.column_of = column_of_.empty() ? nullptr : column_of_.data();
}

bool Wna16PackedCpu::order_columns(const IntWeights& w) {
  const int64_t groups = w.groups();
  // Columns stably sorted by group, each group padded to whole blocks.
  std::vector<int32_t> order(static_cast<size_t>(w.cols));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return w.group_of(a) < w.group_of(b); });
  std::vector<int64_t> counts(static_cast<size_t>(groups), 0);
  for (int64_t c = 0; c < w.cols; ++c) ++counts[static_cast<size_t>(w.group_of(c))];
  group_blocks_.assign(static_cast<size_t>(groups + 1), 0);
  for (size_t g = 0; g < counts.size(); ++g) {
    group_blocks_[g + 1] = group_blocks_[g] + (counts[g] + kWna16BlockCols - 1) / kWna16BlockCols;
  }
  column_of_.assign(static_cast<size_t>(group_blocks_.back() * kWna16BlockCols), -1);
  block_group_.assign(static_cast<size_t>(group_blocks_.back()), 0);
  size_t next = 0;
  bool identity = true;
  for (size_t g = 0; g < counts.size(); ++g) {
    const int64_t first = group_blocks_[g] * kWna16BlockCols;
    for (int64_t j = 0; j < counts[g]; ++j) {
      const int32_t c = order[next++];
      column_of_[static_cast<size_t>(first + j)] = c;
      identity = identity && c == first + j;
    }
    for (int64_t b = group_blocks_[g]; b < group_blocks_[g + 1]; ++b) {
      block_group_[static_cast<size_t>(b)] = static_cast<int32_t>(g);
    }
  }
  return identity;
}

void Wna16PackedCpu::pack_codes(const IntWeights& w) {
  const Wna16Layout& L = layout_;
  codes_.assign(static_cast<size_t>(L.tiles * L.col_blocks * kWna16TileRows * L.block_bytes), 0);
  for (int64_t row = 0; row < w.rows; ++row) {
    const int64_t t = row / kWna16TileRows, r = row % kWna16TileRows;
    const uint8_t* src = w.codes.data() + row * w.cols;
    for (int64_t cb = 0; cb < L.col_blocks; ++cb) {
      uint8_t* dst = codes_.data() + ((t * L.col_blocks + cb) * kWna16TileRows + r) * L.block_bytes;
      const int32_t* cols = column_of_.data() + cb * kWna16BlockCols;
      auto code = [&](int j) { return cols[j] < 0 ? uint8_t{0} : src[cols[j]]; };
      if (L.nibbles) {  // byte j: column j in the low nibble, j + 16 in the high one
        for (int j = 0; j < 16; ++j) dst[j] = static_cast<uint8_t>(code(j) | (code(j + 16) << 4));
      } else {
        for (int j = 0; j < kWna16BlockCols; ++j) dst[j] = code(j);
      }
    }
  }
}

// Scales and zero points, 8 rows per (tile, group); padding rows get scale 0.
void Wna16PackedCpu::pack_scales(const IntWeights& w) {
  const Wna16Layout& L = layout_;
  scales_.assign(static_cast<size_t>(L.tiles * L.groups * kWna16TileRows), 0.0f);
  if (!w.zeros.empty()) zeros_.assign(scales_.size(), static_cast<uint8_t>(1 << (w.bits - 1)));
  for (int64_t row = 0; row < w.rows; ++row) {
    const int64_t t = row / kWna16TileRows, r = row % kWna16TileRows;
    for (int64_t g = 0; g < L.groups; ++g) {
      const auto dst = static_cast<size_t>((t * L.groups + g) * kWna16TileRows + r);
      scales_[dst] = w.scales[static_cast<size_t>(row * L.groups + g)];
      if (!zeros_.empty()) zeros_[dst] = w.zeros[static_cast<size_t>(row * L.groups + g)];
    }
  }
  // fp16 when that loses nothing (the kernels then convert with vcvtph2ps).
  const bool exact = std::all_of(scales_.begin(), scales_.end(), [](float s) {
    return std::isfinite(s) && f16_to_f32(f32_to_f16(s)) == s;
  });
  if (exact) {
    scales_f16_.resize(scales_.size());
    std::transform(scales_.begin(), scales_.end(), scales_f16_.begin(), f32_to_f16);
    scales_.clear();
    scales_.shrink_to_fit();
  }
}

size_t Wna16PackedCpu::bytes() const {
  return sizeof(*this) + codes_.size() + scales_.size() * sizeof(float) +
         scales_f16_.size() * sizeof(uint16_t) + zeros_.size() +
         group_blocks_.size() * sizeof(int64_t) + (block_group_.size() + column_of_.size()) * sizeof(int32_t);
}

}  // namespace lowbit::kernels::cpu::detail
