// The portable FP8 kernel: each weight row dequantized once (table decode · scale, as ref does)
// into an fp32 buffer, then dotted with every row of x.
#include <vector>

#include "kernels/cpu/fp8_kernels.h"

namespace lowbit::kernels::cpu::detail {

void fp8_rows_scalar(const Fp8Plain& w, const float* x, int64_t m, Range rows, const float* bias,
                     float* y) {
  const int64_t k = w.cols;
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const uint8_t* code = w.codes + r * k;
    const float* scale = w.scales + (r / w.block_rows) * w.scale_cols;
    for (int64_t c = 0; c < k; ++c) {
      row[static_cast<size_t>(c)] = w.decoded[code[c]] * scale[c / w.block_cols];
    }
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      float sum = 0.0f;
      for (int64_t c = 0; c < k; ++c) sum += xi[c] * row[static_cast<size_t>(c)];
      y[i * w.rows + r] = sum + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace lowbit::kernels::cpu::detail
