// The group-16 layout of wna16_g16.h: which weights take it, and packing them.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/wna16_g16.h"
#include "kernels/cpu/wna16_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu::detail {

bool wna16_g16_applies(const IntWeights& w) {
  return (w.bits == 5 || w.bits == 6) && w.group_size == 16 && w.zeros.empty() && w.g_idx.empty();
}

bool wna16_g16_has_kernel(Wna16Kernel kernel) {
  return kernel == Wna16Kernel::AVX512_BF16DOT || kernel == Wna16Kernel::AVX2 ||
         kernel == Wna16Kernel::AVX2_I16DOT;
}

const char* Wna16G16Cpu::kernel_name() const {
  switch (kernel_) {
    case Wna16Kernel::AVX2: return "wna16_g16_avx2";
    case Wna16Kernel::AVX2_I16DOT: return "wna16_g16_avx2_i16dot";
    default: return "wna16_g16_avx512_bf16dot";
  }
}

namespace {

// The scales of groups [g0, g0 + 16) of one row (0 past the last group) as d · sc_g, exact in fp32
// (wna16_g16.h's compact form), or false. Candidates: the largest-magnitude scale M is d times
// -128 or c in 127..1 (llama.cpp's Q6_K quantizer gives it -128: found at the first try); any d
// that reproduces every scale exactly will do, whatever the writer's own d was.
bool factor_super_block(const float* scales, int64_t count, float& d, int8_t sc[16]) {
  float max_scale = 0.0f;
  for (int64_t g = 0; g < count; ++g) {
    if (!std::isfinite(scales[g])) return false;
    if (std::fabs(scales[g]) > std::fabs(max_scale)) max_scale = scales[g];
  }
  std::fill_n(sc, 16, int8_t{0});
  if (max_scale == 0.0f) {
    d = 0.0f;
    return true;
  }
  for (int c = 128; c >= 1; --c) {
    d = c == 128 ? -max_scale / 128.0f : max_scale / static_cast<float>(c);
    bool exact = d != 0.0f && std::isfinite(d);
    for (int64_t g = 0; exact && g < count; ++g) {
      const float t = std::nearbyint(scales[g] / d);
      exact = t >= -128.0f && t <= 127.0f && t * d == scales[g];
      if (exact) sc[g] = static_cast<int8_t>(t);
    }
    if (exact) return true;
  }
  return false;
}

// Unit body (wna16_g16.h): codes q[0..63] of one unit.
void pack_body(const uint8_t* q, uint8_t* body) {
  for (int j = 0; j < 32; ++j) body[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 32] & 15) << 4);
  for (int j = 0; j < 16; ++j) {
    body[32 + j] = static_cast<uint8_t>(q[j] >> 4 | (q[j + 16] >> 4) << 2 | (q[j + 32] >> 4) << 4 |
                                        (q[j + 48] >> 4) << 6);
  }
}

}  // namespace

Wna16G16Cpu::Wna16G16Cpu(Wna16Kernel kernel, const IntWeights& w) : kernel_(kernel) {
  validate_int_weights(w);
  LOWBIT_CHECK(wna16_g16_applies(w), "Wna16G16Cpu: weights of " + std::to_string(w.bits) +
                                         " bits, group " + std::to_string(w.group_size) +
                                         " do not take the group-16 layout");
  LOWBIT_CHECK(wna16_g16_has_kernel(kernel), std::string("Wna16G16Cpu: the ") +
                                                 wna16_kernel_name(kernel) +
                                                 " kernel has no group-16 counterpart");
  rows_ = w.rows;
  cols_ = w.cols;
  zero_ = 1 << (w.bits - 1);
  const int64_t groups = w.groups();
  const int64_t supers =
      (cols_ + kG16SuperUnits * kG16UnitCols - 1) / (kG16SuperUnits * kG16UnitCols);
  constexpr int64_t kSuperGroups = 4 * kG16SuperUnits;
  // Compact when every super-block's scales factor exactly (GGUF Q6_K); factors kept for packing.
  std::vector<float> d(static_cast<size_t>(rows_ * supers));
  std::vector<int8_t> sc(static_cast<size_t>(rows_ * supers * kSuperGroups));
  compact_ = rows_ > 0 && cols_ > 0;
  for (int64_t r = 0; compact_ && r < rows_; ++r) {
    for (int64_t b = 0; compact_ && b < supers; ++b) {
      const int64_t g0 = b * kSuperGroups;
      const size_t i = static_cast<size_t>(r * supers + b);
      compact_ =
          factor_super_block(w.scales.data() + r * groups + g0, std::min(kSuperGroups, groups - g0),
                             d[i], sc.data() + i * kSuperGroups);
    }
  }
  units_ = compact_ ? supers * kG16SuperUnits : (cols_ + kG16UnitCols - 1) / kG16UnitCols;
  const int64_t row_bytes = g16_row_bytes(units_, compact_);
  data_.assign(static_cast<size_t>(rows_ * row_bytes), 0);
  uint8_t q[kG16UnitCols];
  for (int64_t r = 0; r < rows_; ++r) {
    uint8_t* row = data_.data() + r * row_bytes;
    for (int64_t u = 0; u < units_; ++u) {
      for (int64_t j = 0; j < kG16UnitCols; ++j) {
        const int64_t c = u * kG16UnitCols + j;
        q[j] = c < cols_ ? w.codes[static_cast<size_t>(r * cols_ + c)] : 0;
      }
      if (compact_) {
        const int64_t b = u / kG16SuperUnits;
        uint8_t* super = row + b * kG16SuperBytes;
        if (u % kG16SuperUnits == 0) {
          const size_t i = static_cast<size_t>(r * supers + b);
          std::copy_n(reinterpret_cast<const uint8_t*>(sc.data() + i * kSuperGroups), 16, super);
          std::copy_n(reinterpret_cast<const uint8_t*>(&d[i]), 4, super + 16);
        }
        pack_body(q, super + 20 + (u % kG16SuperUnits) * kG16BodyBytes);
      } else {
        uint8_t* unit = row + u * kG16UnitBytes;
        float scales[4] = {0, 0, 0, 0};  // padding groups: scale 0 (and code 0, x 0)
        for (int64_t g = 0; g < 4; ++g) {
          const int64_t group = 4 * u + g;
          if (group < groups) scales[g] = w.scales[static_cast<size_t>(r * groups + group)];
        }
        std::copy_n(reinterpret_cast<const uint8_t*>(scales), 16, unit);
        pack_body(q, unit + 16);
      }
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
