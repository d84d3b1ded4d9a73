// Scales and zero points from observed ranges, and the quantize / dequantize arithmetic, exactly as
// compressed-tensors computes them (calculate_qparams, _quantize, _dequantize; FORMATS.md §2.3).
//
// Precision: torch does this arithmetic in the weight's dtype (bf16 for most checkpoints), rounding
// after every operation. `compute` names that dtype and every function rounds where torch does,
// so that codes come out bit-identical to llm-compressor's.
#pragma once

#include <cstdint>
#include <vector>

#include "lowbit/dtype.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// Rounds a float to what a tensor of `dtype` holds (F32: unchanged; BF16 / F16: RNE).
float round_to_dtype(float x, DType dtype);

// Quantization parameters of a 2-D weight [rows, cols] (or of an activation) under one QuantArgs.
// Grid shape per strategy: tensor [1,1]; channel [rows,1]; group / tensor_group [rows, ceil(cols/g)];
// block [ceil(rows/bh), ceil(cols/bw)].
struct QParams {
  int64_t grid_rows = 1, grid_cols = 1;
  // Grid values as llm-compressor's weight_scale parameter holds them: computed per the args
  // (fp8-rounded for NVFP4, powers of two for MX), then stored in `scale_dtype`, the weight's
  // dtype (compressed-tensors' initialize_qparams). The compressor casts them (fp8, E8M0) on disk.
  std::vector<float> scale;
  std::vector<float> zero_point;  // grid values (integers), empty when symmetric
  float global_scale = 0.0f;      // tensor_group only (> 0 when present)
  DType scale_dtype = DType::BF16;

  float scale_at(int64_t r, int64_t c) const { return scale[static_cast<size_t>(r * grid_cols + c)]; }
  float zero_at(int64_t r, int64_t c) const {
    return zero_point.empty() ? 0.0f : zero_point[static_cast<size_t>(r * grid_cols + c)];
  }
};

// qparams from per-slot min and max (each grid_rows*grid_cols values), calculate_qparams' rules:
// range widened to include 0; symmetric absmax/((qmax-qmin)/2); asymmetric with clamped, rounded
// zero points; global scale; scale_dtype cast; zero scales replaced by the dtype's eps; MX
// power-of-two exponents.
QParams qparams_from_minmax(const std::vector<float>& mins, const std::vector<float>& maxs,
                            int64_t grid_rows, int64_t grid_cols, const QuantArgs& args,
                            DType compute, float global_scale = 0.0f);

// The NVFP4 global scale 448*6/absmax (NaN/Inf → 1). llm-compressor divides in the weight's
// dtype (generate_gparam on bf16 min/max), so the fp32 result is rounded to `compute` first.
float nvfp4_global_scale(float absmax, DType compute = DType::F32);

// Memoryless min-max observer over a weight [rows, cols] for the args' strategy (the default for
// every weight). `global_scale` is used for tensor_group (0: computed from this weight's absmax).
QParams observe_weight_minmax(const float* w, int64_t rows, int64_t cols, const QuantArgs& args,
                              DType compute, float global_scale = 0.0f);

// Column c of the weight uses grid column group_of_column(c) (consecutive groups / blocks; channel
// and tensor: 0).
int64_t group_of_column(const QuantArgs& args, int64_t c);
// Row r uses grid row grid_row_of(r) (block: r / block_rows; tensor: 0; otherwise r).
int64_t grid_row_of(const QuantArgs& args, int64_t r);

// One value: the code (int value in [qmin, qmax]; fp8 / fp4: the rounded float value) and the
// dequantized value, with compressed-tensors' order of operations: x/scale (+zp), clamp, round.
float quantize_value(float x, float scale, float zero_point, const QuantArgs& args, DType compute,
                     float global_scale = 0.0f);
float dequantize_value(float q, float scale, float zero_point, const QuantArgs& args, DType compute,
                       float global_scale = 0.0f);
inline float fake_quantize_value(float x, float scale, float zero_point, const QuantArgs& args,
                                 DType compute, float global_scale = 0.0f) {
  return dequantize_value(quantize_value(x, scale, zero_point, args, compute, global_scale), scale,
                          zero_point, args, compute, global_scale);
}

// Whole-matrix fake quantization in place (codes → dequantized values in `compute` precision).
// g_idx (optional, cols entries) overrides group_of_column.
void fake_quantize(float* w, int64_t rows, int64_t cols, const QParams& qp, const QuantArgs& args,
                   DType compute, const int32_t* g_idx = nullptr);

// Dynamic activation fake quantization of x [rows, cols] per the args' strategy (token: per row;
// group: per row per g columns; tensor: whole), as an emulated W8A8 / FP8 forward does it (fp32).
// tensor_group (NVFP4 inputs, dynamic "local") uses `global_scale` (the static input_global_scale),
// or one computed from x when it is 0.
void fake_quantize_activations(float* x, int64_t rows, int64_t cols, const QuantArgs& args,
                               float global_scale = 0.0f);

}  // namespace lowbit::quant
