// A quantized Linear weight and its on-disk compressed-tensors form (FORMATS.md §2): compress() turns
// a weight (plus its qparams and args) into the named tensors of the chosen format (weight_packed,
// weight_scale, weight_zero_point, weight_shape, weight_g_idx, weight_global_scale, ...); decompress()
// reads them back into dequantized values. Bit packing of any width (and the pre-0.17 layout on
// read) lives in packing.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lowbit/tensor.h"
#include "quant/scheme/qparams.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// compressed-tensors' format inference for a scheme (mxfp4 → mxfp8 → nvfp4 → int-quantized →
// pack-quantized → float-quantized → naive → dense), unless the scheme names one.
CompressionFormat infer_format(const QuantScheme& scheme);

struct NamedTensor {
  std::string name;  // full name, e.g. "model.layers.0.mlp.down_proj.weight_packed"
  Tensor tensor;     // owning
};

// Everything needed to write one quantized Linear weight.
struct WeightToCompress {
  std::string module;          // "model.layers.0.mlp.down_proj"
  const float* values;         // [rows, cols]: the (fake-quantized or original) weight, fp32
  int64_t rows, cols;
  DType original_dtype;        // the checkpoint's dtype (BF16 / F16 / F32): scales are stored in it
  const QParams* qparams;      // from the observer or GPTQ
  const QuantArgs* args;
  const std::vector<int32_t>* g_idx = nullptr;  // actorder=group only
};

// Quantizes `w.values` with its qparams and returns the tensors of `format` (dtypes and shapes as
// compressed-tensors writes them; symmetric zero points are not written).
std::vector<NamedTensor> compress_weight(const WeightToCompress& w, CompressionFormat format);

// Where decompress_weight finds a module's tensors (a Checkpoint, or a map in tests).
struct TensorSource {
  std::function<bool(const std::string&)> has;
  std::function<Tensor(const std::string&)> get;  // throws when missing
  std::string description;                        // file or directory, for messages
};

// A module's stored form, unpacked but not dequantized: what runtime kernels repack from.
struct CompressedWeight {
  int64_t rows = 0, cols = 0;
  int64_t grid_rows = 1, grid_cols = 1;  // the scale grid (tensor 1x1, channel rows x 1, ...)
  std::vector<float> codes;              // [rows, cols]: fp8 / fp4 values (empty for int weights)
  std::vector<int8_t> int_codes;         // [rows, cols]: int weights' codes, signed range
  std::vector<float> scales;       // [grid_rows, grid_cols] (one value for tensor strategy)
  DType scale_dtype = DType::F32;  // the dtype dequantization arithmetic runs in
  std::vector<float> zero_points;  // like scales; empty when symmetric
  std::vector<int32_t> g_idx;      // [cols], validated against grid_cols; empty: none
  float global_scale = 0.0f;       // NVFP4 weight_global_scale, 0 when absent
};

// Reads and validates a module's tensors (any quantized format, incl. the pre-0.17 packing).
// Throws InvalidArgument naming the tensor when one is missing or has the wrong dtype / shape.
CompressedWeight read_compressed_weight(const TensorSource& source, const std::string& module,
                                        const QuantArgs& args, CompressionFormat format,
                                        int64_t rows, int64_t cols);

// Reads a module's tensors back into the dequantized weight [rows, cols] (fp32 values rounded to
// the scale dtype, which is what compressed-tensors' decompressor produces before the cast to the
// model dtype). Accepts the pre-0.17 packing. Throws InvalidArgument naming the tensor when one is
// missing or has the wrong dtype / shape for `args`.
std::vector<float> decompress_weight(const TensorSource& source, const std::string& module,
                                     const QuantArgs& args, CompressionFormat format, int64_t rows,
                                     int64_t cols);

}  // namespace lowbit::quant
