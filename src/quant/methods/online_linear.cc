#include "quant/methods/online_linear.h"

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/scheme/qparams.h"

namespace lowbit::quant {

QuantArgs fp8_weight_args(Strategy strategy) {
  QuantArgs a;
  a.num_bits = 8;
  a.type = QuantType::Float;
  a.symmetric = true;
  a.strategy = strategy;
  if (strategy == Strategy::Block) {
    a.block_rows = 128;
    a.block_cols = 128;
  }
  a.scale_dtype = DType::F32;  // vLLM keeps online scales in fp32
  return a;
}

QuantArgs fp8_dynamic_input_args(Strategy strategy, int64_t group_size) {
  QuantArgs a;
  a.num_bits = 8;
  a.type = QuantType::Float;
  a.symmetric = true;
  a.strategy = strategy;
  a.group_size = group_size;
  a.dynamic = DynamicMode::Dynamic;
  return a;
}

QuantArgs int8_channel_weight_args() {
  QuantArgs a;
  a.num_bits = 8;
  a.type = QuantType::Int;
  a.symmetric = true;
  a.strategy = Strategy::Channel;
  a.scale_dtype = DType::F32;
  return a;
}

void OnlineLinear::create_weights(LayerParams& layer) {
  const LayerInfo& info = layer.info();
  layer.declare(ParamSpec{"weight", {DType::F32, DType::F16, DType::BF16},
                          {info.out_features, info.in_features}, true});
}

void OnlineLinear::process_weights_after_loading(LayerParams& layer) {
  const LayerInfo& info = layer.info();
  const int64_t rows = info.out_features, cols = info.in_features;
  const Tensor w = layer.get("weight").to_f32();
  const float* values = w.data_as<const float>();
  const QParams qp = observe_weight_minmax(values, rows, cols, weights_, DType::F32);
  std::optional<InputQuant> input;
  if (inputs_) input = InputQuant{*inputs_, 0.0f, 0.0f};

  if (weights_.type == QuantType::Float) {
    kernels::Fp8Weights f;
    f.rows = rows;
    f.cols = cols;
    f.block_rows = weights_.strategy == Strategy::Block ? weights_.block_rows
                   : weights_.strategy == Strategy::Tensor ? rows : 1;
    f.block_cols = weights_.strategy == Strategy::Block ? weights_.block_cols : cols;
    f.codes.resize(static_cast<size_t>(rows * cols));
    // Rows are independent: an 8B model's 7 G weights take minutes on one core.
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const float scale = qp.scale_at(grid_row_of(weights_, r), group_of_column(weights_, c));
        f.codes[i] = f32_to_fp8_e4m3(quantize_value(values[i], scale, 0.0f, weights_, DType::F32));
      }
    }
    f.scales = qp.scale;
    finish_fp8(layer, std::move(f), input);
    return;
  }
  kernels::IntWeights q;
  q.bits = weights_.num_bits;
  q.rows = rows;
  q.cols = cols;
  q.group_size = cols;
  q.scales = qp.scale;
  q.codes.resize(static_cast<size_t>(rows * cols));
  const float offset = static_cast<float>(1 << (q.bits - 1));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const float code = quantize_value(values[i], qp.scale[static_cast<size_t>(r)], 0.0f,
                                        weights_, DType::F32);
      q.codes[i] = static_cast<uint8_t>(code + offset);
    }
  }
  finish_int(layer, std::move(q), input);
}

}  // namespace lowbit::quant
