// W8A8 / W4A8 weights: validation and the one-time repack into the layout of the chosen kernel
// (w8a8_kernels.h), plus the kernel catalogue (names, CPU support, the best one for a weight).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/w8a8_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels {

namespace cpu {

namespace {

// Σ q·(code - zero) over one group stays within int32 for up to 65536 columns: 128 · 255 · 65536
// < 2^31 (the kernels accumulate modulo 2^32, so only the final group sum must fit).
constexpr int64_t kMaxGroupCols = 65536;

bool trivial_g_idx(const IntWeights& w) {
  for (int64_t c = 0; c < static_cast<int64_t>(w.g_idx.size()); ++c) {
    if (w.g_idx[static_cast<size_t>(c)] != c / w.group_size) return false;
  }
  return true;
}

}  // namespace

void check_w8a8_weights(const IntWeights& w) {
  const std::string what = "pack_w8a8: ";
  LOWBIT_CHECK(w.bits >= 2 && w.bits <= 8,
               what + "bits " + std::to_string(w.bits) + " not in 2..8");
  LOWBIT_CHECK(w.rows > 0 && w.cols > 0,
               what + "empty weight " + std::to_string(w.rows) + "x" + std::to_string(w.cols));
  LOWBIT_CHECK(w.group_size > 0, what + "group_size must be positive");
  const auto cells = static_cast<size_t>(w.rows * w.cols);
  const auto slots = static_cast<size_t>(w.rows * w.groups());
  LOWBIT_CHECK(w.codes.size() == cells, what + "codes has " + std::to_string(w.codes.size()) +
                                            " values, expected " + std::to_string(cells));
  LOWBIT_CHECK(w.scales.size() == slots, what + "scales has " + std::to_string(w.scales.size()) +
                                             " values, expected " + std::to_string(slots));
  LOWBIT_CHECK(w.zeros.empty() || w.zeros.size() == slots,
               what + "zeros has " + std::to_string(w.zeros.size()) + " values, expected " +
                   std::to_string(slots));
  const unsigned limit = 1u << w.bits;
  for (uint8_t c : w.codes) LOWBIT_CHECK(c < limit, what + "a code is out of range for the bits");
  for (uint8_t z : w.zeros) LOWBIT_CHECK(z < limit, what + "a zero point is out of range");
  if (!w.g_idx.empty()) {
    LOWBIT_CHECK(w.g_idx.size() == static_cast<size_t>(w.cols), what + "g_idx has the wrong size");
    if (!trivial_g_idx(w)) throw Unsupported(what + "activation order (g_idx) is not supported");
  }
  if (std::min(w.group_size, w.cols) > kMaxGroupCols) {
    throw Unsupported(what + "groups of more than 65536 columns would overflow int32 sums");
  }
}

namespace {

W8a8Kernel best_kernel_for(const IntWeights& w) {
  const bool tiled = detail::w8a8_tiled_fits(w);
  if (tiled && w8a8_kernel_supported(W8a8Kernel::AVX512_VNNI)) return W8a8Kernel::AVX512_VNNI;
  if (tiled && w8a8_kernel_supported(W8a8Kernel::AVX2)) return W8a8Kernel::AVX2;
  return W8a8Kernel::SCALAR;
}

}  // namespace

const char* w8a8_kernel_name(W8a8Kernel kernel) {
  switch (kernel) {
    case W8a8Kernel::SCALAR:
      return "w8a8_scalar";
    case W8a8Kernel::AVX2:
      return "w8a8_avx2";
    case W8a8Kernel::AVX512_VNNI:
      return "w8a8_avx512vnni";
  }
  return "unknown";
}

bool w8a8_kernel_supported(W8a8Kernel kernel) {
  const CpuFeatures& f = cpu_features();
  switch (kernel) {
    case W8a8Kernel::SCALAR:
      return true;
    case W8a8Kernel::AVX2:
      return f.has_avx2_kernels();
    case W8a8Kernel::AVX512_VNNI:
      return f.has_avx512_kernels() && f.avx512vnni;
  }
  return false;
}

std::vector<W8a8Kernel> w8a8_supported_kernels() {
  std::vector<W8a8Kernel> out;
  for (W8a8Kernel k : {W8a8Kernel::SCALAR, W8a8Kernel::AVX2, W8a8Kernel::AVX512_VNNI}) {
    if (w8a8_kernel_supported(k)) out.push_back(k);
  }
  return out;
}

std::shared_ptr<const W8a8Packed> pack_w8a8_with(W8a8Kernel kernel, const IntWeights& weights) {
  if (!w8a8_kernel_supported(kernel)) {
    throw Unsupported(std::string("pack_w8a8: this CPU cannot run ") + w8a8_kernel_name(kernel) +
                      " (features: " + cpu_features_string(cpu_features()) + ")");
  }
  check_w8a8_weights(weights);
  if (kernel != W8a8Kernel::SCALAR && !detail::w8a8_tiled_fits(weights)) {
    throw Unsupported(std::string("pack_w8a8: ") + w8a8_kernel_name(kernel) + " needs group_size " +
                      std::to_string(weights.group_size) + " to be whole blocks of " +
                      (weights.bits <= 4 ? "8" : "4") + " columns");
  }
  return std::make_shared<detail::W8a8PackedImpl>(kernel, weights);
}

}  // namespace cpu

