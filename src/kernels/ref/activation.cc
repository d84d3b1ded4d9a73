// Gated activations of the MLPs (SwiGLU, GeGLU) with torch's fp32 formulas.
#include <cmath>

#include "kernels/ops.h"

namespace lowbit::kernels {

namespace {

constexpr int64_t kParallelElements = 1 << 14;

inline float silu(float z) { return z / (1.0f + std::exp(-z)); }

// torch gelu(approximate="tanh"): 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z³))).
inline float gelu_tanh(float z) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (z + kKappa * z * z * z);
  return 0.5f * z * (1.0f + std::tanh(inner));
}

inline float gelu_erf(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.7071067811865476f)); }

template <float (*Act)(float)>
void gated_rows(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                int64_t rows, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    float* o = out + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = Act(g[i]) * u[i];
  }
}

inline float relu(float z) { return z > 0.0f ? z : 0.0f; }

}  // namespace

void gated_activation(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                      int64_t rows, int64_t n, Activation act, float* out) {
  switch (act) {
    case Activation::SILU:
      return gated_rows<silu>(gate, gate_stride, up, up_stride, rows, n, out);
    case Activation::GELU_TANH:
      return gated_rows<gelu_tanh>(gate, gate_stride, up, up_stride, rows, n, out);
    case Activation::GELU:
      return gated_rows<gelu_erf>(gate, gate_stride, up, up_stride, rows, n, out);
    case Activation::RELU:
      return gated_rows<relu>(gate, gate_stride, up, up_stride, rows, n, out);
  }
}

}  // namespace lowbit::kernels
