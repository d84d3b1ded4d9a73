// A linear layer y = x·Wᵀ (+ b) whose weight stays in its stored dtype (a zero-copy view of the
// checkpoint) and whose bias, if any, was converted to fp32 once at load.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "lowbit/tensor.h"

namespace lowbit::models {

struct Linear {
  Tensor weight;            // [out_features, in_features], F32 / F16 / BF16
  std::vector<float> bias;  // out_features values, or empty

  int64_t in_features() const { return weight.dim(1); }
  int64_t out_features() const { return weight.dim(0); }

  // x: [rows, in_features] → y: [rows, out_features].
  void apply(const float* x, int64_t rows, float* y) const {
    kernels::matmul(x, rows, weight.dim(1), weight, bias.empty() ? nullptr : bias.data(), y);
  }
};

}  // namespace lowbit::models
