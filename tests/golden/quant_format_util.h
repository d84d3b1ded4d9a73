// Helpers shared by the golden tests of checkpoints written by other tools
// (tests/golden/quant_formats_*test.cc): where the fixtures live, the largest element difference
// of two tensors, a forward returning every position's logits, and the layer-0 modules whose
// dequantized weights the fixtures keep (dequant_<module>).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>

#include "models/model.h"

namespace lowbit::golden {

inline const std::string kQuantFormatsDir =
    std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/quant_formats/";

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  const Tensor fa = a.to_f32(), fb = b.to_f32();
  for (int64_t i = 0; i < fa.numel(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(fa.data_as<const float>()[i] -
                                                         fb.data_as<const float>()[i])));
  }
  return worst;
}

// Logits of every position of `ids` (I32), from a fresh cache.
inline Tensor run(const models::Model& model, const Tensor& ids) {
  models::KvCache cache = model.new_cache();
  return model.forward(std::span<const int32_t>(ids.data_as<const int32_t>(), ids.numel()), cache,
                       /*all_logits=*/true);
}

inline const models::Linear& module(const models::Model& model, const std::string& name) {
  const models::LayerWeights& layer = model.weights().layers[0];
  if (name == "model.layers.0.self_attn.q_proj") return layer.attention.q;
  if (name == "model.layers.0.self_attn.k_proj") return layer.attention.k;
  if (name == "model.layers.0.mlp.down_proj") return layer.mlp.down;
  if (name == "model.layers.0.mlp.gate_proj") return layer.mlp.gate;
  throw std::runtime_error("test does not know module " + name);
}

}  // namespace lowbit::golden
