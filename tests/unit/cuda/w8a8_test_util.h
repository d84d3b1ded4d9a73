// Shared by the W8A8 GPU tests (w8a8_act_quant_test.cc, w8a8_gemm_test.cc): random inputs, device
// round trips, and the CPU definition of fp8 activation quantization the GPU must reproduce.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/w8a8_gemm.h"

namespace lowbit::kernels::cuda::testing {

struct Rng {  // splitmix64
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
};

// bf16 activations [m, k] with a different magnitude per row (per-token scales must differ), a
// few outliers (absmax and clamping), and optionally one all-zero row (the FLT_EPSILON scale).
inline std::vector<uint16_t> random_x(int64_t m, int64_t k, Rng& rng, bool zero_row = false) {
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float mag = rng.uniform(0.05f, 8.0f);
    for (int64_t c = 0; c < k; ++c) {
      float v = rng.uniform(-mag, mag);
      if (rng.next() % 97 == 0) v *= 12.0f;
      x[static_cast<size_t>(i * k + c)] = f32_to_bf16(v);
    }
  }
  if (zero_row && m > 1) std::fill_n(x.begin() + (m / 2) * k, k, uint16_t{0});
  return x;
}

inline std::vector<float> to_f32(const std::vector<uint16_t>& bf16) {
  std::vector<float> out(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) out[i] = bf16_to_f32(bf16[i]);
  return out;
}

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  return DeviceBuffer<T>(std::span<const T>(host));
}

inline int device_cc() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  for (const DeviceInfo& d : list_devices()) {
    if (d.index == device) return d.compute_capability;
  }
  return 0;
}

// The fp8 activation quantization of the CPU path (quant/methods/kernel_linear.cc, FORMATS.md
// §2.3): per slot scale = absmax / 448 (FLT_EPSILON when 0), code = e4m3(clamp(x / scale, ±448)).
// scales: one per (row, slot), [m, slots] (slots = 1 for per-row schemes, k / group for groups).
struct Fp8Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  int64_t slots = 1;
  float scale(int64_t i, int64_t c, int64_t k) const {
    return scales[static_cast<size_t>(i * slots + c / (k / slots))];
  }
};

inline uint8_t fp8_code(float x, float scale) {
  float v = x / scale;
  if (!std::isnan(v)) v = std::clamp(v, -448.0f, 448.0f);
  return f32_to_fp8_e4m3(v);
}

inline Fp8Quantized fp8_quantize_ref(const std::vector<float>& x, int64_t m, int64_t k,
                                     const Fp8Activations& act) {
  Fp8Quantized q;
  q.codes.resize(x.size());
  q.slots = act.scheme == Fp8ActScheme::PER_GROUP ? k / act.group_size : 1;
  const int64_t span = k / q.slots;
  auto scale_of = [](float absmax) {
    const float s = absmax / 448.0f;
    return s == 0.0f ? FLT_EPSILON : s;
  };
  float tensor_amax = 0.0f;
  for (float v : x) tensor_amax = std::max(tensor_amax, std::fabs(v));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t s = 0; s < q.slots; ++s) {
      const float* v = x.data() + i * k + s * span;
      float scale = act.static_scale;
      if (act.scheme == Fp8ActScheme::PER_TENSOR_DYNAMIC) {
        scale = scale_of(tensor_amax);
      } else if (act.scheme != Fp8ActScheme::PER_TENSOR_STATIC) {
        float amax = 0.0f;
        for (int64_t c = 0; c < span; ++c) amax = std::max(amax, std::fabs(v[c]));
        scale = scale_of(amax);
      }
      q.scales.push_back(scale);
      for (int64_t c = 0; c < span; ++c) {
        q.codes[static_cast<size_t>(i * k + s * span + c)] = fp8_code(v[c], scale);
      }
    }
  }
  return q;
}

}  // namespace lowbit::kernels::cuda::testing
