// The naive definition of the int8-activation matmul (w8a8_matmul.h): activations quantized one
// value at a time exactly as compressed-tensors does, the integer sums in int64, the scaling in
// fp64, one rounding to fp32 at the end. Slow and obviously right; the kernels are tested against
// it.
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/w8a8_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels::ref {

namespace {

void check_weights(const IntWeights& w) {
  const std::string what = "ref::matmul_w8a8: ";
  LOWBIT_CHECK(w.bits >= 2 && w.bits <= 8,
               what + "bits " + std::to_string(w.bits) + " not in 2..8");
  LOWBIT_CHECK(w.rows > 0 && w.cols > 0 && w.group_size > 0, what + "empty shape or group_size");
  const auto cells = static_cast<size_t>(w.rows * w.cols);
  const auto slots = static_cast<size_t>(w.rows * w.groups());
  LOWBIT_CHECK(w.codes.size() == cells, what + "codes has " + std::to_string(w.codes.size()) +
                                            " values, expected " + std::to_string(cells));
  LOWBIT_CHECK(w.scales.size() == slots, what + "scales has " + std::to_string(w.scales.size()) +
                                             " values, expected " + std::to_string(slots));
  LOWBIT_CHECK(w.zeros.empty() || w.zeros.size() == slots, what + "zeros has the wrong size");
  LOWBIT_CHECK(w.g_idx.empty() || w.g_idx.size() == static_cast<size_t>(w.cols),
               what + "g_idx has the wrong size");
  for (int32_t g : w.g_idx) LOWBIT_CHECK(g >= 0 && g < w.groups(), what + "g_idx out of range");
}

// round_half_even(clamp(v, -128, 127)), NaN → 0.
int8_t to_code(float v) {
  if (std::isnan(v)) return 0;
  const float clamped = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
  return static_cast<int8_t>(std::nearbyint(clamped));
}

}  // namespace

void quantize_activations(const float* x, int64_t m, int64_t k, const Int8Activations& act,
                          int8_t* codes, float* scales) {
  if (!act.dynamic) {
    LOWBIT_CHECK(std::isfinite(act.static_scale) && act.static_scale > 0.0f,
                 "quantize_activations: static_scale must be finite and positive");
    LOWBIT_CHECK(act.static_zero >= -128 && act.static_zero <= 127,
                 "quantize_activations: static_zero outside [-128, 127]");
  }
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    float scale = act.static_scale;
    float zero = static_cast<float>(act.static_zero);
    if (act.dynamic) {
      float absmax = 0.0f;
      bool nan = false;
      for (int64_t c = 0; c < k; ++c) {
        absmax = std::fmax(absmax, std::fabs(row[c]));
        nan = nan || std::isnan(row[c]);
      }
      scale = nan ? NAN : absmax / 127.5f;  // (qmax - qmin) / 2 = 255 / 2
      if (scale == 0.0f) scale = FLT_EPSILON;
      zero = 0.0f;
    }
    scales[i] = scale;
    for (int64_t c = 0; c < k; ++c) codes[i * k + c] = to_code(row[c] / scale + zero);
  }
}

void matmul_w8a8(const float* x, int64_t m, const IntWeights& w, const Int8Activations& act,
                 const float* bias, float* y) {
  check_weights(w);
  const int64_t k = w.cols, n = w.rows, groups = w.groups();
  std::vector<int8_t> q(static_cast<size_t>(m * k));
  std::vector<float> sx(static_cast<size_t>(m));
  quantize_activations(x, m, k, act, q.data(), sx.data());
  const int64_t zx = act.dynamic ? 0 : act.static_zero;
  std::vector<int64_t> sums(static_cast<size_t>(groups));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      std::fill(sums.begin(), sums.end(), 0);
      for (int64_t c = 0; c < k; ++c) {
        const int32_t g = w.group_of(c);
        const auto zero = static_cast<int64_t>(w.zero(r, g));
        sums[static_cast<size_t>(g)] += (q[static_cast<size_t>(i * k + c)] - zx) *
                                        (w.codes[static_cast<size_t>(r * k + c)] - zero);
      }
      double acc = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        acc += static_cast<double>(w.scales[static_cast<size_t>(r * groups + g)]) *
               static_cast<double>(sums[static_cast<size_t>(g)]);
      }
      const double b = bias ? bias[r] : 0.0;
      y[i * n + r] = static_cast<float>(static_cast<double>(sx[static_cast<size_t>(i)]) * acc + b);
    }
  }
}

}  // namespace lowbit::kernels::ref
