// Observers of llm-compressor 0.14.0.1 (observers/{min_max,mse,mse_quant,base}.py), CPU (eager)
// code path, with torch's per-op rounding in the observed dtype.
#include "quant/algos/observers.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>

#include "lowbit/error.h"
#include "quant/algos/torch_math.h"

namespace lowbit::quant {

using detail::rd;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void weight_grid(const QuantArgs& args, int64_t rows, int64_t cols, int64_t* gr, int64_t* gc) {
  switch (args.strategy) {
    case Strategy::Tensor: *gr = 1, *gc = 1; return;
    case Strategy::Channel: *gr = rows, *gc = 1; return;
    case Strategy::Group:
    case Strategy::TensorGroup:
      LOWBIT_CHECK(args.group_size > 0 && cols % args.group_size == 0,
                   "observer: weight with " + std::to_string(cols) +
                       " columns is not divisible by group_size " + std::to_string(args.group_size));
      *gr = rows, *gc = cols / args.group_size;
      return;
    case Strategy::Block:
      LOWBIT_CHECK(args.block_rows > 0 && args.block_cols > 0,
                   "observer: block strategy needs block_structure");
      *gr = (rows + args.block_rows - 1) / args.block_rows;
      *gc = (cols + args.block_cols - 1) / args.block_cols;
      return;
    default:
      throw InvalidArgument("observer: " + to_string(args.strategy) +
                            " quantization cannot be applied to weights");
  }
}

// The values of each slot, gathered contiguously (slot k: values[offset[k] .. offset[k+1])).
struct Slots {
  std::vector<int64_t> offset;
  std::vector<float> values;
};

Slots gather_slots(const float* w, int64_t rows, int64_t cols, const QuantArgs& args, int64_t gr,
                   int64_t gc) {
  const int64_t n = gr * gc;
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  auto slot_of = [&](int64_t i, int64_t j) {
    return grid_row_of(args, i) * gc + group_of_column(args, j);
  };
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) ++count[static_cast<size_t>(slot_of(i, j))];
  Slots s;
  s.offset.assign(static_cast<size_t>(n) + 1, 0);
  for (int64_t k = 0; k < n; ++k) s.offset[k + 1] = s.offset[k] + count[k];
  s.values.resize(static_cast<size_t>(rows * cols));
  std::vector<int64_t> fill(s.offset.begin(), s.offset.end() - 1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      s.values[static_cast<size_t>(fill[slot_of(i, j)]++)] = w[i * cols + j];
  return s;
}

// Blocks cut by the matrix edge are zero-padded by flatten_for_calibration: their range covers 0.
void include_block_padding(SlotRange& r, const QuantArgs& args, int64_t rows, int64_t cols) {
  if (args.strategy != Strategy::Block) return;
  for (int64_t a = 0; a < r.grid_rows; ++a)
    for (int64_t b = 0; b < r.grid_cols; ++b) {
      const bool partial = (a + 1) * args.block_rows > rows || (b + 1) * args.block_cols > cols;
      if (!partial) continue;
      const size_t k = static_cast<size_t>(a * r.grid_cols + b);
      r.min[k] = std::min(r.min[k], 0.0f);
      r.max[k] = std::max(r.max[k], 0.0f);
    }
}

double kwarg(const QuantArgs& args, const char* key, double fallback) {
  const auto& kw = args.observer_kwargs;
  if (!kw.is_object() || !kw.contains(key)) return fallback;
  const auto& v = kw.at(key);
  LOWBIT_CHECK(v.is_number(), std::string("observer_kwargs.") + key + " must be a number");
  return v.get<double>();
}

// Σ |Q(x) - x|^norm over one slot, in the observed dtype (_calculate_error).
float slot_error(const float* x, int64_t n, float scale, float zero, const QuantArgs& args,
                 DType compute, double norm) {
  double sum = 0.0;
  for (int64_t t = 0; t < n; ++t) {
    const float q = fake_quantize_value(x[t], scale, zero, args, compute);
    const float d = std::fabs(rd(q - x[t], compute));
    sum += detail::torch_pow(d, norm, compute);
  }
  return rd(static_cast<float>(sum), compute);
}

}  // namespace

