#include "quant/pipeline/layer_state.h"

namespace lowbit::quant {

int64_t ActivationCache::tokens() const {
  int64_t n = 0;
  for (int64_t len : lengths) n += len;
  return n;
}

size_t ActivationCache::bytes() const {
  return static_cast<size_t>(tokens() * hidden) * sizeof(float);
}

ActivationCache embed_samples(models::LayerRunner& runner, const CalibrationSet& samples,
                              int64_t hidden) {
  ActivationCache cache;
  cache.hidden = hidden;
  for (const std::vector<int32_t>& ids : samples) {
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<float> x(static_cast<size_t>(n * hidden));
    runner.embed(ids, x.data());
    cache.states.push_back(std::move(x));
    cache.lengths.push_back(n);
  }
  return cache;
}

void run_layer_over_cache(models::LayerRunner& runner, const models::LayerWeights& layer,
                          ActivationCache& cache, bool propagate,
                          const std::function<void(const models::LayerRunner&, int64_t)>&
                              after_sample) {
  std::vector<float> scratch;
  for (size_t i = 0; i < cache.states.size(); ++i) {
    float* x = cache.states[i].data();
    if (!propagate) {
      scratch = cache.states[i];
      x = scratch.data();
    }
    runner.run_layer(layer, cache.lengths[i], x);
    if (after_sample) after_sample(runner, cache.lengths[i]);
  }
}

void ScopedObservers::detach_all() {
  for (models::Linear* l : attached_) l->observer = nullptr;
  attached_.clear();
}

void ScopedObservers::attach(models::Linear& linear, models::LinearInputObserver* observer) {
  linear.observer = observer;
  attached_.push_back(&linear);
}

std::vector<float> weight_to_f32(const models::Linear& linear) {
  const Tensor f = linear.weight.to_f32();
  const float* p = f.data_as<const float>();
  return std::vector<float>(p, p + f.numel());
}

void set_weight(models::Linear& linear, const std::vector<float>& values, DType dtype) {
  linear.weight = Tensor::from_f32(values.data(), linear.weight.shape(), dtype);
}

}  // namespace lowbit::quant
