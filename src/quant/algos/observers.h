// llm-compressor's observers (llmcompressor/observers/{min_max,mse,mse_quant}.py, 0.14.0.1): what
// turns observed values into the (min, max) ranges calculate_qparams takes. A "slot" is one
// quantization parameter: the whole tensor, a weight row (channel), a row's group of columns, or a
// block; its values are what flatten_for_calibration puts on the last axis.
//
// Weights always get a memoryless observer (llm-compressor forces minmax / static_minmax →
// memoryless_minmax and mse → memoryless_mse for weights). Activations use StaticMinMax (running
// global range) or EmaMinMax (moving average, llm-compressor's "minmax").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowbit/dtype.h"
#include "quant/scheme/qparams.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// Per-slot ranges laid out like QParams' grid (grid_rows x grid_cols, row-major).
struct SlotRange {
  int64_t grid_rows = 1, grid_cols = 1;
  std::vector<float> min, max;
};

// min / max over each slot of a weight [rows, cols] (tensor, channel, group, tensor_group, block;
// blocks are zero-padded to whole tiles as the observer pads them). Throws InvalidArgument for
// strategies that cannot apply to weights or group sizes that do not divide cols.
SlotRange weight_slot_range(const float* w, int64_t rows, int64_t cols, const QuantArgs& args);

// min / max of activations x [tokens, channels] per slot: tensor → one slot; group / tensor_group →
// one per group of channels (over all tokens). Other strategies throw InvalidArgument.
SlotRange activation_slot_range(const float* x, int64_t tokens, int64_t channels,
                                const QuantArgs& args);

// memoryless_mse's knobs (observer_kwargs): the search tries p = 1 - i/grid for
// i < int(maxshrink*grid) on (p*min, p*max)·expand, scoring Σ|Q(x)-x|^norm per slot, and stops after
// `patience` consecutive steps in which no slot improved.
struct MseOptions {
  double grid = 100.0;
  double maxshrink = 0.20;
  double norm = 2.4;
  int patience = 5;
  double expand = 1.0;
  // Defaults for args.observer ("nvfp4_expanded_mse": expand 1.8, grid 200, maxshrink 1-0.8/1.8,
  // patience 1000), overridden by args.observer_kwargs. Throws InvalidArgument for expand < 1.
  static MseOptions from_args(const QuantArgs& args);
};

// The range memoryless_mse keeps for each slot of a weight (the shrunk min / max, in `compute`).
SlotRange mse_weight_range(const float* w, int64_t rows, int64_t cols, const QuantArgs& args,
                           DType compute, const MseOptions& options);

// True for the observer names that run the MSE search ("mse", "memoryless_mse",
// "nvfp4_expanded_mse"); false for the min-max ones and null. Throws Unsupported otherwise
// (imatrix_mse needs activation statistics lowbit does not collect here).
bool observer_is_mse(const QuantArgs& args);

// observe_weight_minmax (quant/scheme/qparams.h) bit for bit, with channel / group / tensor_group
// grids computed row by row on every core (an 8B down_proj: ~0.3 s serial, ~20 ms on 16 cores);
// tensor and block grids run its serial loop.
QParams observe_weight_minmax_rows(const float* w, int64_t rows, int64_t cols,
                                   const QuantArgs& args, DType compute, float global_scale = 0.0f);

// Weight qparams as llm-compressor's weight observer computes them for args.observer: memoryless
// min-max or the MSE search, then calculate_qparams. For tensor_group the global scale comes from
// the kept range's absmax unless `global_scale` > 0 is given (fused q/k/v, gate/up).
QParams observe_weight(const float* w, int64_t rows, int64_t cols, const QuantArgs& args,
                       DType compute, float global_scale = 0.0f);

// The global scale of a tensor_group weight from its kept range (get_global_scale), or 0 for other
// strategies.
float global_scale_of_range(const SlotRange& range, const QuantArgs& args, DType compute);

// static_minmax: element-wise running min of mins and max of maxes over all batches.
class StaticMinMax {
 public:
  void update(const SlotRange& batch);
  bool empty() const { return !has_; }
  const SlotRange& range() const { return range_; }

 private:
  SlotRange range_;
  bool has_ = false;
};

// minmax: new = old·(1-c) + batch·c (the first batch initialises), in the activations' dtype.
class EmaMinMax {
 public:
  explicit EmaMinMax(double averaging_constant = 0.01, DType compute = DType::F32)
      : c_(averaging_constant), compute_(compute) {}
  void update(const SlotRange& batch);
  bool empty() const { return !has_; }
  const SlotRange& range() const { return range_; }

 private:
  double c_;
  DType compute_;
  SlotRange range_;
  bool has_ = false;
};

// The observer of a calibrated input activation (static input_scale, NVFP4's input_global_scale)
// over the calibration forward calls, one batch each, as llm-compressor's input observer:
// minmax (its default: the moving average above, observer_kwargs.averaging_constant, 0.01),
// static_minmax (the global range) or memoryless_minmax (the last batch's range). One slot: the
// calibrated input quantities are per tensor.
class InputRangeObserver {
 public:
  // Throws Unsupported naming `where` for observers with no activation path here (the MSE family).
  InputRangeObserver(const QuantArgs& args, DType compute, const std::string& where);
  void observe(const float* x, size_t n);
  bool empty() const { return !has_; }
  float min() const { return has_ ? current().min[0] : 0.0f; }  // 0 before any batch
  float max() const { return has_ ? current().max[0] : 0.0f; }

 private:
  enum class Kind { Ema, Static, Memoryless };
  const SlotRange& current() const;
  Kind kind_;
  EmaMinMax ema_;
  StaticMinMax static_;
  SlotRange last_;  // memoryless: the last batch's range
  bool has_ = false;
};

// Throws Unsupported naming `where` unless InputRangeObserver can run args.observer.
void check_input_observer(const QuantArgs& args, const std::string& where);

}  // namespace lowbit::quant