SlotRange weight_slot_range(const float* w, int64_t rows, int64_t cols, const QuantArgs& args) {
  SlotRange r;
  weight_grid(args, rows, cols, &r.grid_rows, &r.grid_cols);
  r.min.assign(static_cast<size_t>(r.grid_rows * r.grid_cols), kInf);
  r.max.assign(r.min.size(), -kInf);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t base = grid_row_of(args, i) * r.grid_cols;
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(base + group_of_column(args, j));
      r.min[k] = std::min(r.min[k], w[i * cols + j]);
      r.max[k] = std::max(r.max[k], w[i * cols + j]);
    }
  }
  include_block_padding(r, args, rows, cols);
  return r;
}

SlotRange activation_slot_range(const float* x, int64_t tokens, int64_t channels,
                                const QuantArgs& args) {
  SlotRange r;
  int64_t g = channels;
  if (args.strategy == Strategy::Group || args.strategy == Strategy::TensorGroup) {
    g = args.group_size;
    LOWBIT_CHECK(g > 0 && channels % g == 0,
                 "observer: activation width " + std::to_string(channels) +
                     " is not divisible by group_size " + std::to_string(g));
  } else {
    LOWBIT_CHECK(args.strategy == Strategy::Tensor,
                 "observer: static activation ranges need strategy tensor, group or tensor_group, "
                 "not " + to_string(args.strategy));
  }
  r.grid_cols = channels / g;
  r.min.assign(static_cast<size_t>(r.grid_cols), kInf);
  r.max.assign(r.min.size(), -kInf);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      const size_t k = static_cast<size_t>(c / g);
      r.min[k] = std::min(r.min[k], x[t * channels + c]);
      r.max[k] = std::max(r.max[k], x[t * channels + c]);
    }
  return r;
}

MseOptions MseOptions::from_args(const QuantArgs& args) {
  MseOptions o;
  if (args.observer == "nvfp4_expanded_mse") {
    o.expand = 1.8, o.grid = 200.0, o.maxshrink = 1.0 - 0.8 / 1.8, o.patience = 1000;
  }
  o.grid = kwarg(args, "grid", o.grid);
  o.maxshrink = kwarg(args, "maxshrink", o.maxshrink);
  o.norm = kwarg(args, "norm", o.norm);
  o.patience = static_cast<int>(kwarg(args, "patience", o.patience));
  o.expand = kwarg(args, "expand", o.expand);
  LOWBIT_CHECK(o.expand >= 1.0,
               "observer_kwargs.expand must be at least 1.0, got " + std::to_string(o.expand));
  LOWBIT_CHECK(o.grid > 0.0, "observer_kwargs.grid must be positive");
  return o;
}

bool observer_is_mse(const QuantArgs& args) {
  const std::string& o = args.observer;
  if (o.empty() || o == "minmax" || o == "static_minmax" || o == "memoryless_minmax") return false;
  if (o == "mse" || o == "memoryless_mse" || o == "nvfp4_expanded_mse") return true;
  throw Unsupported("observer '" + o + "' is not supported for weights (known: minmax, " +
                    "static_minmax, memoryless_minmax, mse, memoryless_mse, nvfp4_expanded_mse)");
}

SlotRange mse_weight_range(const float* w, int64_t rows, int64_t cols, const QuantArgs& args,
                           DType compute, const MseOptions& options) {
  SlotRange base = weight_slot_range(w, rows, cols, args);
  const int64_t n = base.grid_rows * base.grid_cols;
  const Slots slots = gather_slots(w, rows, cols, args, base.grid_rows, base.grid_cols);
  // The search fits plain local scales: tensor_group drops its fp8 scale dtype and global scale.
  QuantArgs search = args;
  if (args.strategy == Strategy::TensorGroup) {
    search.scale_dtype.reset();
    search.strategy = Strategy::Group;  // same slots; qparams_from_minmax then wants no global
  }
  const float expand = static_cast<float>(options.expand);
  for (int64_t k = 0; k < n; ++k) {
    base.min[k] = rd(base.min[k] * expand, compute);
    base.max[k] = rd(base.max[k] * expand, compute);
  }
  SlotRange best = base, cand = base;
  const float fmax = compute == DType::BF16 ? 3.3895313892515355e38f
                     : compute == DType::F16 ? 65504.0f
                                             : std::numeric_limits<float>::max();
  std::vector<float> best_err(static_cast<size_t>(n), fmax), err(static_cast<size_t>(n));
  const int64_t steps = static_cast<int64_t>(options.maxshrink * options.grid);
  int no_improve = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const float p = static_cast<float>(1.0 - static_cast<double>(i) / options.grid);
    for (int64_t k = 0; k < n; ++k) {
      cand.min[k] = rd(base.min[k] * p, compute);
      cand.max[k] = rd(base.max[k] * p, compute);
    }
    const QParams qp = qparams_from_minmax(cand.min, cand.max, cand.grid_rows, cand.grid_cols,
                                           search, compute);
#pragma omp parallel for schedule(static) if (n > 64)
    for (int64_t k = 0; k < n; ++k) {
      const int64_t b = slots.offset[k];
      err[k] = slot_error(slots.values.data() + b, slots.offset[k + 1] - b, qp.scale[k],
                          qp.zero_point.empty() ? 0.0f : qp.zero_point[k], search, compute,
                          options.norm);
    }
    bool improved = false;
    for (int64_t k = 0; k < n; ++k) {
      if (!(err[k] < best_err[k])) continue;
      best_err[k] = err[k];
      best.min[k] = cand.min[k];
      best.max[k] = cand.max[k];
      improved = true;
    }
    if (improved) {
      no_improve = 0;
    } else if (++no_improve >= options.patience) {
      break;
    }
  }
  return best;
}

