// CUDA, cuBLAS and cuBLASLt failures as lowbit exceptions that name the call and its site, so a
// failing kernel launch reads "src/kernels/cuda/gemm.cu:88: cublasLtMatmul(...): ..." instead of an
// abort. Out-of-memory becomes lowbit::OutOfMemory (the caller can say which buffer); everything
// else is lowbit::Internal (a bug or a broken device, never the user's input).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  // Reset the runtime's "last error" (non-sticky errors such as a refused cudaMalloc stay there
  // otherwise), so that a caught failure is not reported again by the next launch check.
  cudaGetLastError();
  std::string message = std::string(file) + ":" + std::to_string(line) + ": " + call + ": " +
                        cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory("CUDA: " + message);
  throw Internal("CUDA: " + message);
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call,
                                            const char* file, int line) {
  std::string message = std::string(file) + ":" + std::to_string(line) + ": " + call +
                        ": cuBLAS status " + std::to_string(static_cast<int>(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(message);
  throw Internal(message);
}

}  // namespace lowbit::kernels::cuda

#define LOWBIT_CUDA_CHECK(call)                                                            \
  do {                                                                                     \
    const cudaError_t lowbit_cuda_status_ = (call);                                        \
    if (lowbit_cuda_status_ != cudaSuccess) {                                              \
      ::lowbit::kernels::cuda::throw_cuda_error(lowbit_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

// After a kernel launch: reports a bad launch configuration at the launch site.
#define LOWBIT_CUDA_CHECK_LAUNCH() LOWBIT_CUDA_CHECK(cudaGetLastError())

#define LOWBIT_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    const cublasStatus_t lowbit_cublas_status_ = (call);                                     \
    if (lowbit_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                    \
      ::lowbit::kernels::cuda::throw_cublas_error(lowbit_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)
