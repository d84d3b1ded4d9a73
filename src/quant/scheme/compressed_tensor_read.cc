// Reading a compressed-tensors Linear weight back into dequantized values, as the 0.19.0
// decompressors compute them (and, unlike 0.19, also the pre-0.17 packing and weight_g_idx).
#include <climits>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/scheme/compressed_tensor.h"
#include "quant/scheme/compressed_tensor_util.h"
#include "quant/scheme/packing.h"

namespace lowbit::quant {
namespace {

struct Reader {
  const TensorSource& src;
  const std::string& module;

  std::string full(const std::string& suffix) const { return module + "." + suffix; }
  bool has(const std::string& suffix) const { return src.has(full(suffix)); }

  Tensor get(const std::string& suffix, std::initializer_list<DType> dtypes) const {
    const std::string name = full(suffix);
    LOWBIT_CHECK(src.has(name), src.description + ": tensor '" + name + "' is missing");
    Tensor t = src.get(name);
    bool ok = false;
    std::string allowed;
    for (DType d : dtypes) {
      ok = ok || t.dtype() == d;
      allowed += (allowed.empty() ? "" : "/") + std::string(dtype_name(d));
    }
    LOWBIT_CHECK(ok, src.description + ": tensor '" + name + "' has dtype " +
                         std::string(dtype_name(t.dtype())) + ", expected " + allowed);
    return t;
  }