float global_scale_of_range(const SlotRange& range, const QuantArgs& args, DType compute) {
  if (args.strategy != Strategy::TensorGroup) return 0.0f;
  float absmax = -kInf;
  for (size_t k = 0; k < range.min.size(); ++k)
    absmax = std::max({absmax, range.max[k], -range.min[k]});
  return nvfp4_global_scale(std::max(absmax, 0.0f), compute);
}

QParams observe_weight_minmax_rows(const float* w, int64_t rows, int64_t cols,
                                   const QuantArgs& args, DType compute, float global_scale) {
  const bool grouped = args.strategy == Strategy::Group || args.strategy == Strategy::TensorGroup;
  const bool by_rows = args.strategy == Strategy::Channel ||
                       (grouped && args.group_size > 0 && cols % args.group_size == 0);
  // Tensor and block grids (and shapes observe_weight_minmax rejects) stay on its serial loop.
  if (!by_rows || rows <= 0 || cols <= 0) {
    return observe_weight_minmax(w, rows, cols, args, compute, global_scale);
  }
  const int64_t g = grouped ? args.group_size : cols;
  const int64_t gc = cols / g;
  std::vector<float> mins(static_cast<size_t>(rows * gc)), maxs(mins.size());
  std::vector<float> row_absmax(static_cast<size_t>(rows));
  // Each slot lies in one row and sees its values in column order, as in the serial loop, so its
  // min / max (std::min / std::max keep the first of equal values: ±0 included) are the same bits.
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t{1} << 16))
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = w + i * cols;
    float absmax = 0.0f;
    for (int64_t c = 0; c < gc; ++c) {
      float mn = kInf, mx = -kInf;
      for (int64_t j = c * g; j < (c + 1) * g; ++j) {
        mn = std::min(mn, row[j]);
        mx = std::max(mx, row[j]);
        absmax = std::max(absmax, std::fabs(row[j]));
      }
      mins[static_cast<size_t>(i * gc + c)] = mn;
      maxs[static_cast<size_t>(i * gc + c)] = mx;
    }
    row_absmax[static_cast<size_t>(i)] = absmax;
  }
  if (args.strategy == Strategy::TensorGroup && global_scale <= 0.0f) {
    // A max of non-negative values, NaN never kept (std::max(a, NaN) = a): any order gives it.
    float absmax = 0.0f;
    for (float a : row_absmax) absmax = std::max(absmax, a);
    global_scale = nvfp4_global_scale(absmax, compute);
  }
  // calculate_qparams is per slot: row stripes of the grid give the same values side by side.
  constexpr int64_t kStripe = 256;
  const int64_t stripes = (rows + kStripe - 1) / kStripe;
  std::vector<QParams> parts(static_cast<size_t>(stripes));
  std::vector<std::exception_ptr> failed(parts.size());