std::shared_ptr<const W8a8Packed> pack_w8a8(const IntWeights& weights) {
  cpu::check_w8a8_weights(weights);
  return std::make_shared<cpu::detail::W8a8PackedImpl>(cpu::best_kernel_for(weights), weights);
}

namespace cpu::detail {

bool w8a8_tiled_fits(const IntWeights& w) {
  const int64_t kblock = w.bits <= 4 ? 8 : 4;
  return w.group_size >= w.cols || w.group_size % kblock == 0;
}

void W8a8PackedImpl::FreeBytes::operator()(uint8_t* p) const { std::free(p); }

W8a8PackedImpl::W8a8PackedImpl(W8a8Kernel kernel, const IntWeights& w)
    : kernel_(kernel),
      rows_(w.rows),
      cols_(w.cols),
      group_size_(std::min(w.group_size, w.cols)),
      groups_(w.groups()),
      bits_(w.bits),
      symmetric_zero_(1 << (w.bits - 1)) {
  if (kernel == W8a8Kernel::SCALAR) {
    pack_plain(w);
  } else {
    pack_tiled(w);
  }
  // E[r] (see the header), in fp64 then rounded once.
  zero_x_terms_.assign(
      static_cast<size_t>(kernel == W8a8Kernel::SCALAR ? rows_ : tiles().tiles * 16), 0.0f);
  for (int64_t r = 0; r < rows_; ++r) {
    double e = 0.0;
    for (int64_t g = 0; g < groups_; ++g) {
      const int64_t c0 = g * group_size_, c1 = std::min(cols_, c0 + group_size_);
      const auto zero = static_cast<int64_t>(w.zero(r, g));
      int64_t d = 0;
      for (int64_t c = c0; c < c1; ++c) d += w.codes[static_cast<size_t>(r * cols_ + c)] - zero;
      e += static_cast<double>(w.scales[static_cast<size_t>(r * groups_ + g)]) *
           static_cast<double>(d);
    }
    zero_x_terms_[static_cast<size_t>(r)] = static_cast<float>(e);
  }
}

const char* W8a8PackedImpl::kernel_name() const { return w8a8_kernel_name(kernel_); }

size_t W8a8PackedImpl::bytes() const {
  return code_bytes_ + scales_.size() * sizeof(float) + zeros_.size() +
         zero_x_terms_.size() * sizeof(float);
}

int64_t W8a8PackedImpl::x_stride() const {
  const int64_t k = kernel_ == W8a8Kernel::SCALAR ? cols_ : tiles().blocks * tiles().kblock;
  return (k + 63) / 64 * 64;
}

W8a8Tiles W8a8PackedImpl::tiles() const {
  W8a8Tiles t;
  t.rows = rows_;
  t.cols = cols_;
  t.tiles = (rows_ + kW8a8TileRows - 1) / kW8a8TileRows;
  t.nibbles = bits_ <= 4;
  t.kblock = t.nibbles ? 8 : 4;
  t.blocks = (cols_ + t.kblock - 1) / t.kblock;
  t.groups = groups_;
  t.group_blocks = groups_ == 1 ? t.blocks : group_size_ / t.kblock;
  t.codes = codes_.get();
  t.scales = scales_.data();
  t.zeros = zeros_.empty() ? nullptr : zeros_.data();
  t.symmetric_zero = symmetric_zero_;
  t.zero_x_terms = zero_x_terms_.data();
  return t;
}

W8a8Plain W8a8PackedImpl::plain() const {
  W8a8Plain p;
  p.rows = rows_;
  p.cols = cols_;
  p.group_size = group_size_;
  p.groups = groups_;
  p.codes = codes_.get();
  p.scales = scales_.data();
  p.zeros = zeros_.empty() ? nullptr : zeros_.data();
  p.symmetric_zero = symmetric_zero_;
  p.zero_x_terms = zero_x_terms_.data();
  return p;
}

namespace {

uint8_t* allocate_bytes(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  if (p == nullptr)
    throw OutOfMemory("pack_w8a8: cannot allocate " + std::to_string(rounded) + " bytes");
  std::memset(p, 0, rounded);
  return p;
}

}  // namespace

void W8a8PackedImpl::pack_plain(const IntWeights& w) {
  code_bytes_ = w.codes.size();
  codes_.reset(allocate_bytes(code_bytes_));
  std::memcpy(codes_.get(), w.codes.data(), code_bytes_);
  scales_ = w.scales;
  zeros_ = w.zeros;
}

void W8a8PackedImpl::pack_tiled(const IntWeights& w) {
  const W8a8Tiles t = tiles();  // the shape only; codes_ is allocated next
  code_bytes_ = static_cast<size_t>(t.tiles * t.blocks * kW8a8BlockBytes);
  codes_.reset(allocate_bytes(code_bytes_));
  uint8_t* out = codes_.get();
  for (int64_t tile = 0; tile < t.tiles; ++tile) {
    for (int lane = 0; lane < kW8a8TileRows; ++lane) {
      const int64_t r = tile * kW8a8TileRows + lane;
      if (r >= rows_) break;
      const uint8_t* src = w.codes.data() + r * cols_;
      for (int64_t c = 0; c < cols_; ++c) {
        const int64_t b = c / t.kblock, j = c % t.kblock;
        uint8_t& byte = out[(tile * t.blocks + b) * kW8a8BlockBytes + 4 * lane + (j & 3)];
        byte |= t.nibbles && j >= 4 ? static_cast<uint8_t>(src[c] << 4) : src[c];
      }
    }
  }
  const auto slots = static_cast<size_t>(t.tiles * groups_ * kW8a8TileRows);
  scales_.assign(slots, 0.0f);
  if (!w.zeros.empty()) zeros_.assign(slots, 0);
  for (int64_t r = 0; r < rows_; ++r) {
    for (int64_t g = 0; g < groups_; ++g) {
      const size_t at = static_cast<size_t>(((r / kW8a8TileRows) * groups_ + g) * kW8a8TileRows +
                                            r % kW8a8TileRows);
      scales_[at] = w.scales[static_cast<size_t>(r * groups_ + g)];
      if (!w.zeros.empty()) zeros_[at] = w.zeros[static_cast<size_t>(r * groups_ + g)];
    }
  }
}

}  // namespace cpu::detail

}  // namespace lowbit::kernels
