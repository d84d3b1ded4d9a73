// Writing a quantized Linear weight as compressed-tensors 0.19.0's compressors do
// (compressors/{naive_quantized,pack_quantized,nvfp4,mxfp4,mxfp8}/base.py, format.py). Reading
// back is in compressed_tensor_read.cc.
#include "quant/scheme/compressed_tensor.h"

#include <cmath>
#include <cstring>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/scheme/compressed_tensor_util.h"
#include "quant/scheme/packing.h"

namespace lowbit::quant {

// COMPRESSION_FORMAT_PRIORITY with each compressor's can_compress, for a Linear.
CompressionFormat infer_format(const QuantScheme& scheme) {
  if (scheme.format) return *scheme.format;
  const auto& w = scheme.weights;
  const auto& in = scheme.input_activations;
  if (!w) return CompressionFormat::Dense;
  const bool fp = w->type == QuantType::Float;
  if (fp && w->num_bits == 4 && w->group_size == 32) return CompressionFormat::Mxfp4PackQuantized;
  if (fp && w->num_bits == 8 && w->group_size == 32 && w->scale_dtype == DType::U8)
    return CompressionFormat::Mxfp8Quantized;
  if (fp && w->num_bits == 4 && w->group_size == 16) return CompressionFormat::Nvfp4PackQuantized;
  if (in && !fp) return CompressionFormat::IntQuantized;
  if (!fp && w->num_bits >= 1 && w->num_bits <= 8 && !(in && in->type == QuantType::Float))
    return CompressionFormat::PackQuantized;
  if (in && fp) return CompressionFormat::FloatQuantized;
  return CompressionFormat::NaiveQuantized;
}

namespace ct_detail {

DType scale_param_dtype(DType weight_dtype) {
  if (weight_dtype == DType::BF16 || weight_dtype == DType::F16 || weight_dtype == DType::F32)
    return weight_dtype;
  return DType::F16;  // initialize_qparams' fallback
}

Shape scale_shape(const QuantArgs& args, const QParams& qp) {
  if (args.strategy == Strategy::Tensor) return {1};
  return {qp.grid_rows, qp.grid_cols};
}

Tensor float_tensor(const std::vector<float>& v, DType dtype, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  LOWBIT_CHECK_AS(Internal, static_cast<size_t>(n) == v.size(), "float_tensor: size");
  return Tensor::from_f32(v.data(), std::move(shape), dtype);
}

}  // namespace ct_detail

namespace {

using ct_detail::float_tensor;

struct Codes {
  std::vector<float> values;  // quantized values (integers, or fp8 / fp4 grid values)
  DType scale_dtype;          // of the weight_scale parameter (the weight's dtype)
};

// quantize(): x/scale(+zp), clamp, round, on the weight as its checkpoint dtype holds it.
Codes quantize_weight(const WeightToCompress& w) {
  const QuantArgs& a = *w.args;
  const QParams& qp = *w.qparams;
  const bool grouped = a.strategy == Strategy::Group || a.strategy == Strategy::TensorGroup;
  LOWBIT_CHECK(!grouped || w.cols % a.group_size == 0,
               w.module + ".weight: " + std::to_string(w.cols) +
                   " columns are not divisible by group_size " + std::to_string(a.group_size));
  const bool use_g_idx = w.g_idx && a.actorder == ActOrder::Group;
  LOWBIT_CHECK(!use_g_idx || static_cast<int64_t>(w.g_idx->size()) == w.cols,
               w.module + ".weight_g_idx: expected " + std::to_string(w.cols) + " entries");
  Codes c;
  c.scale_dtype = ct_detail::scale_param_dtype(w.original_dtype);
  c.values.resize(static_cast<size_t>(w.rows * w.cols));
  for (int64_t i = 0; i < w.rows; ++i) {
    const int64_t gr = grid_row_of(a, i);
    for (int64_t j = 0; j < w.cols; ++j) {
      const int64_t gc = use_g_idx ? (*w.g_idx)[static_cast<size_t>(j)] : group_of_column(a, j);
      LOWBIT_CHECK(gc >= 0 && gc < qp.grid_cols, w.module + ".weight_g_idx: group out of range");
      const float x = round_to_dtype(w.values[i * w.cols + j], w.original_dtype);
      const float s = round_to_dtype(qp.scale_at(gr, gc), c.scale_dtype);
      c.values[static_cast<size_t>(i * w.cols + j)] =
          quantize_value(x, s, qp.zero_at(gr, gc), a, w.original_dtype, qp.global_scale);
    }
  }
  return c;
}

std::vector<float> param_scales(const QParams& qp, DType scale_dtype) {
  std::vector<float> s(qp.scale.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = round_to_dtype(qp.scale[i], scale_dtype);
  return s;
}

// compress_mx_scale: 127 + floor(log2(scale)), through int32, cast (wrapping) to uint8.
Tensor mx_scale_tensor(const std::vector<float>& scales, DType scale_dtype, Shape shape) {
  Tensor t = Tensor::zeros(DType::U8, std::move(shape));
  for (size_t i = 0; i < scales.size(); ++i) {
    const float lg = std::floor(round_to_dtype(std::log2(scales[i]), scale_dtype));
    const int32_t e = std::isfinite(lg) ? static_cast<int32_t>(lg) : INT32_MIN;  // x86 cvt
    t.data_as<uint8_t>()[i] = static_cast<uint8_t>(static_cast<uint32_t>(127 + static_cast<int64_t>(e)));
  }
  return t;
}

Tensor int8_tensor(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::zeros(DType::I8, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int8_t>()[i] = static_cast<int8_t>(v[i]);
  return t;
}

template <typename T>
Tensor copy_tensor(const std::vector<T>& v, DType dtype, Shape shape) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  std::memcpy(t.data(), v.data(), v.size() * sizeof(T));
  return t;
}

std::vector<int8_t> to_int8(const std::vector<float>& v) {
  std::vector<int8_t> q(v.size());
  for (size_t i = 0; i < v.size(); ++i) q[i] = static_cast<int8_t>(v[i]);
  return q;
}

std::vector<uint8_t> fp4_codes(const std::vector<float>& v) {
  std::vector<uint8_t> codes(v.size());
  for (size_t i = 0; i < v.size(); ++i) codes[i] = fp4_code(v[i]);
  return codes;
}

void add_zero_point(const WeightToCompress& w, bool pack, std::vector<NamedTensor>* out) {
  const QuantArgs& a = *w.args;
  const QParams& qp = *w.qparams;
  if (a.symmetric) return;  // _remove_symmetric_zp
  const Shape shape = ct_detail::scale_shape(a, qp);
  const std::string name = w.module + ".weight_zero_point";
  if (pack && (a.strategy == Strategy::Group || a.strategy == Strategy::Channel)) {
    const std::vector<int8_t> zp = to_int8(qp.zero_point);
    const auto words = pack_int_columns(zp.data(), qp.grid_rows, qp.grid_cols, a.num_bits);
    out->push_back({name, copy_tensor(words, DType::I32,
                                      {packed_words_per_row(qp.grid_rows, a.num_bits),
                                       qp.grid_cols})});
  } else {
    out->push_back({name, int8_tensor(qp.zero_point, shape)});
  }
}

void add_g_idx(const WeightToCompress& w, std::vector<NamedTensor>* out) {
  if (!w.g_idx || w.args->actorder != ActOrder::Group) return;
  out->push_back({w.module + ".weight_g_idx", copy_tensor(*w.g_idx, DType::I32, {w.cols})});
}

}  // namespace

std::vector<NamedTensor> compress_weight(const WeightToCompress& w, CompressionFormat format) {
  std::vector<NamedTensor> out;
  const std::string& m = w.module;
  if (format == CompressionFormat::Dense) {  // DenseCompressor: the weight as it is
    std::vector<float> v(w.values, w.values + w.rows * w.cols);
    out.push_back({m + ".weight", float_tensor(v, w.original_dtype, {w.rows, w.cols})});
    return out;
  }
  LOWBIT_CHECK(w.args && w.qparams, m + ": compressing to " + to_string(format) +
                                        " needs quantization args and qparams");
  const QuantArgs& a = *w.args;
  const QParams& qp = *w.qparams;
  const Codes codes = quantize_weight(w);
  const std::vector<float> scales = param_scales(qp, codes.scale_dtype);
  const Shape sshape = ct_detail::scale_shape(a, qp);
  const bool fp = a.type == QuantType::Float;
  switch (format) {
    case CompressionFormat::NaiveQuantized:
    case CompressionFormat::IntQuantized:
    case CompressionFormat::FloatQuantized:
    case CompressionFormat::Mxfp8Quantized: {
      LOWBIT_CHECK(fp ? a.num_bits == 8 : a.num_bits <= 8,
                   m + ": " + to_string(format) + " stores int (<= 8 bit) or fp8 weights");
      out.push_back({m + ".weight", fp ? float_tensor(codes.values, DType::F8_E4M3, {w.rows, w.cols})
                                       : int8_tensor(codes.values, {w.rows, w.cols})});
      if (format == CompressionFormat::Mxfp8Quantized)
        out.push_back({m + ".weight_scale", mx_scale_tensor(scales, codes.scale_dtype, sshape)});
      else
        out.push_back({m + ".weight_scale", float_tensor(scales, codes.scale_dtype, sshape)});
      add_zero_point(w, false, &out);
      add_g_idx(w, &out);
      return out;
    }
    case CompressionFormat::PackQuantized: {
      LOWBIT_CHECK(!fp && a.num_bits >= 1 && a.num_bits <= 8,
                   m + ": pack-quantized stores 1..8-bit integer weights");
      const std::vector<int8_t> q = to_int8(codes.values);
      const auto words = pack_int_rows(q.data(), w.rows, w.cols, a.num_bits);
      out.push_back({m + ".weight_packed",
                     copy_tensor(words, DType::I32, {w.rows, packed_words_per_row(w.cols, a.num_bits)})});
      out.push_back({m + ".weight_scale", float_tensor(scales, codes.scale_dtype, sshape)});
      out.push_back({m + ".weight_shape",
                     copy_tensor(std::vector<int64_t>{w.rows, w.cols}, DType::I64, {2})});
      add_zero_point(w, true, &out);
      add_g_idx(w, &out);
      return out;
    }
    case CompressionFormat::Nvfp4PackQuantized:
    case CompressionFormat::Mxfp4PackQuantized: {
      LOWBIT_CHECK(fp && a.num_bits == 4, m + ": " + to_string(format) + " stores fp4 weights");
      const auto codes4 = fp4_codes(codes.values);
      out.push_back({m + ".weight_packed",
                     copy_tensor(pack_fp4_rows(codes4.data(), w.rows, w.cols), DType::U8,
                                 {w.rows, w.cols / 2})});
      if (format == CompressionFormat::Mxfp4PackQuantized) {
        out.push_back({m + ".weight_scale", mx_scale_tensor(scales, codes.scale_dtype, sshape)});
      } else {
        const DType sd = a.scale_dtype.value_or(DType::F8_E4M3);
        LOWBIT_CHECK(dtype_is_float(sd), m + ": nvfp4 scales must have a float scale_dtype");
        out.push_back({m + ".weight_scale", float_tensor(scales, sd, sshape)});
      }
      if (qp.global_scale > 0.0f)
        out.push_back({m + ".weight_global_scale",
                       float_tensor({qp.global_scale}, DType::F32, {1})});
      add_zero_point(w, false, &out);
      return out;
    }
    default:
      throw InvalidArgument(m + ": cannot compress a weight to format " + to_string(format));
  }
}

}  // namespace lowbit::quant