#pragma omp parallel for schedule(static) if (stripes > 1)
  for (int64_t s = 0; s < stripes; ++s) {
    const int64_t r0 = s * kStripe, r1 = std::min(rows, r0 + kStripe);
    try {
      parts[static_cast<size_t>(s)] = qparams_from_minmax(
          std::vector<float>(mins.begin() + r0 * gc, mins.begin() + r1 * gc),
          std::vector<float>(maxs.begin() + r0 * gc, maxs.begin() + r1 * gc), r1 - r0, gc, args,
          compute, global_scale);
    } catch (...) {
      failed[static_cast<size_t>(s)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : failed) {
    if (e) std::rethrow_exception(e);
  }
  QParams qp = std::move(parts[0]);
  qp.grid_rows = rows;
  for (size_t s = 1; s < parts.size(); ++s) {
    qp.scale.insert(qp.scale.end(), parts[s].scale.begin(), parts[s].scale.end());
    qp.zero_point.insert(qp.zero_point.end(), parts[s].zero_point.begin(),
                         parts[s].zero_point.end());
  }
  return qp;
}

QParams observe_weight(const float* w, int64_t rows, int64_t cols, const QuantArgs& args,
                       DType compute, float global_scale) {
  if (!observer_is_mse(args)) {
    return observe_weight_minmax_rows(w, rows, cols, args, compute, global_scale);
  }
  const SlotRange r = mse_weight_range(w, rows, cols, args, compute, MseOptions::from_args(args));
  if (global_scale <= 0.0f) global_scale = global_scale_of_range(r, args, compute);
  return qparams_from_minmax(r.min, r.max, r.grid_rows, r.grid_cols, args, compute, global_scale);
}

void StaticMinMax::update(const SlotRange& batch) {
  if (!has_) {
    range_ = batch;
    has_ = true;
    return;
  }
  LOWBIT_CHECK(batch.min.size() == range_.min.size(),
               "static_minmax observer: batch has " + std::to_string(batch.min.size()) +
                   " slots, earlier batches had " + std::to_string(range_.min.size()));
  for (size_t k = 0; k < batch.min.size(); ++k) {
    range_.min[k] = std::min(range_.min[k], batch.min[k]);
    range_.max[k] = std::max(range_.max[k], batch.max[k]);
  }
}

void EmaMinMax::update(const SlotRange& batch) {
  if (!has_ || c_ == 1.0) {
    range_ = batch;
    has_ = true;
    return;
  }
  LOWBIT_CHECK(batch.min.size() == range_.min.size(),
               "minmax observer: batch has " + std::to_string(batch.min.size()) +
                   " slots, earlier batches had " + std::to_string(range_.min.size()));
  // lerp(start, end, c) = start·(1-c) + end·c, each op rounded to the activations' dtype.
  const float keep = static_cast<float>(1.0 - c_), take = static_cast<float>(c_);
  auto lerp = [&](float a, float b) {
    return rd(rd(a * keep, compute_) + rd(b * take, compute_), compute_);
  };
  for (size_t k = 0; k < batch.min.size(); ++k) {
    range_.min[k] = lerp(range_.min[k], batch.min[k]);
    range_.max[k] = lerp(range_.max[k], batch.max[k]);
  }
}

void check_input_observer(const QuantArgs& args, const std::string& where) {
  const std::string& o = args.observer;
  if (o.empty() || o == "minmax" || o == "static_minmax" || o == "memoryless_minmax") return;
  throw Unsupported(where + ": observer '" + o + "' is not supported for calibrated input " +
                    "activations (use minmax, static_minmax or memoryless_minmax)");
}

InputRangeObserver::InputRangeObserver(const QuantArgs& args, DType compute,
                                       const std::string& where)
    : kind_(Kind::Ema), ema_(kwarg(args, "averaging_constant", 0.01), compute) {
  check_input_observer(args, where);
  if (args.observer == "static_minmax") kind_ = Kind::Static;
  if (args.observer == "memoryless_minmax") kind_ = Kind::Memoryless;
}

void InputRangeObserver::observe(const float* x, size_t n) {
  if (n == 0) return;  // llm-compressor skips empty observations too
  SlotRange batch;
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  batch.min = {lo};
  batch.max = {hi};
  switch (kind_) {
    case Kind::Ema: ema_.update(batch); break;
    case Kind::Static: static_.update(batch); break;
    case Kind::Memoryless: last_ = std::move(batch); break;
  }
  has_ = true;
}

const SlotRange& InputRangeObserver::current() const {
  switch (kind_) {
    case Kind::Ema: return ema_.range();
    case Kind::Static: return static_.range();
    case Kind::Memoryless: break;
  }
  return last_;
}

}  // namespace lowbit::quant
