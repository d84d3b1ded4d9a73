// The state the sequential pipeline carries between layers and the helpers its passes share: the
// cached hidden states of every calibration sample at the current layer boundary, forward hooks
// on Linears, and the conversions between a Linear's stored weight and the fp32 matrix the
// algorithms work on.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lowbit/tensor.h"
#include "models/layer_runner.h"
#include "models/layers/linear.h"
#include "quant/pipeline/calibration_data.h"

namespace lowbit::quant {

// Hidden states [len_i, hidden] of each sample at the input of the next layer (fp32).
struct ActivationCache {
  std::vector<std::vector<float>> states;
  std::vector<int64_t> lengths;
  int64_t hidden = 0;

  int64_t tokens() const;
  size_t bytes() const;
};

ActivationCache embed_samples(models::LayerRunner& runner, const CalibrationSet& samples,
                              int64_t hidden);

// Runs `layer` on every cached sample. calibrate: on a copy, outputs dropped (the hooks see the
// inputs); propagate: in place, the outputs become the next layer's inputs. `after_sample` sees
// the runner after each sample (keys / values for KV-cache observers).
void run_layer_over_cache(models::LayerRunner& runner, const models::LayerWeights& layer,
                          ActivationCache& cache, bool propagate,
                          const std::function<void(const models::LayerRunner&, int64_t)>&
                              after_sample = nullptr);

// A forward hook that hands every input batch to a callback.
class CallbackObserver : public models::LinearInputObserver {
 public:
  explicit CallbackObserver(std::function<void(const float*, int64_t, int64_t)> fn)
      : fn_(std::move(fn)) {}
  void observe(const float* x, int64_t rows, int64_t cols) override { fn_(x, rows, cols); }

 private:
  std::function<void(const float*, int64_t, int64_t)> fn_;
};

// Sets `observer` on the Linears for the lifetime of this object.
class ScopedObservers {
 public:
  ScopedObservers() = default;
  ScopedObservers(const ScopedObservers&) = delete;
  ScopedObservers& operator=(const ScopedObservers&) = delete;
  ~ScopedObservers() { detach_all(); }
  void attach(models::Linear& linear, models::LinearInputObserver* observer);
  void detach_all();

 private:
  std::vector<models::Linear*> attached_;
};

// The weight as fp32 [out, in].
std::vector<float> weight_to_f32(const models::Linear& linear);
// Replaces the weight with an owned tensor of `dtype` holding `values` rounded to it.
void set_weight(models::Linear& linear, const std::vector<float>& values, DType dtype);

}  // namespace lowbit::quant
