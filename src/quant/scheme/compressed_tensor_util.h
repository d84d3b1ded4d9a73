// Helpers shared by compressed_tensor.cc (writing) and compressed_tensor_read.cc (reading).
#pragma once

#include <vector>

#include "lowbit/tensor.h"
#include "quant/scheme/qparams.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant::ct_detail {

// The dtype initialize_qparams gives weight_scale: the weight's float dtype, else fp16.
DType scale_param_dtype(DType weight_dtype);
// weight_scale's shape: tensor [1], otherwise the qparam grid.
Shape scale_shape(const QuantArgs& args, const QParams& qp);
// A new tensor of `dtype` (F32 / BF16 / F16 / F8_E4M3, round to nearest even) holding v.
Tensor float_tensor(const std::vector<float>& v, DType dtype, Shape shape);

}  // namespace lowbit::quant::ct_detail
