// The weight load of the streaming GEMVs (gemv_bf16.cu, gemv_fp8.cu): 16 bytes of a weight that
// is read once per call. Skip L1 (nothing reuses it) and let L2 fetch the whole 256-byte segment:
// its other parts are the next chunks of the same row, which the neighbouring warps ask for next.
#pragma once

#include <cstdint>

namespace lowbit::kernels::cuda {

__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

}  // namespace lowbit::kernels::cuda
