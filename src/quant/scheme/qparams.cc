// calculate_qparams / _quantize / _dequantize of compressed-tensors 0.19.0
// (quantization/utils/helpers.py, mxfp_utils.py, lifecycle/forward_helpers.py), op by op.
//
// torch evaluates a bf16 / f16 op in fp32 and rounds the result to the tensor's dtype, so every
// step below is `r(op, dtype)`, with the dtype torch's type promotion gives that step: a 1-element
// fp32 global scale (a dimensioned tensor) promotes a bf16 operand to fp32, a 0-dim fp32 range
// bound does not.
#include "quant/scheme/qparams.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/scheme/packing.h"

namespace lowbit::quant {

float round_to_dtype(float x, DType dtype) {
  switch (dtype) {
    case DType::BF16: return bf16_to_f32(f32_to_bf16(x));
    case DType::F16: return f16_to_f32(f32_to_f16(x));
    case DType::F8_E4M3: return fp8_e4m3_to_f32(f32_to_fp8_e4m3(x));
    default: return x;  // F32 (F64 is computed in fp32 too: lowbit has no f64 weights)
  }
}

namespace {

inline float r(float x, DType d) { return round_to_dtype(x, d); }

bool is_mx(const QuantArgs& a) {  // should_generate_mx_scales
  return (a.num_bits == 4 || a.num_bits == 8) && a.type == QuantType::Float &&
         a.group_size == 32 && a.scale_dtype == DType::U8;
}

// torch.finfo(dtype).eps / tiny for the float dtypes lowbit computes in.
float finfo_eps(DType d) {
  if (d == DType::BF16) return 0.0078125f;
  if (d == DType::F16) return 0.0009765625f;
  return std::numeric_limits<float>::epsilon();
}
float finfo_tiny(DType d) {
  return d == DType::F16 ? 6.103515625e-05f : std::numeric_limits<float>::min();
}

// round_to_power_2: add half of the bits below FP4's mantissa, keep sign and exponent (the
// value rounds up to the next power of two only from mantissa 0.75 on).
float round_to_power_2(float x, DType d) {
  if (d == DType::BF16) {
    const uint32_t v = f32_to_bf16(x);
    return bf16_to_f32(static_cast<uint16_t>((v + (1u << 5)) & 0xFF80u));
  }
  if (d == DType::F16) {
    const uint32_t v = f32_to_f16(x);
    return f16_to_f32(static_cast<uint16_t>((v + (1u << 8)) & 0xFC00u));
  }
  const uint32_t v = f32_to_bits(x);
  return bits_to_f32((v + (1u << 21)) & 0xFF800000u);
}

// generate_mx_scales: the E8M0 exponent, still a float in the compute dtype (may be -inf / NaN).
float mx_exponent(float absmax, int num_bits, DType d) {
  const float offset = num_bits == 4 ? 2.0f : 8.0f;  // floor(log2(6)), floor(log2(448))
  const float p2 = round_to_power_2(absmax, d);
  const float lg = std::floor(r(std::log2(p2), d));
  return r(r(127.0f + lg, d) - offset, d);
}

// round_to_quantized_type_dtype with an integer dtype: clamp, round half even, cast (NaN → 0).
float round_to_int_dtype(float x, DType dt) {
  double lo = -128, hi = 127;
  if (dt == DType::U8) lo = 0, hi = 255;
  else if (dt == DType::I16) lo = -32768, hi = 32767;
  else if (dt == DType::I32) lo = -2147483648.0, hi = 2147483647.0;
  if (std::isnan(x)) return 0.0f;
  // + 0.0 turns a rounded -0.0 into the 0 an integer holds
  return static_cast<float>(std::nearbyint(std::clamp(static_cast<double>(x), lo, hi)) + 0.0);
}

// round_to_quantized_type_dtype(x, scale_dtype) followed by the cast back to `d`.
float round_scale_to_dtype(float x, DType scale_dtype, DType d) {
  if (dtype_is_float(scale_dtype)) {
    const float lim = scale_dtype == DType::F8_E4M3 ? 448.0f : std::numeric_limits<float>::max();
    const float c = std::isnan(x) ? x : std::clamp(x, -lim, lim);
    return r(r(c, scale_dtype), d);
  }
  return r(round_to_int_dtype(x, scale_dtype), d);
}

struct Slot {
  float scale;
  float zero;
};

// calculate_qparams for one slot, in the order of the Python code.
Slot slot_qparams(float mn, float mx, const QuantArgs& a, DType d, float global_scale) {
  mn = std::min(mn, 0.0f);
  mx = std::max(mx, 0.0f);
  const float bit_range = static_cast<float>(a.qmax() - a.qmin());  // exact in every dtype
  float scale, zero = 0.0f;
  if (a.symmetric) {
    const float absmax = std::max(std::fabs(mn), std::fabs(mx));
    scale = is_mx(a) ? mx_exponent(absmax, a.num_bits, d) : r(absmax / (bit_range / 2.0f), d);
  } else {
    scale = r(r(mx - mn, d) / bit_range, d);
    zero = r(static_cast<float>(a.qmin()) - r(mn / scale, d), d);
    if (!std::isnan(zero))
      zero = std::clamp(zero, static_cast<float>(a.qmin()), static_cast<float>(a.qmax()));
  }
  DType sd = d;  // the scale tensor's dtype from here on
  if (global_scale > 0.0f) {
    scale = global_scale * scale;  // fp32 [1] * bf16 → fp32
    sd = DType::F32;
  }
  if (a.scale_dtype) scale = round_scale_to_dtype(scale, *a.scale_dtype, sd);
  if (is_mx(a)) scale = r(std::exp2(round_to_int_dtype(scale, DType::I32) - 127.0f), sd);
  const DType eps_dtype = a.scale_dtype.value_or(sd);
  float eps = 1.0f;  // integer scale dtypes (uint8)
  if (eps_dtype == DType::F8_E4M3) eps = 0.125f;
  else if (dtype_is_float(eps_dtype)) eps = finfo_eps(eps_dtype);
  if (scale == 0.0f) scale = r(eps, sd);
  if (!a.symmetric) {
    const DType zd = a.zp_dtype.value_or(DType::I8);
    zero = dtype_is_float(zd) ? r(zero, zd) : round_to_int_dtype(zero, zd);
  }
  return {scale, zero};
}

// The dtype initialize_qparams gives the weight_scale parameter the scale is copied into.
DType scale_param_dtype(DType compute) {
  if (compute == DType::BF16 || compute == DType::F16 || compute == DType::F32 ||
      compute == DType::F64)
    return compute;
  return DType::F16;
}

}  // namespace

QParams qparams_from_minmax(const std::vector<float>& mins, const std::vector<float>& maxs,
                            int64_t grid_rows, int64_t grid_cols, const QuantArgs& args,
                            DType compute, float global_scale) {
  const size_t n = static_cast<size_t>(grid_rows * grid_cols);
  LOWBIT_CHECK(mins.size() == n && maxs.size() == n,
               "qparams_from_minmax: expected " + std::to_string(n) + " min/max values");
  LOWBIT_CHECK(args.strategy != Strategy::TensorGroup || global_scale > 0.0f,
               "qparams_from_minmax: tensor_group quantization needs a global scale");
  QParams qp;
  qp.grid_rows = grid_rows;
  qp.grid_cols = grid_cols;
  qp.scale_dtype = scale_param_dtype(compute);
  qp.global_scale = args.strategy == Strategy::TensorGroup ? global_scale : 0.0f;
  qp.scale.resize(n);
  if (!args.symmetric) qp.zero_point.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Slot s = slot_qparams(mins[i], maxs[i], args, compute, qp.global_scale);
    qp.scale[i] = r(s.scale, qp.scale_dtype);
    if (!args.symmetric) qp.zero_point[i] = s.zero;
  }
  return qp;
}

