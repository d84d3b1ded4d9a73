// GPTQ on the GPU (`lowbit quantize --device cuda`): the Hessian accumulated from device activations
// on the tensor cores, and gptq_quantize's whole contract with the factorization and the column
// loop on the device. The host keeps what must be bit-identical to the CPU path and is cheap: the
// checks, activation order, the observer's qparams (quant/algos/gptq_setup.h, the very code
// gptq_quantize runs) and the damping's mean diagonal.
//
// Resources: DeviceHessian owns its matrices and a cuBLAS handle. gptq_quantize_cuda allocates its
// scratch stream-ordered (cudaMallocAsync: H in double, U, the weight, the errors; for an 8B
// down_proj, cols = 14336, about 3 GB) and frees it before returning; the cuBLAS and cuSOLVER
// handles it uses are created once per (host thread, device) and kept for the process's life, and
// the device's default memory pool keeps freed scratch for the next call (release threshold max).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "lowbit/dtype.h"
#include "quant/algos/gptq.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant::gpu {

// Σ x xᵀ of bf16 activation rows on the tensor cores (bf16 products are exact in fp32; each GEMM
// sums in fp32), counting sequences like HessianAccumulator. Only the lower triangle is computed
// (row stripes, about half the FLOPs of the full product) and mirrored when finalized. Every
// kFlushTokens tokens the fp32 sums are added into a double accumulator, so that the rounding
// error does not grow with the amount of calibration data (HessianAccumulator does the same with
// chunks of 512 tokens).
class DeviceHessian {
 public:
  static constexpr int64_t kFlushTokens = 65536;

  // Allocates cols² fp32 on the current device (zeroed); all work is queued on `stream`.
  DeviceHessian(int64_t cols, cudaStream_t stream);
  ~DeviceHessian();
  DeviceHessian(const DeviceHessian&) = delete;
  DeviceHessian& operator=(const DeviceHessian&) = delete;

  // x: device bf16 (uint16_t bits) [tokens, cols], rows `ld` elements apart (ld >= cols: x may be
  // a column slice of a wider activation). `sequences`: how many sequences those tokens are.
  void add(const uint16_t* x, int64_t tokens, int64_t ld, int64_t sequences);
  int64_t cols() const;
  int64_t sequences() const;
  // H = 2/sequences · Σ x xᵀ, fp32 [cols, cols] on the device, the full symmetric matrix. Computed
  // on the first call after an add() (queued on the stream; later calls return the same buffer).
  // Throws InvalidArgument when no sequence was added.
  const float* hessian();
  // The same matrix on the host (synchronizes the stream).
  std::vector<float> download();
  // Back to zero for the next layer, keeping the allocations.
  void reset();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// gptq_quantize's exact contract — the same checks and exceptions, activation order, static
// groups and g_idx, dead columns, relative damping with its ×10 retries and warnings, the same
// loss and the final rounding to `compute` — with the Hessian on the device (read, not modified):
// `device_hessian` is fp32 [cols, cols] as DeviceHessian::hessian() gives it. The factorization
// runs in double (cuSOLVER potrf + trtri), the column loop in fp32 on the device with the same
// per-element operations as the CPU's; only the lazy block update (an fp32 cuBLAS GEMM, TF32 off)
// sums in another order, which can move a value sitting on a rounding tie to the next grid point.
// w: host fp32 [rows, cols], replaced by the fake-quantized weight. Synchronizes `stream`.
// times: where the call spent its time, added to (null: not measured). host: the set-up on the
// host (checks, H's diagonal, activation order, the observer); copies: the weight's upload and
// download (CUDA events); device: the rest of the wall time (factorization, column loop).
struct GptqTimes {
  double host = 0.0, device = 0.0, copies = 0.0;
  int calls = 0;
};

GptqResult gptq_quantize_cuda(std::vector<float>& w, int64_t rows, int64_t cols,
                              const float* device_hessian, const QuantArgs& args,
                              const GptqOptions& options, DType compute, cudaStream_t stream,
                              GptqTimes* times = nullptr);

// gptq_quantize_cuda with compute = BF16 on a bf16 weight, moving half the bytes and converting on
// the device: w_bf16 (host bits [rows, cols]) is uploaded as is and widened on the device (exact);
// the result comes back as bf16 bits in out_bf16 (host, [rows, cols]; may not alias w_bf16):
// exactly f32_to_bf16 of gptq_quantize_cuda's fp32 result, i.e. what set_weight stores. w_f32 is
// the weight as fp32 on the host for the observer (the caller's buffer, read only). out_device, if
// not null, also receives the result bits on the device (bf16 [rows, cols]), queued on `stream`.
GptqResult gptq_quantize_cuda_bf16(const uint16_t* w_bf16, const std::vector<float>& w_f32,
                                   uint16_t* out_bf16, uint16_t* out_device, int64_t rows,
                                   int64_t cols, const float* device_hessian, const QuantArgs& args,
                                   const GptqOptions& options, cudaStream_t stream,
                                   GptqTimes* times = nullptr);

// bf16 bits → fp32 on the host with every core (bf16_to_f32 of each value; `out` resized).
void widen_bf16(const uint16_t* bits, size_t count, std::vector<float>& out);

}  // namespace lowbit::quant::gpu
