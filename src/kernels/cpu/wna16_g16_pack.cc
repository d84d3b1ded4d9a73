// The group-16 layout of wna16_g16.h: packing and the call (x to bf16, rows split between threads).
#include <omp.h>

#include <algorithm>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/wna16_g16.h"
#include "kernels/cpu/wna16_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu::detail {

bool wna16_g16_applies(const IntWeights& w) {
  const CpuFeatures& f = cpu_features();
  return f.has_avx512_kernels() && f.avx512bf16 && (w.bits == 5 || w.bits == 6) &&
         w.group_size == 16 && w.zeros.empty() && w.g_idx.empty();
}

Wna16G16Cpu::Wna16G16Cpu(const IntWeights& w) {
  validate_int_weights(w);
  LOWBIT_CHECK(wna16_g16_applies(w), "Wna16G16Cpu: weights of " + std::to_string(w.bits) +
                                         " bits, group " + std::to_string(w.group_size) +
                                         " do not take the group-16 layout");
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

void Wna16G16Cpu::matmul(const float* x, int64_t m, const float* bias, float* y) const {
  const int64_t kp = units_ * kG16UnitCols;
  auto* xb = reinterpret_cast<uint16_t*>(thread_scratch(2, static_cast<size_t>((m * kp + 1) / 2)));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < cols_; ++c) xb[i * kp + c] = f32_to_bf16(x[i * cols_ + c]);
    std::fill(xb + i * kp + cols_, xb + (i + 1) * kp, uint16_t{0});
  }
  Wna16G16Args a;
  a.data = data_.data();
  a.rows = rows_;
  a.units = units_;
  a.zero = zero_;
  a.xb = xb;
  a.m = m;
  a.bias = bias;
  a.y = y;
  const int threads = matmul_thread_count(m, rows_, kp);
  if (threads <= 1) {
    wna16_g16_rows_avx512(a, 0, rows_);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    // 16 rows = one 64-byte line of y: threads never share a line they write.
    const Range part = split_range(rows_, omp_get_num_threads(), omp_get_thread_num(), 16);
    wna16_g16_rows_avx512(a, part.begin, part.end);
  }
}

}  // namespace lowbit::kernels::cpu::detail
