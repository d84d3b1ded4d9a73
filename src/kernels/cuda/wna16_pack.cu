// pack_wna16_for_gpu: checks an IntWeights, puts its columns in padded group order and packs codes,
// scales and zero points into the fragment layout of wna16_internal.h, then uploads them.
#include <algorithm>
#include <span>
#include <string>

#include "kernels/cuda/wna16_internal.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

namespace {

using detail::kWna16ChunkCols;
using detail::kWna16StepCols;
using detail::kWna16TileRows;

std::string str(int64_t v) { return std::to_string(v); }

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Index of the first value >= limit, or -1.
template <typename T>
int64_t first_at_least(const std::vector<T>& values, int64_t limit) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (static_cast<int64_t>(values[i]) >= limit) return static_cast<int64_t>(i);
  }
  return -1;
}

void validate(const IntWeights& w) {
  const std::string at = "pack_wna16_for_gpu: IntWeights.";
  LOWBIT_CHECK(w.bits >= 2 && w.bits <= 8, at + "bits = " + str(w.bits) + " is outside 2..8");
  if (w.bits != 4 && w.bits != 8) {
    throw Unsupported(at + "bits = " + str(w.bits) +
                      ": the GPU weight-only GEMM supports 4- and 8-bit codes only");
  }
  LOWBIT_CHECK(w.rows >= 0 && w.cols >= 0,
               at + "rows/cols = " + str(w.rows) + "/" + str(w.cols) + " is negative");
  LOWBIT_CHECK(w.group_size > 0, at + "group_size = " + str(w.group_size) + " is not positive");
  LOWBIT_CHECK(w.rows < (int64_t{1} << 31) && w.cols < (int64_t{1} << 31),
               at + "rows/cols = " + str(w.rows) + "/" + str(w.cols) + " exceeds 2^31");
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

// Columns in group order, each group padded to the common length L (a multiple of 16 that is
// <= 32 or a multiple of 64: then a 64-column chunk holds whole groups or lies inside one), the
// total padded to whole chunks. Returns L; fills column_of (-1 = padding).
int64_t order_columns(const IntWeights& w, std::vector<int32_t>& column_of) {
  const int64_t groups = w.groups();
  std::vector<int64_t> counts(static_cast<size_t>(groups), 0);
  for (int64_t c = 0; c < w.cols; ++c) ++counts[static_cast<size_t>(w.group_of(c))];
  const int64_t max_count = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  int64_t length = round_up(std::max<int64_t>(max_count, 1), kWna16StepCols);
  if (length > 2 * kWna16StepCols) length = round_up(length, kWna16ChunkCols);
  const int64_t padded = round_up(groups * length, kWna16ChunkCols);
  column_of.assign(static_cast<size_t>(padded), -1);
  std::vector<int64_t> next(static_cast<size_t>(groups), 0);
  for (int64_t c = 0; c < w.cols; ++c) {  // ascending: the order inside a group is stable
    const auto g = static_cast<size_t>(w.group_of(c));
    column_of[static_cast<size_t>(static_cast<int64_t>(g) * length + next[g]++)] = static_cast<int32_t>(c);
  }
  return length;
}

void pack_codes(const IntWeights& w, const Wna16GpuLayout& L, const std::vector<int32_t>& column_of,
                std::vector<uint32_t>& codes) {
  const int64_t words_per_chunk = (L.bits / 4) * 32 * 4;
  codes.assign(static_cast<size_t>(L.tiles * L.chunks * words_per_chunk), 0);
  auto code = [&](int64_t row, int64_t p) -> uint32_t {
    const int32_t c = column_of[static_cast<size_t>(p)];
    if (row >= w.rows || c < 0) return 0;
    return w.codes[static_cast<size_t>(row * w.cols + c)];
  };
  for (int64_t tile = 0; tile < L.tiles; ++tile) {
    for (int64_t chunk = 0; chunk < L.chunks; ++chunk) {
      uint32_t* out = codes.data() + (tile * L.chunks + chunk) * words_per_chunk;
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t r0 = tile * kWna16TileRows + lane / 4, r1 = r0 + 8;
        for (int s = 0; s < 4; ++s) {
          const int64_t p0 = chunk * kWna16ChunkCols + s * kWna16StepCols + (lane % 4) * 4;
          if (L.bits == 4) {
            uint32_t word = 0;
            for (int j = 0; j < 8; ++j) {
              word |= code(j & 1 ? r1 : r0, p0 + 2 * ((j >> 1) & 1) + (j >> 2)) << (4 * j);
            }
            out[lane * 4 + s] = word;
          } else {
            for (int u = 0; u < 2; ++u) {
              uint32_t word = 0;
              for (int b = 0; b < 4; ++b) word |= code(b >> 1 ? r1 : r0, p0 + 2 * u + (b & 1)) << (8 * b);
              out[((s / 2) * 32 + lane) * 4 + 2 * (s % 2) + u] = word;
            }
          }
        }
      }
    }
  }
}

