// What the GPU weight-only GEMM kernels (wna16_stream.cu, wna16_block.cu) share: their launch
// parameters, the cp.async copies into a ring of shared-memory stages with the loads from it at
// explicit shared addresses, and the multiplication of one staged chunk (Wna16ChunkMultiplier).
// sm_80+.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/wna16_device.cuh"
#include "kernels/cuda/wna16_internal.h"

namespace lowbit::kernels::cuda::detail {

struct Wna16KernelParams {
  const uint4* codes = nullptr;
  const float2* scales = nullptr;
  const uint32_t* zeros = nullptr;  // byte pairs (rows r0, r1) read as aligned words; null: symmetric
  const uint16_t* x = nullptr;      // [m, ldx] bf16 in packed column order
  int64_t ldx = 0;
  int m = 0;
  const uint16_t* bias = nullptr;
  uint16_t* y = nullptr;  // [m, n]
  // Instead of bias / y: fp32 bias and fp32 output, unrounded (the LM head's logits).
  const float* bias_f32 = nullptr;
  float* y_f32 = nullptr;
  int64_t n = 0;
  int64_t tiles = 0;
  int chunks = 0;
  int64_t padded_groups = 0;
  int chunks_per_group = 1;  // GPC == 1: a group spans this many chunks
  uint32_t zero_pair = 0;    // symmetric zero point of both rows, as a byte pair
};

// The parameters of a launch on rows [0, m) of x (wna16_stream.cu).
Wna16KernelParams wna16_kernel_params(const uint16_t* x, int64_t ldx, int64_t m,
                                      const Wna16GpuWeights& w, const uint16_t* bias, uint16_t* y,
                                      const float* bias_f32, float* y_f32);

// The block kernel (wna16_block.cu) on kWna16StreamKernelRows < p.m <= kWna16StreamMaxRows rows;
// split_override > 0 forces the shares of k (the benchmark's sweep).
void launch_wna16_block(const Wna16KernelParams& p, const Wna16GpuLayout& layout, int split_override,
                        cudaStream_t stream);

__device__ __forceinline__ void cp_async_cg16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_ca16(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_ca8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_ca4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Shared-memory loads at explicit addresses. Each lane's ring addresses are computed once and kept
// opaque (the compiler otherwise recomputes them from the thread index in every chunk: ~25
// instructions per chunk, a fifth of the loop).
__device__ __forceinline__ uint32_t opaque(uint32_t v) {
  asm volatile("" : "+r"(v));
  return v;
}
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// One warp's arithmetic on its R tiles (16 output rows each) and MT fragments of 8 x rows: the
// products (q - z)·x of a staged 64-column chunk on mma.sync into fp32 partial sums (`part`), and
// per group acc += scale · part. Both kernels stage a chunk alike (codes [R·V][32 lanes] uint4 at
// code_s, scales [R·GPC][8 row pairs] float2 at scale_s, zero-point words [R·GPC][4] at zero_s, x
// fragments of step s at xrd_s[s] + 1024·mt); only how the stage gets filled differs.
//   BITS: 4 or 8 (V = BITS / 4 uint4 of codes per lane and tile); GPC: groups per chunk (1 when a
//   group spans chunks_per_group chunks, else 64 / group_size); SPG = 4 / GPC steps per group.
template <int BITS, int R, int MT, int GPC>
struct Wna16ChunkMultiplier {
  static constexpr int V = BITS / 4, SPG = 4 / GPC;
  float acc[R][MT][4], part[R][MT][4];
  uint32_t nz[R][GPC][2];  // zero-point constants (rows r0, r1); fixed when symmetric

  __device__ __forceinline__ explicit Wna16ChunkMultiplier(uint32_t zero_pair) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[r][mt][i] = part[r][mt][i] = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < GPC; ++j) neg_zeros<BITS>(zero_pair, nz[r][j][0], nz[r][j][1]);
  }

  // acc += scale · part for tile r (scale.x: row r0, scale.y: row r1), then part = 0.
  __device__ __forceinline__ void flush(int r, float2 scale) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[r][mt][i] = fmaf(i < 2 ? scale.x : scale.y, part[r][mt][i], acc[r][mt][i]);
        part[r][mt][i] = 0.0f;
      }
    }
  }

  // Multiplies the chunk held at stage offset st. group_ends (GPC == 1 only): the chunk is the
  // last of its group (or of the warp's share), so the partial sums are scaled into acc.
  __device__ __forceinline__ void consume(uint32_t st, uint32_t code_s, uint32_t scale_s,
                                          uint32_t zero_s, int zero_shift, bool has_zeros,
                                          const uint32_t (&xrd_s)[4], bool group_ends) {
    uint4 cw[R][V];
    float2 sc[R][GPC];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int v = 0; v < V; ++v) cw[r][v] = lds128(code_s + st + (r * V + v) * 512);
#pragma unroll
      for (int j = 0; j < GPC; ++j) {
        const uint2 sv = lds64(scale_s + st + (r * GPC + j) * 64);
        sc[r][j] = make_float2(__uint_as_float(sv.x), __uint_as_float(sv.y));
        if (has_zeros) {
          const uint32_t word = lds32(zero_s + st + (r * GPC + j) * 16);
          neg_zeros<BITS>((word >> zero_shift) & 0xFFFFu, nz[r][j][0], nz[r][j][1]);
        }
      }
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t xb[MT][2];  // B fragments of step s (zero for rows >= m)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint2 v = lds64(xrd_s[s] + st + mt * 1024);
        xb[mt][0] = v.x;
        xb[mt][1] = v.y;
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        uint32_t a[4];
        dequant_step<BITS>(cw[r], s, nz[r][s / SPG][0], nz[r][s / SPG][1], a);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_bf16(part[r][mt], a, xb[mt][0], xb[mt][1]);
        if (GPC > 1 && s % SPG == SPG - 1) flush(r, sc[r][s / SPG]);
      }
    }
    if constexpr (GPC == 1) {
      if (group_ends) {
#pragma unroll
        for (int r = 0; r < R; ++r) flush(r, sc[r][0]);
      }
    }
  }
};

}  // namespace lowbit::kernels::cuda::detail
