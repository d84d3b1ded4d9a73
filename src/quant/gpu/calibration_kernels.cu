#include "quant/gpu/calibration_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::quant::gpu {

namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// round_code: nearbyint (half to even) for integers, e4m3 round-to-nearest-even for fp8 (the
// value is already clamped to ±448, so saturation never changes it).
__device__ __forceinline__ float round_code(float y, bool is_float) {
  if (!is_float) return rintf(y);
  return static_cast<float>(__nv_fp8_e4m3(y));
}

// One block per (row, group): min and max of the slot (NaNs ignored, as std::min / std::max from
// ±inf do on the CPU), the slot's scale and zero point (slot_qparams with fp32 compute and no
// scale dtype), then each value's quantize → dequantize.
__global__ void fake_quant_kernel(const uint16_t* __restrict__ x, int64_t cols, ActFakeQuant q,
                                  uint16_t* __restrict__ y) {
  const int64_t row = blockIdx.x;
  const int64_t begin = row * cols + static_cast<int64_t>(blockIdx.y) * q.group;
  const uint16_t* in = x + begin;
  uint16_t* out = y + begin;
  float mn = INFINITY, mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < q.group; i += blockDim.x) {
    const float v = bf16_bits_to_f32(in[i]);
    mn = fminf(mn, v);
    mx = fmaxf(mx, v);
  }
  for (int off = kWarp / 2; off > 0; off /= 2) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, off));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  }
  __shared__ float smin[32], smax[32];
  __shared__ float slot_scale, slot_zero;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane == 0) {
    smin[warp] = mn;
    smax[warp] = mx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = static_cast<int>(blockDim.x) / kWarp;
    for (int w = 1; w < warps; ++w) {
      mn = fminf(mn, smin[w]);
      mx = fmaxf(mx, smax[w]);
    }
    mn = fminf(mn, 0.0f);  // the range always includes 0
    mx = fmaxf(mx, 0.0f);
    float scale, zero = 0.0f;
    if (q.symmetric) {
      scale = __fdiv_rn(fmaxf(fabsf(mn), fabsf(mx)), q.bit_range / 2.0f);
    } else {
      scale = __fdiv_rn(__fsub_rn(mx, mn), q.bit_range);
      zero = __fsub_rn(q.qmin, __fdiv_rn(mn, scale));
      if (!isnan(zero)) zero = fminf(fmaxf(zero, q.qmin), q.qmax);
    }
    if (scale == 0.0f) scale = FLT_EPSILON;
    // The zero point's int8 dtype: NaN → 0, else clamped and rounded half to even (+0.0: no -0).
    if (!q.symmetric) zero = isnan(zero) ? 0.0f : rintf(fminf(fmaxf(zero, -128.0f), 127.0f)) + 0.0f;
    slot_scale = scale;
    slot_zero = zero;
  }
  __syncthreads();
  const float scale = slot_scale, zero = slot_zero;
  for (int64_t i = threadIdx.x; i < q.group; i += blockDim.x) {
    float v = __fdiv_rn(bf16_bits_to_f32(in[i]), scale);
    if (zero != 0.0f) v = __fadd_rn(v, zero);
    if (!isnan(v)) v = fminf(fmaxf(v, q.qmin), q.qmax);
    v = round_code(v, q.is_float);
    if (zero != 0.0f) v = __fsub_rn(v, zero);
    out[i] = f32_to_bf16_bits(__fmul_rn(v, scale));
  }
}

}  // namespace

void fake_quantize_activations_bf16(const uint16_t* x, int64_t rows, int64_t cols,
                                    const ActFakeQuant& q, uint16_t* y, cudaStream_t stream) {
  LOWBIT_CHECK(q.group > 0 && cols % q.group == 0,
               "fake_quantize_activations_bf16: activation width " + std::to_string(cols) +
                   " is not divisible by group_size " + std::to_string(q.group));
  LOWBIT_CHECK(rows < (int64_t{1} << 31) && cols / q.group < 65536,
               "fake_quantize_activations_bf16: too many rows or groups per row");
  if (rows == 0) return;
  const int threads = q.group <= 128 ? 128 : 256;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(cols / q.group));
  fake_quant_kernel<<<grid, threads, 0, stream>>>(x, cols, q, y);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::quant::gpu
