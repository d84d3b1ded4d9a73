// lowbit's own W8A8 kernels (w8a8_internal.h): the scaling epilogue of the LT_EPILOGUE paths, the
// bias add, and the SIMT products that run any scale granularity.
//
// The SIMT products are plain 64x64-tile shared-memory GEMMs on CUDA cores (256 threads, 4x4
// outputs each, k in steps of 32): correct for every shape and alignment, far from the tensor
// cores' rate. They are the fallback, not the fast path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/w8a8_internal.h"

namespace lowbit::kernels::cuda::w8a8 {

namespace {

__device__ __forceinline__ float bf16_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, 132 * 16);
  return static_cast<unsigned>(std::max<int64_t>(blocks, 1));
}

// y[i][c] = bf16(acc · sx[i] · sw[c] (+ bias[c])), V consecutive columns per thread.
template <typename T, int V>
__global__ void __launch_bounds__(256)
    epilogue_kernel(const T* __restrict__ stage, int64_t rows, int64_t n, const float* __restrict__ sx,
                    const float* __restrict__ sw, const int32_t* __restrict__ colsum, int32_t zx,
                    const uint16_t* __restrict__ bias, uint16_t* __restrict__ y) {
  const int64_t total = rows * n / V;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = t * V, i = e / n, c = e % n;
    const float s = sx[i];
    T v[V];
    if constexpr (V == 4) {
      if constexpr (sizeof(T) == 4 && std::is_same_v<T, float>) {
        const float4 q = *reinterpret_cast<const float4*>(stage + e);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
        const int4 q = *reinterpret_cast<const int4*>(stage + e);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = stage[e + j];
    }
    uint16_t out[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float acc;
      if constexpr (std::is_same_v<T, float>) {
        acc = v[j];
      } else {
        acc = static_cast<float>(v[j] - zx * colsum[c + j]);  // exact in int32 (k <= 2^16)
      }
      float r = acc * s * sw[c + j];
      if (bias != nullptr) r += bf16_to_float(bias[c + j]);
      out[j] = float_to_bf16(r);
    }
    if constexpr (V == 4) {
      uint2 packed;
      packed.x = out[0] | (static_cast<uint32_t>(out[1]) << 16);
      packed.y = out[2] | (static_cast<uint32_t>(out[3]) << 16);
      *reinterpret_cast<uint2*>(y + e) = packed;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) y[e + j] = out[j];
    }
  }
}