  void check_shape(const Tensor& t, const std::string& suffix, const Shape& expected) const {
    LOWBIT_CHECK(t.shape() == expected, src.description + ": tensor '" + full(suffix) +
                                            "' has shape " + t.shape_string() + ", expected " +
                                            shape_to_string(expected));
  }
};

struct Grid {
  int64_t rows = 1, cols = 1;
};

Grid grid_of(const QuantArgs& a, int64_t rows, int64_t cols) {
  switch (a.strategy) {
    case Strategy::Tensor: return {1, 1};
    case Strategy::Channel: return {rows, 1};
    case Strategy::Group:
    case Strategy::TensorGroup: return {rows, (cols + a.group_size - 1) / a.group_size};
    case Strategy::Block:
      return {(rows + a.block_rows - 1) / a.block_rows, (cols + a.block_cols - 1) / a.block_cols};
    default: throw InvalidArgument(to_string(a.strategy) + " is not a weight strategy");
  }
}

// The scales as the decompressor holds them, with the dtype its arithmetic runs in.
struct Scales {
  std::vector<float> values;
  DType dtype;
  float global_scale = 0.0f;
};

Scales read_float_scales(const Reader& rd, const QuantArgs& a, Grid g) {
  Tensor t = rd.get("weight_scale", {DType::BF16, DType::F16, DType::F32});
  if (a.strategy == Strategy::Tensor)
    LOWBIT_CHECK(t.numel() == 1, rd.src.description + ": tensor '" + rd.full("weight_scale") +
                                     "' must hold one value for tensor strategy");
  else
    rd.check_shape(t, "weight_scale", {g.rows, g.cols});
  Tensor f = t.to_f32();
  return {std::vector<float>(f.data_as<float>(), f.data_as<float>() + f.numel()), t.dtype()};
}

// decompress_mx_scale: 2 ** (e - 127) computed in bf16.
Scales read_mx_scales(const Reader& rd, Grid g) {
  Tensor t = rd.get("weight_scale", {DType::U8});
  rd.check_shape(t, "weight_scale", {g.rows, g.cols});
  Scales s{{}, DType::BF16};
  for (int64_t i = 0; i < t.numel(); ++i)
    s.values.push_back(round_to_dtype(std::exp2(static_cast<float>(t.data_as<uint8_t>()[i]) - 127.0f),
                                      DType::BF16));
  return s;
}

// NVFP4: fp8 (scale_dtype) group scales, used as bf16 (the unpacked fp4 values' dtype).
Scales read_nvfp4_scales(const Reader& rd, Grid g) {
  Tensor t = rd.get("weight_scale", {DType::F8_E4M3, DType::BF16, DType::F16, DType::F32});
  rd.check_shape(t, "weight_scale", {g.rows, g.cols});
  Tensor f = t.to_f32();
  Scales s{{}, DType::BF16};
  for (int64_t i = 0; i < f.numel(); ++i)
    s.values.push_back(round_to_dtype(f.data_as<float>()[i], DType::BF16));
  if (rd.has("weight_global_scale")) {
    Tensor gs = rd.get("weight_global_scale", {DType::F32, DType::BF16, DType::F16});
    LOWBIT_CHECK(gs.numel() == 1, rd.src.description + ": '" + rd.full("weight_global_scale") +
                                      "' must hold one value");
    s.global_scale = gs.to_f32().data_as<float>()[0];
  }
  return s;
}

std::vector<float> read_zero_points(const Reader& rd, const QuantArgs& a, Grid g, bool packed) {
  if (a.symmetric || !rd.has("weight_zero_point")) return {};
  const bool pack_zp = packed && (a.strategy == Strategy::Group || a.strategy == Strategy::Channel);
  std::vector<int8_t> q;
  if (pack_zp) {
    Tensor t = rd.get("weight_zero_point", {DType::I32});
    LOWBIT_CHECK(t.ndim() == 2 && t.dim(1) == g.cols,
                 rd.src.description + ": tensor '" + rd.full("weight_zero_point") + "' has shape " +
                     t.shape_string() + ", expected [packed rows, " + std::to_string(g.cols) + "]");
    q = unpack_int_columns(t.data_as<int32_t>(), t.dim(0), g.rows, g.cols, a.num_bits);
  } else {
    Tensor t = rd.get("weight_zero_point", {DType::I8});
    LOWBIT_CHECK(t.numel() == g.rows * g.cols,
                 rd.src.description + ": tensor '" + rd.full("weight_zero_point") + "' has shape " +
                     t.shape_string());
    q.assign(t.data_as<int8_t>(), t.data_as<int8_t>() + t.numel());
  }
  return std::vector<float>(q.begin(), q.end());
}

std::vector<int32_t> read_g_idx(const Reader& rd, int64_t cols) {
  if (!rd.has("weight_g_idx")) return {};
  Tensor t = rd.get("weight_g_idx", {DType::I32, DType::I64});
  rd.check_shape(t, "weight_g_idx", {cols});
  // Read as integers (not through fp32: a corrupt index as large as 2^31 must be an error naming
  // the tensor, not an out-of-range conversion).
  std::vector<int32_t> g(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) {
    const int64_t v = t.dtype() == DType::I64 ? t.data_as<int64_t>()[i]
                                               : static_cast<int64_t>(t.data_as<int32_t>()[i]);
    LOWBIT_CHECK(v >= 0 && v <= INT32_MAX,
                 rd.src.description + ": tensor '" + rd.full("weight_g_idx") + "' element " +
                     std::to_string(i) + " is " + std::to_string(v) + ", not a group index");
    g[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  return g;
}

// Int weights' codes (signed range), row-major: packed int32 words or an int8 tensor.
std::vector<int8_t> read_int_codes(const Reader& rd, const QuantArgs& a, CompressionFormat format,
                                   int64_t rows, int64_t cols) {
  if (format == CompressionFormat::PackQuantized) {
    Tensor t = rd.get("weight_packed", {DType::I32});
    LOWBIT_CHECK(t.ndim() == 2 && t.dim(0) == rows,
                 rd.src.description + ": tensor '" + rd.full("weight_packed") + "' has shape " +
                     t.shape_string() + " for a [" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "] weight");
    if (rd.has("weight_shape")) {
      Tensor s = rd.get("weight_shape", {DType::I64, DType::I32}).to_f32();
      LOWBIT_CHECK(s.numel() == 2 && s.data_as<float>()[0] == static_cast<float>(rows) &&
                       s.data_as<float>()[1] == static_cast<float>(cols),
                   rd.src.description + ": '" + rd.full("weight_shape") + "' does not match [" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "]");
    }
    return unpack_int_rows(t.data_as<int32_t>(), rows, t.dim(1), cols, a.num_bits);
  }
  Tensor t = rd.get("weight", {DType::I8});
  rd.check_shape(t, "weight", {rows, cols});
  const auto* q = t.data_as<int8_t>();
  return std::vector<int8_t>(q, q + t.numel());
}

// Quantized values (fp8 / fp4 grid values) of every weight element, row-major.
std::vector<float> read_float_codes(const Reader& rd, CompressionFormat format, int64_t rows,
                                    int64_t cols) {
  if (format == CompressionFormat::Nvfp4PackQuantized ||
      format == CompressionFormat::Mxfp4PackQuantized) {
    Tensor t = rd.get("weight_packed", {DType::U8});
    rd.check_shape(t, "weight_packed", {rows, cols / 2});
    const auto codes = unpack_fp4_rows(t.data_as<uint8_t>(), rows, cols);
    std::vector<float> v(codes.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = fp4_value(codes[i]);
    return v;
  }
  Tensor t = rd.get("weight", {DType::F8_E4M3});
  rd.check_shape(t, "weight", {rows, cols});
  Tensor f = t.to_f32();
  return std::vector<float>(f.data_as<float>(), f.data_as<float>() + f.numel());
}

}  // namespace

CompressedWeight read_compressed_weight(const TensorSource& source, const std::string& module,
                                        const QuantArgs& args, CompressionFormat format,
                                        int64_t rows, int64_t cols) {
  const Reader rd{source, module};
  LOWBIT_CHECK(format != CompressionFormat::Dense && format != CompressionFormat::MixedPrecision,
               module + ": read_compressed_weight needs the group's quantized format");
  const Grid g = grid_of(args, rows, cols);
  Scales s;
  if (format == CompressionFormat::Nvfp4PackQuantized) s = read_nvfp4_scales(rd, g);
  else if (format == CompressionFormat::Mxfp4PackQuantized || format == CompressionFormat::Mxfp8Quantized)
    s = read_mx_scales(rd, g);
  else s = read_float_scales(rd, args, g);
  CompressedWeight w;
  w.rows = rows;
  w.cols = cols;
  w.grid_rows = g.rows;
  w.grid_cols = g.cols;
  if (args.type == QuantType::Int) {
    w.int_codes = read_int_codes(rd, args, format, rows, cols);
  } else {
    w.codes = read_float_codes(rd, format, rows, cols);
  }
  w.zero_points = read_zero_points(rd, args, g, format == CompressionFormat::PackQuantized);
  w.g_idx = read_g_idx(rd, cols);
  for (int32_t gc : w.g_idx) {
    LOWBIT_CHECK(gc >= 0 && gc < g.cols, source.description + ": '" + rd.full("weight_g_idx") +
                                             "' holds a group index out of range");
  }
  w.scales = std::move(s.values);
  w.scale_dtype = s.dtype;
  w.global_scale = s.global_scale;
  return w;
}

std::vector<float> decompress_weight(const TensorSource& source, const std::string& module,
                                     const QuantArgs& args, CompressionFormat format, int64_t rows,
                                     int64_t cols) {
  if (format == CompressionFormat::Dense) {
    const Reader rd{source, module};
    Tensor t = rd.get("weight", {DType::BF16, DType::F16, DType::F32});
    rd.check_shape(t, "weight", {rows, cols});
    Tensor f = t.to_f32();
    return std::vector<float>(f.data_as<float>(), f.data_as<float>() + f.numel());
  }
  const CompressedWeight w = read_compressed_weight(source, module, args, format, rows, cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t gr = grid_row_of(args, i);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t gc = w.g_idx.empty() ? group_of_column(args, j) : w.g_idx[static_cast<size_t>(j)];
      const size_t k = static_cast<size_t>(gr * w.grid_cols + gc);
      const float scale = w.scales[args.strategy == Strategy::Tensor ? 0 : k];
      const float z = w.zero_points.empty() ? 0.0f : w.zero_points[args.strategy == Strategy::Tensor ? 0 : k];
      const size_t idx = static_cast<size_t>(i * cols + j);
      const float code = w.int_codes.empty() ? w.codes[idx] : static_cast<float>(w.int_codes[idx]);
      out[idx] = dequantize_value(code, scale, z, args, w.scale_dtype, w.global_scale);
    }
  }
  return out;
}

}  // namespace lowbit::quant