float nvfp4_global_scale(float absmax, DType compute) {
  // generate_gparam: absmax clamped to finfo.tiny, 448*6/absmax in the observed dtype, then fp32.
  // `448 * 6 / t` is torch's __rtruediv__: reciprocal() then a multiply, each rounded.
  const float a = std::isnan(absmax) ? absmax : std::max(absmax, finfo_tiny(compute));
  const float gs = r(r(1.0f / a, compute) * 2688.0f, compute);
  return std::isfinite(gs) ? gs : 1.0f;
}

int64_t group_of_column(const QuantArgs& args, int64_t c) {
  switch (args.strategy) {
    case Strategy::Group:
    case Strategy::TensorGroup: return c / args.group_size;
    case Strategy::Block: return c / args.block_cols;
    default: return 0;
  }
}

int64_t grid_row_of(const QuantArgs& args, int64_t r) {
  if (args.strategy == Strategy::Tensor) return 0;
  if (args.strategy == Strategy::Block) return r / args.block_rows;
  return r;
}

namespace {

void grid_shape(const QuantArgs& args, int64_t rows, int64_t cols, int64_t* gr, int64_t* gc) {
  switch (args.strategy) {
    case Strategy::Tensor: *gr = 1, *gc = 1; return;
    case Strategy::Channel: *gr = rows, *gc = 1; return;
    case Strategy::Group:
    case Strategy::TensorGroup:
      // llm-compressor's observer unflattens the columns into groups: they must divide.
      LOWBIT_CHECK(cols % args.group_size == 0,
                   "weight with " + std::to_string(cols) + " columns is not divisible by group_size " +
                       std::to_string(args.group_size));
      *gr = rows, *gc = cols / args.group_size;
      return;
    case Strategy::Block:
      // Zero padding to whole tiles cannot change a min/max range that always includes 0.
      *gr = (rows + args.block_rows - 1) / args.block_rows;
      *gc = (cols + args.block_cols - 1) / args.block_cols;
      return;
    default:
      throw InvalidArgument(to_string(args.strategy) + " quantization cannot be applied to weights");
  }
}

}  // namespace

