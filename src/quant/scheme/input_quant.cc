#include "quant/scheme/input_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/float_convert.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {

bool InputQuant::rows_independent() const {
  if (!args.is_dynamic()) return true;
  if (args.strategy == Strategy::Tensor) return false;
  return args.strategy != Strategy::TensorGroup || global_scale > 0.0f;
}

namespace {

// Dynamic symmetric fp8 inputs (FP8_DYNAMIC, FP8_BLOCK, online fp8): the same arithmetic as
// fake_quantize_activations in fp32 — scale = absmax / 448 (FLT_EPSILON when 0), x / scale
// clamped to ±448, rounded to e4m3, times scale — without its per-value generality, which made
// it the most expensive part of an fp8 layer. Returns false when the args need the general path.
bool fake_quantize_fp8_dynamic(float* x, int64_t rows, int64_t cols, const QuantArgs& a) {
  const bool simple = a.type == QuantType::Float && a.num_bits == 8 && a.symmetric &&
                      a.dynamic == DynamicMode::Dynamic &&
                      (!a.scale_dtype || *a.scale_dtype == DType::F32) &&
                      (a.strategy == Strategy::Token || a.strategy == Strategy::Tensor ||
                       (a.strategy == Strategy::Group && a.group_size > 0 && cols % a.group_size == 0));
  if (!simple) return false;
  const int64_t span = a.strategy == Strategy::Group ? a.group_size : cols;
  const int64_t slots_per_row = cols / span;
  auto round_slot = [](float* v, int64_t n, float absmax) {
    float scale = absmax / 448.0f;
    if (scale == 0.0f) scale = std::numeric_limits<float>::epsilon();
    for (int64_t i = 0; i < n; ++i) {
      const float y = std::clamp(v[i] / scale, -448.0f, 448.0f);
      v[i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(y)) * scale;
    }
  };
  if (a.strategy == Strategy::Tensor) {
    float absmax = 0.0f;
    for (int64_t i = 0; i < rows * cols; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    round_slot(x, rows * cols, absmax);
    return true;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
  for (int64_t slot = 0; slot < rows * slots_per_row; ++slot) {
    float* v = x + slot * span;
    float absmax = 0.0f;
    for (int64_t i = 0; i < span; ++i) absmax = std::max(absmax, std::fabs(v[i]));
    round_slot(v, span, absmax);
  }
  return true;
}

}  // namespace

void fake_quantize_input(const float* x, int64_t rows, int64_t cols, const InputQuant& input,
                         float* out) {
  std::memcpy(out, x, static_cast<size_t>(rows * cols) * sizeof(float));
  if (fake_quantize_fp8_dynamic(out, rows, cols, input.args)) return;
  if (input.args.is_dynamic()) {
    fake_quantize_activations(out, rows, cols, input.args, input.global_scale);
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
  for (int64_t i = 0; i < rows * cols; ++i) {
    out[i] = fake_quantize_value(out[i], input.static_scale, input.static_zero, input.args,
                                 DType::F32);
  }
}


}  // namespace lowbit::quant
