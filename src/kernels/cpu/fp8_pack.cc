// FP8 (E4M3) weights: validation, the one-time repack into the chosen kernel's layout
// (fp8_kernels.h), and the kernel catalogue.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fp8_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels {

namespace cpu {

void check_fp8_weights(const Fp8Weights& w) {
  const std::string what = "pack_fp8: ";
  LOWBIT_CHECK(w.rows > 0 && w.cols > 0,
               what + "empty weight " + std::to_string(w.rows) + "x" + std::to_string(w.cols));
  LOWBIT_CHECK(w.block_rows > 0 && w.block_cols > 0,
               what + "block shape " + std::to_string(w.block_rows) + "x" +
                   std::to_string(w.block_cols) + " must be positive");
  const auto cells = static_cast<size_t>(w.rows * w.cols);
  LOWBIT_CHECK(w.codes.size() == cells, what + "codes has " + std::to_string(w.codes.size()) +
                                            " values, expected " + std::to_string(cells));
  const auto slots =
      static_cast<size_t>((w.rows + w.block_rows - 1) / w.block_rows * w.scale_cols());
  LOWBIT_CHECK(w.scales.size() == slots, what + "scales has " + std::to_string(w.scales.size()) +
                                             " values, expected " + std::to_string(slots));
}

namespace {

Fp8Kernel best_kernel_for(const Fp8Weights& w) {
  const bool tiled = detail::fp8_tiled_fits(w);
  if (tiled && fp8_kernel_supported(Fp8Kernel::AVX512)) return Fp8Kernel::AVX512;
  if (tiled && fp8_kernel_supported(Fp8Kernel::AVX2)) return Fp8Kernel::AVX2;
  return Fp8Kernel::SCALAR;
}

}  // namespace

const char* fp8_kernel_name(Fp8Kernel kernel) {
  switch (kernel) {
    case Fp8Kernel::SCALAR:
      return "fp8_scalar";
    case Fp8Kernel::AVX2:
      return "fp8_avx2";
    case Fp8Kernel::AVX512:
      return "fp8_avx512";
  }
  return "unknown";
}

bool fp8_kernel_supported(Fp8Kernel kernel) {
  const CpuFeatures& f = cpu_features();
  switch (kernel) {
    case Fp8Kernel::SCALAR:
      return true;
    case Fp8Kernel::AVX2:
      return f.has_avx2_kernels();
    case Fp8Kernel::AVX512:
      return f.has_avx512_kernels();
  }
  return false;
}

std::vector<Fp8Kernel> fp8_supported_kernels() {
  std::vector<Fp8Kernel> out;
  for (Fp8Kernel k : {Fp8Kernel::SCALAR, Fp8Kernel::AVX2, Fp8Kernel::AVX512}) {
    if (fp8_kernel_supported(k)) out.push_back(k);
  }
  return out;
}

std::shared_ptr<const Fp8Packed> pack_fp8_with(Fp8Kernel kernel, const Fp8Weights& weights) {
  if (!fp8_kernel_supported(kernel)) {
    throw Unsupported(std::string("pack_fp8: this CPU cannot run ") + fp8_kernel_name(kernel) +
                      " (features: " + cpu_features_string(cpu_features()) + ")");
  }
  check_fp8_weights(weights);
  if (kernel != Fp8Kernel::SCALAR && !detail::fp8_tiled_fits(weights)) {
    throw Unsupported(std::string("pack_fp8: ") + fp8_kernel_name(kernel) +
                      " needs every |scale| below 2^120");
  }
  return std::make_shared<detail::Fp8PackedImpl>(kernel, weights);
}

}  // namespace cpu

std::shared_ptr<const Fp8Packed> pack_fp8(const Fp8Weights& weights) {
  cpu::check_fp8_weights(weights);
  return std::make_shared<cpu::detail::Fp8PackedImpl>(cpu::best_kernel_for(weights), weights);
}

namespace cpu::detail {

bool fp8_tiled_fits(const Fp8Weights& w) {
  for (float s : w.scales) {
    if (std::isfinite(s) && std::fabs(s) >= 0x1p120f) return false;
  }
  return true;
}

void Fp8PackedImpl::FreeBytes::operator()(uint8_t* p) const { std::free(p); }

Fp8PackedImpl::Fp8PackedImpl(Fp8Kernel kernel, const Fp8Weights& w)
    : kernel_(kernel),
      rows_(w.rows),
      cols_(w.cols),
      block_rows_(w.block_rows),
      block_cols_(std::min(w.block_cols, w.cols)) {
  const int64_t tiles = (rows_ + kFp8TileRows - 1) / kFp8TileRows;
  code_bytes_ = kernel == Fp8Kernel::SCALAR ? w.codes.size()
                                            : static_cast<size_t>(tiles * kFp8TileRows * cols_);
  const size_t rounded = (code_bytes_ + 63) / 64 * 64;
  codes_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  if (!codes_) throw OutOfMemory("pack_fp8: cannot allocate " + std::to_string(rounded) + " bytes");
  std::memset(codes_.get(), 0, rounded);
  if (kernel == Fp8Kernel::SCALAR) {
    std::memcpy(codes_.get(), w.codes.data(), code_bytes_);
    scales_ = w.scales;
    decoded_.resize(256);
    for (int c = 0; c < 256; ++c)
      decoded_[static_cast<size_t>(c)] = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    return;
  }
  const int64_t col_blocks = (cols_ + block_cols_ - 1) / block_cols_;
  uint8_t* out = codes_.get();
  scales_.assign(static_cast<size_t>(tiles * col_blocks * kFp8TileRows), 0.0f);
  for (int64_t r = 0; r < rows_; ++r) {
    const int64_t tile = r / kFp8TileRows, lane = r % kFp8TileRows;
    bool nan = false;
    for (int64_t c = 0; c < cols_; ++c) {
      const uint8_t code = w.codes[static_cast<size_t>(r * cols_ + c)];
      out[(tile * cols_ + c) * kFp8TileRows + lane] = code;
      nan = nan || (code & 0x7F) == 0x7F;
    }
    if (nan) nan_rows_.push_back(r);
    for (int64_t b = 0; b < col_blocks; ++b) {
      scales_[static_cast<size_t>((tile * col_blocks + b) * kFp8TileRows + lane)] =
          w.scale(r, b * block_cols_) * 256.0f;  // the decode yields e4m3 / 256
    }
  }
}

const char* Fp8PackedImpl::kernel_name() const { return fp8_kernel_name(kernel_); }

size_t Fp8PackedImpl::bytes() const {
  return code_bytes_ + (scales_.size() + decoded_.size()) * sizeof(float) +
         nan_rows_.size() * sizeof(int64_t);
}

Fp8Tiles Fp8PackedImpl::tiles() const {
  Fp8Tiles t;
  t.rows = rows_;
  t.cols = cols_;
  t.tiles = (rows_ + kFp8TileRows - 1) / kFp8TileRows;
  t.block_cols = block_cols_;
  t.col_blocks = (cols_ + block_cols_ - 1) / block_cols_;
  t.codes = codes_.get();
  t.scales = scales_.data();
  return t;
}

Fp8Plain Fp8PackedImpl::plain() const {
  Fp8Plain p;
  p.rows = rows_;
  p.cols = cols_;
  p.block_rows = block_rows_;
  p.block_cols = block_cols_;
  p.scale_cols = (cols_ + block_cols_ - 1) / block_cols_;
  p.codes = codes_.get();
  p.scales = scales_.data();
  p.decoded = decoded_.data();
  return p;
}

}  // namespace cpu::detail

}  // namespace lowbit::kernels