QParams observe_weight_minmax(const float* w, int64_t rows, int64_t cols, const QuantArgs& args,
                              DType compute, float global_scale) {
  int64_t gr = 1, gc = 1;
  grid_shape(args, rows, cols, &gr, &gc);
  std::vector<float> mins(static_cast<size_t>(gr * gc), std::numeric_limits<float>::infinity());
  std::vector<float> maxs(mins.size(), -std::numeric_limits<float>::infinity());
  float absmax = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t base = grid_row_of(args, i) * gc;
    for (int64_t j = 0; j < cols; ++j) {
      const float v = w[i * cols + j];
      const size_t k = static_cast<size_t>(base + group_of_column(args, j));
      mins[k] = std::min(mins[k], v);
      maxs[k] = std::max(maxs[k], v);
      absmax = std::max(absmax, std::fabs(v));
    }
  }
  if (args.strategy == Strategy::TensorGroup && global_scale <= 0.0f)
    global_scale = nvfp4_global_scale(absmax, compute);
  return qparams_from_minmax(mins, maxs, gr, gc, args, compute, global_scale);
}

namespace {

// round_to_quantized_type_args after the clamp (its input is already in the op dtype).
float round_code(float y, const QuantArgs& args) {
  if (args.type == QuantType::Int) return std::nearbyint(y);
  if (args.num_bits == 8) return fp8_e4m3_to_f32(f32_to_fp8_e4m3(y));
  return round_to_fp4(y);
}

}  // namespace

float quantize_value(float x, float scale, float zero_point, const QuantArgs& args, DType compute,
                     float global_scale) {
  DType d = compute;
  if (global_scale > 0.0f) {  // scale / global_scale: promoted to fp32
    scale = scale / global_scale;
    d = DType::F32;
  }
  float y = r(x / scale, d);
  if (zero_point != 0.0f) y = r(y + zero_point, d);
  if (!std::isnan(y))
    y = std::clamp(y, static_cast<float>(args.qmin()), static_cast<float>(args.qmax()));
  return round_code(y, args);
}

float dequantize_value(float q, float scale, float zero_point, const QuantArgs& /*args*/,
                       DType compute, float global_scale) {
  DType d = compute;
  if (global_scale > 0.0f) {
    scale = scale / global_scale;
    d = DType::F32;
  }
  float v = q;
  if (zero_point != 0.0f) v = r(v - zero_point, d);
  return r(r(v * scale, d), compute);
}

void fake_quantize(float* w, int64_t rows, int64_t cols, const QParams& qp, const QuantArgs& args,
                   DType compute, const int32_t* g_idx) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t gr = grid_row_of(args, i);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t gc = g_idx ? g_idx[j] : group_of_column(args, j);
      float& v = w[i * cols + j];
      v = fake_quantize_value(v, qp.scale_at(gr, gc), qp.zero_at(gr, gc), args, compute,
                              qp.global_scale);
    }
  }
}

void fake_quantize_activations(float* x, int64_t rows, int64_t cols, const QuantArgs& args,
                               float global_scale) {
  // compute_dynamic_scales_and_zp: token = per row, tensor = all, group = per row per g.
  QuantArgs grid_args = args;
  if (args.strategy == Strategy::Group || args.strategy == Strategy::TensorGroup) {
    LOWBIT_CHECK(cols % args.group_size == 0,
                 "activation width " + std::to_string(cols) + " is not divisible by group_size " +
                     std::to_string(args.group_size));
  } else if (args.strategy != Strategy::Tensor) {
    LOWBIT_CHECK(args.strategy == Strategy::Token,
                 "dynamic activation quantization needs strategy token, tensor or group, not " +
                     to_string(args.strategy));
    grid_args.strategy = Strategy::Channel;  // one slot per row, as channel is for weights
  }
  const DType f32 = DType::F32;
  // Rows are independent unless one scale spans them (tensor; tensor_group without a given global
  // scale): then the whole matrix is one slot.
  const bool rows_independent =
      args.strategy != Strategy::Tensor &&
      !(args.strategy == Strategy::TensorGroup && global_scale <= 0.0f);
  if (!rows_independent || rows < 64) {
    QParams qp = observe_weight_minmax(x, rows, cols, grid_args, f32, global_scale);
    fake_quantize(x, rows, cols, qp, grid_args, f32);
    return;
  }
  // Calibration and emulated evaluation pass every Linear input through here: split the rows
  // over the threads (same values as one call: each row's scale depends on that row only).
  constexpr int64_t kRowsPerChunk = 32;
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kRowsPerChunk;
    const int64_t n = std::min(kRowsPerChunk, rows - begin);
    float* block = x + begin * cols;
    QParams qp = observe_weight_minmax(block, n, cols, grid_args, f32, global_scale);
    fake_quantize(block, n, cols, qp, grid_args, f32);
  }
}

}  // namespace lowbit::quant
