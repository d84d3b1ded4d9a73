// Programmatic dependent launch (PDL, sm_90+): the kernels of a decode step are short (2-60 us)
// and each used to wait for the previous one to drain completely before its first CTA started,
// then ramp up its own memory traffic: about a microsecond lost per kernel, ~10 kernels per layer.
// With PDL a kernel launched by launch_pdl() may start while the previous kernel on the stream
// still runs: its CTAs do what does not depend on that kernel (prefetching weights) and then call
// pdl_wait(), which returns once the previous grid has completed and its writes are visible.
//
// Rules for a kernel launched with launch_pdl():
//   - call pdl_wait() before its first read of anything an earlier kernel wrote and before its
//     first global write (an earlier kernel may still read the buffer it overwrites);
//   - call pdl_launch_dependents() when the next kernel's CTAs may take SM slots: they are
//     scheduled once every CTA of this one has called it or exited. Small kernels call it right
//     after pdl_wait() (pdl_begin()); the GEMVs at the end of their main loop (gemv_bf16.cu says
//     why).
// A kernel that does not follow the rules must be launched with <<< >>>, which keeps the full
// serialization. Both instructions are no-ops when the kernel was not launched with PDL, and on
// GPUs before sm_90 they compile to nothing.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace lowbit::kernels::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

// Both, in the order the rules above ask for.
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_launch_dependents();
}

// Starts pulling a read-only line into L2 (the weights a kernel streams do not depend on the
// previous kernel, so it may fetch them before pdl_wait()).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Whether launches on the current device use PDL: compute capability >= 9.0 and LOWBIT_GPU_PDL
// is not "0" (the switch for A/B runs). Cached per device.
bool pdl_enabled();

// kernel<<<grid, block, smem, stream>>>(args...) as a grid of thread block clusters of `cluster`
// blocks each (sm_90+; {1, 1, 1}: plain blocks), with the PDL attribute where pdl_enabled().
template <typename... Params, typename... Args>
void launch_pdl_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster,
                         size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attribute[n].id = cudaLaunchAttributeClusterDimension;
    attribute[n].val.clusterDim.x = cluster.x;
    attribute[n].val.clusterDim.y = cluster.y;
    attribute[n++].val.clusterDim.z = cluster.z;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = n;
  LOWBIT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute where pdl_enabled().
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_clusters(kernel, grid, block, dim3(1, 1, 1), smem, stream,
                      std::forward<Args>(args)...);
}

}  // namespace lowbit::kernels::cuda
