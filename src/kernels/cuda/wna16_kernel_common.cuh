// What the GPU weight-only GEMM kernels (wna16_stream.cu, wna16_block.cu) share: their launch
// parameters, and the cp.async copies into a ring of shared-memory stages with the loads from it at
// explicit shared addresses. sm_80+.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace lowbit::kernels::cuda::detail
