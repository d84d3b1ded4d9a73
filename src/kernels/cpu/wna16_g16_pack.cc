// The group-16 layout of wna16_g16.h: which weights take it, and packing them.
#include <algorithm>
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
  units_ = (cols_ + kG16UnitCols - 1) / kG16UnitCols;
  data_.assign(static_cast<size_t>(rows_ * units_ * kG16UnitBytes), 0);
  const int64_t groups = w.groups();
  uint8_t q[kG16UnitCols];
  for (int64_t r = 0; r < rows_; ++r) {
    for (int64_t u = 0; u < units_; ++u) {
      uint8_t* unit = data_.data() + (r * units_ + u) * kG16UnitBytes;
      float scales[4] = {0, 0, 0, 0};  // padding groups: scale 0 (and code 0, x 0)
      for (int64_t g = 0; g < 4; ++g) {
        const int64_t group = 4 * u + g;
        if (group < groups) scales[g] = w.scales[static_cast<size_t>(r * groups + group)];
      }
      std::copy_n(reinterpret_cast<const uint8_t*>(scales), 16, unit);
      for (int64_t j = 0; j < kG16UnitCols; ++j) {
        const int64_t c = u * kG16UnitCols + j;
        q[j] = c < cols_ ? w.codes[static_cast<size_t>(r * cols_ + c)] : 0;
      }
      for (int j = 0; j < 32; ++j) unit[16 + j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 32] & 15) << 4);
      for (int j = 0; j < 16; ++j) {
        unit[48 + j] = static_cast<uint8_t>(q[j] >> 4 | (q[j + 16] >> 4) << 2 |
                                            (q[j + 32] >> 4) << 4 | (q[j + 48] >> 4) << 6);
      }
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
