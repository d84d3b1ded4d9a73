// Comparing rows of logits against a reference with the GPU tests' tolerances (gpu_model_test.cc's
// header comment justifies them). Header-only, for tests/unit/gpu.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace lowbit::gpu {

constexpr double kRelativeTolerance = 0.03;  // of max |reference logit| (header comment)
constexpr float kMarginForArgmax = 0.3f;     // reference top-2 margin above which argmax must agree

// Compares `rows` rows of logits against a reference; empty on success, else what differs.
// `margin`: the reference top-2 margin from which the argmax must agree.
inline std::string compare_rows(const float* ours, const float* ref, int64_t rows, int64_t vocab,
                                double tolerance = kRelativeTolerance,
                                float margin = kMarginForArgmax) {
  float max_abs = 0.0f, max_diff = 0.0f;
  for (int64_t i = 0; i < rows * vocab; ++i) {
    max_abs = std::max(max_abs, std::fabs(ref[i]));
    max_diff = std::max(max_diff, std::fabs(ours[i] - ref[i]));
  }
  if (!(max_diff <= tolerance * max_abs)) {
    return "max |diff| " + std::to_string(max_diff) + " > " + std::to_string(tolerance) +
           " * max |logit| " + std::to_string(max_abs);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* o = ours + r * vocab;
    const float* g = ref + r * vocab;
    const int64_t a = std::max_element(o, o + vocab) - o;
    const int64_t b = std::max_element(g, g + vocab) - g;
    if (a != b && g[b] - g[a] >= margin) {
      return "argmax differs at row " + std::to_string(r) + ": ours " + std::to_string(a) +
             ", reference " + std::to_string(b) + " with a margin of " + std::to_string(g[b] - g[a]);
    }
  }
  return "";
}

}  // namespace lowbit::gpu
