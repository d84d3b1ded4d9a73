// The one kernel of the multi-GPU calibration (multi_gpu_calibration.cc): the weighted sum that
// folds another GPU's Hessian into the first GPU's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::quant::gpu {

// y[i] = a·y[i] + b·x[i] for i < n, in double with one rounding to fp32 per element (so the
// weights n_i / n, given exactly as doubles, add no error of their own). y and x: fp32 device
// memory on the current device (x may be y). Queued on `stream`.
void scale_add_f32(float* y, double a, const float* x, double b, int64_t n, cudaStream_t stream);

}  // namespace lowbit::quant::gpu
