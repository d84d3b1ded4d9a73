// The naive definition of the weight-only integer matmul: each weight dequantized on its own as
// IntWeights documents, (code - zero) · scale, then summed in fp32 in column order.
#include <string>

#include "kernels/wna16_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels::ref {

void matmul_wna16(const float* x, int64_t m, const IntWeights& w, const float* bias, float* y) {
  const int64_t groups = w.groups();
  const auto expected = static_cast<size_t>(w.rows * w.cols);
  LOWBIT_CHECK(w.codes.size() == expected && w.scales.size() == static_cast<size_t>(w.rows * groups) &&
                   (w.zeros.empty() || w.zeros.size() == w.scales.size()) &&
                   (w.g_idx.empty() || w.g_idx.size() == static_cast<size_t>(w.cols)),
               "ref::matmul_wna16: IntWeights sizes do not match rows=" + std::to_string(w.rows) +
                   " cols=" + std::to_string(w.cols));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < w.rows; ++r) {
      float sum = 0.0f;
      for (int64_t c = 0; c < w.cols; ++c) {
        const int64_t g = w.group_of(c);
        const float code = static_cast<float>(w.codes[static_cast<size_t>(r * w.cols + c)]);
        const float weight = (code - w.zero(r, g)) * w.scales[static_cast<size_t>(r * groups + g)];
        sum += x[i * w.cols + c] * weight;
      }
      y[i * w.rows + r] = sum + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace lowbit::kernels::ref