void pack_scales(const IntWeights& w, const Wna16GpuLayout& L, std::vector<float>& scales,
                 std::vector<uint8_t>& zeros) {
  const int64_t groups = w.groups();
  const size_t count = static_cast<size_t>(L.tiles * L.padded_groups * 16);
  scales.assign(count, 0.0f);
  if (L.has_zeros) zeros.assign(count, static_cast<uint8_t>(1 << (w.bits - 1)));
  for (int64_t tile = 0; tile < L.tiles; ++tile) {
    for (int64_t g = 0; g < std::min(groups, L.padded_groups); ++g) {
      for (int i = 0; i < 16; ++i) {
        const int64_t row = tile * kWna16TileRows + i % 8 + 8 * (i / 8);
        if (row >= w.rows) continue;
        const auto dst = static_cast<size_t>((tile * L.padded_groups + g) * 16 + (i % 8) * 2 + i / 8);
        const auto src = static_cast<size_t>(row * groups + g);
        scales[dst] = w.scales[src];
        if (L.has_zeros) zeros[dst] = w.zeros[src];
      }
    }
  }
}

}  // namespace

namespace detail {

Wna16HostPacked pack_wna16_host(const IntWeights& w) {
  validate(w);
  Wna16HostPacked packed;
  Wna16GpuLayout& L = packed.layout;
  L.bits = w.bits;
  L.n = w.rows;
  L.k = w.cols;
  L.group_size = w.group_size;
  L.has_zeros = !w.zeros.empty();
  const int64_t tiles = (w.rows + kWna16TileRows - 1) / kWna16TileRows;
  L.tiles = tiles + tiles % 2;  // the stream kernel takes tiles in pairs
  std::vector<int32_t> column_of;
  const int64_t length = order_columns(w, column_of);
  const auto padded = static_cast<int64_t>(column_of.size());
  L.chunks = padded / kWna16ChunkCols;
  L.padded_groups = padded / length;
  L.steps_per_group = length / kWna16StepCols;
  bool identity = padded == w.cols;
  for (int64_t p = 0; identity && p < padded; ++p) identity = column_of[static_cast<size_t>(p)] == p;
  L.gather_x = !identity;
  pack_codes(w, L, column_of, packed.codes);
  pack_scales(w, L, packed.scales, packed.zeros);
  if (L.gather_x) packed.column_of = std::move(column_of);
  return packed;
}

}  // namespace detail

Wna16GpuWeights pack_wna16_for_gpu(const IntWeights& weights) {
  detail::Wna16HostPacked packed = detail::pack_wna16_host(weights);
  Wna16GpuWeights gpu;
  gpu.layout = packed.layout;
  gpu.codes = DeviceBuffer<uint32_t>(std::span<const uint32_t>(packed.codes));
  gpu.scales = DeviceBuffer<float>(std::span<const float>(packed.scales));
  gpu.zeros = DeviceBuffer<uint8_t>(std::span<const uint8_t>(packed.zeros));
  gpu.column_of = DeviceBuffer<int32_t>(std::span<const int32_t>(packed.column_of));
  return gpu;
}

}  // namespace lowbit::kernels::cuda