template <typename T>
void launch_epilogue(const T* stage, int64_t rows, int64_t n, const float* sx, const float* sw,
                     const int32_t* colsum, int32_t zx, const uint16_t* bias, uint16_t* y,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const bool vec = n % 4 == 0 && aligned(stage, 16) && aligned(y, 8);
  const unsigned grid = grid_for(rows * n / (vec ? 4 : 1), 256);
  if (vec) {
    epilogue_kernel<T, 4><<<grid, 256, 0, stream>>>(stage, rows, n, sx, sw, colsum, zx, bias, y);
  } else {
    epilogue_kernel<T, 1><<<grid, 256, 0, stream>>>(stage, rows, n, sx, sw, colsum, zx, bias, y);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

__global__ void __launch_bounds__(256)
    add_bias_kernel(uint16_t* y, int64_t rows, int64_t n, const uint16_t* __restrict__ bias) {
  const int64_t total = rows * n;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    y[t] = float_to_bf16(bf16_to_float(y[t]) + bf16_to_float(bias[t % n]));
  }
}

constexpr int kTile = 64, kTileK = 32, kPad = 4;

__device__ __forceinline__ float e4m3_to_float(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

// Output tile: thread (ty, tx) of 16x16 owns rows ty*4.. and columns tx*4.. of the 64x64 tile.
// Loading: thread t fills 8 consecutive k of row t/4 of both tiles.
__global__ void __launch_bounds__(256) fp8_simt_kernel(Fp8SimtArgs a, const uint8_t* __restrict__ wq,
                                                       const float* __restrict__ wscale, int64_t n,
                                                       int64_t k, int64_t br, int64_t bc,
                                                       int64_t grid_cols) {
  __shared__ float xs[kTileK][kTile + kPad];
  __shared__ float ws[kTileK][kTile + kPad];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t m0 = int64_t(blockIdx.y) * kTile, n0 = int64_t(blockIdx.x) * kTile;
  const int lr = tid / 4, lk = (tid % 4) * 8;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    const int64_t i = m0 + lr, r = n0 + lr;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t c = k0 + lk + j;
      float xv = 0.0f, wv = 0.0f;
      if (i < a.m && c < k) xv = e4m3_to_float(a.qx[i * k + c]) * a.sx[(c / a.sx_group) * a.sx_ld + i];
      if (r < n && c < k) wv = e4m3_to_float(wq[r * k + c]) * wscale[(r / br) * grid_cols + c / bc];
      xs[lk + j][lr] = xv;
      ws[lk + j][lr] = wv;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      float xv[4], wv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        xv[u] = xs[kk][ty * 4 + u];
        wv[u] = ws[kk][tx * 4 + u];
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[u][v] = fmaf(xv[u], wv[v], acc[u][v]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int64_t i = m0 + ty * 4 + u;
    if (i >= a.m) continue;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int64_t r = n0 + tx * 4 + v;
      if (r >= n) continue;
      float out = acc[u][v];
      if (a.bias != nullptr) out += bf16_to_float(a.bias[r]);
      a.y[i * n + r] = float_to_bf16(out);
    }
  }
}

// Integer SIMT: exact int32 sums of (qx - zx) · (code - zero) over each run of k that lies in one
// weight group within one k tile (at most 32 terms of at most 255² each: exact in fp32 too),
// scaled by the group's scale into fp32 accumulators.
__global__ void __launch_bounds__(256) int_simt_kernel(IntSimtArgs a, const int8_t* __restrict__ wq,
                                                       const float* __restrict__ wscale,
                                                       const int8_t* __restrict__ wzero, int64_t n,
                                                       int64_t k, int64_t group, int64_t groups) {
  __shared__ int xs[kTileK][kTile + kPad];
  __shared__ int ws[kTileK][kTile + kPad];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t m0 = int64_t(blockIdx.y) * kTile, n0 = int64_t(blockIdx.x) * kTile;
  const int lr = tid / 4, lk = (tid % 4) * 8;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    const int64_t i = m0 + lr, r = n0 + lr;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t c = k0 + lk + j;
      int xv = 0, wv = 0;
      if (i < a.m && c < k) xv = int(a.qx[i * k + c]) - a.zx;
      if (r < n && c < k) {
        wv = wq[r * k + c];
        if (wzero != nullptr) wv -= wzero[r * groups + c / group];
      }
      xs[lk + j][lr] = xv;
      ws[lk + j][lr] = wv;
    }
    __syncthreads();
    const int kend = k - k0 < kTileK ? static_cast<int>(k - k0) : kTileK;
    for (int kk = 0; kk < kend;) {
      const int64_t g = (k0 + kk) / group;
      const int64_t group_end = (g + 1) * group - k0;
      const int run_end = group_end < kend ? static_cast<int>(group_end) : kend;
      int isum[4][4] = {};
      for (; kk < run_end; ++kk) {
        int xv[4], wv[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          xv[u] = xs[kk][ty * 4 + u];
          wv[u] = ws[kk][tx * 4 + u];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int v = 0; v < 4; ++v) isum[u][v] += xv[u] * wv[v];
        }
      }
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int64_t r = n0 + tx * 4 + v;
        const float s = r < n ? wscale[r * groups + g] : 0.0f;
#pragma unroll
        for (int u = 0; u < 4; ++u) acc[u][v] = fmaf(s, static_cast<float>(isum[u][v]), acc[u][v]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int64_t i = m0 + ty * 4 + u;
    if (i >= a.m) continue;
    const float s = a.sx[i];
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int64_t r = n0 + tx * 4 + v;
      if (r >= n) continue;
      float out = s * acc[u][v];
      if (a.bias != nullptr) out += bf16_to_float(a.bias[r]);
      a.y[i * n + r] = float_to_bf16(out);
    }
  }
}

dim3 simt_grid(int64_t m, int64_t n) {
  return dim3(static_cast<unsigned>((n + kTile - 1) / kTile),
              static_cast<unsigned>((m + kTile - 1) / kTile));
}

}  // namespace

void launch_epilogue_f32(const float* stage, int64_t rows, int64_t n, const float* sx,
                         const float* sw, const uint16_t* bias, uint16_t* y, cudaStream_t stream) {
  launch_epilogue<float>(stage, rows, n, sx, sw, nullptr, 0, bias, y, stream);
}

void launch_epilogue_i32(const int32_t* stage, int64_t rows, int64_t n, const float* sx,
                         const float* sw, const int32_t* colsum, int32_t zx, const uint16_t* bias,
                         uint16_t* y, cudaStream_t stream) {
  launch_epilogue<int32_t>(stage, rows, n, sx, sw, colsum, zx, bias, y, stream);
}

void launch_add_bias(uint16_t* y, int64_t rows, int64_t n, const uint16_t* bias,
                     cudaStream_t stream) {
  if (rows == 0) return;
  add_bias_kernel<<<grid_for(rows * n, 256), 256, 0, stream>>>(y, rows, n, bias);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_fp8_simt(const Fp8SimtArgs& a, cudaStream_t stream) {
  const W8a8GpuWeights::Impl& w = *a.w;
  LOWBIT_CHECK_AS(Internal, a.m < int64_t(65535) * kTile, "fp8 SIMT: m too large for the grid");
  fp8_simt_kernel<<<simt_grid(a.m, w.n), 256, 0, stream>>>(
      a, w.codes.data(), w.scale_grid.data(), w.n, w.k, w.block_rows, w.block_cols, w.grid_cols);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_int_simt(const IntSimtArgs& a, cudaStream_t stream) {
  const W8a8GpuWeights::Impl& w = *a.w;
  LOWBIT_CHECK_AS(Internal, a.m < int64_t(65535) * kTile, "int SIMT: m too large for the grid");
  int_simt_kernel<<<simt_grid(a.m, w.n), 256, 0, stream>>>(
      a, reinterpret_cast<const int8_t*>(w.codes.data()), w.int_scales.data(),
      w.int_zeros.size() > 0 ? w.int_zeros.data() : nullptr, w.n, w.k, w.group_size, w.groups);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::kernels::cuda::w8a8
