// GPTQ's calibration forward on one GPU (`lowbit quantize --device cuda`): the CalibrationBackend
// of quant/pipeline/calibration_backend.h over the CUDA kernels of the GPU model.
//
// The hidden states of every calibration sample stay on the GPU in bf16, [tokens, hidden] sample
// after sample. llm-compressor runs the model in bf16 on the GPU, so bf16 activations are the
// reference behaviour here (the CPU pipeline carries fp32 states: results agree to bf16 rounding,
// not bit for bit). Each calibrate() / propagate() uploads ONE decoder layer from the
// models::Model as it holds it now (dense weights as bf16; after GPTQ the fake-quantized values
// the pipeline stored) and runs the layer's math over the samples in chunks of whole samples
// (at most chunk_tokens tokens, or one longer sample): RMSNorm, q/k/v (+ biases), q/k norms, RoPE,
// causal attention over each whole sample, o, residual, post norm, gate/up, SiLU·mul, down,
// residual. Linears with dynamic input quantization (W8A8, FP8_DYNAMIC, W4A8 ...) fake-quantize
// their bf16 input per token (or group) first, as models::Linear does on the CPU. The Hessians of
// the requested inputs are accumulated on the device (DeviceHessian); activations never come back
// to the host.
//
// Constructing a backend touches no device; begin() does (the factory checks the device first).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quant/pipeline/calibration_backend.h"

namespace lowbit::quant::gpu {

class CudaCalibrationBackend : public quant::CalibrationBackend {
 public:
  // 32k tokens of the Llama-3.1-8B shape need about 5 GiB of scratch beside the states, and keep
  // every GEMM large enough (m = 32k) to run near the tensor cores' peak.
  static constexpr int64_t kDefaultChunkTokens = 32768;

  explicit CudaCalibrationBackend(int device, int64_t chunk_tokens = kDefaultChunkTokens);
  ~CudaCalibrationBackend() override;
  CudaCalibrationBackend(const CudaCalibrationBackend&) = delete;
  CudaCalibrationBackend& operator=(const CudaCalibrationBackend&) = delete;

  std::string name() const override;
  std::string unsupported(const models::Model& model, const OneshotPlan& plan) const override;
  void begin(const models::Model& model, const CalibrationSet& samples) override;
  void calibrate(int layer, const std::vector<LinearRole>& inputs) override;
  GptqResult gptq(std::vector<float>& w, int64_t rows, int64_t cols, LinearRole input,
                  const QuantArgs& args, const GptqOptions& options, DType compute) override;
  // The bf16 fast path (bf16 weight and compute dtype): the weight moves as bf16, the observer
  // runs on a reused host fp32 copy, and the result also replaces the uploaded layer's copy on the
  // device, so propagate() uploads nothing for it. Other dtypes take the default.
  GptqResult gptq_linear(models::Linear& linear, LinearRole input, const QuantArgs& args,
                         const GptqOptions& options, DType compute) override;
  // Logs one line per layer at info level: the layer's time split (uploads, calibrate forward and
  // its Hessians and attention, GPTQ host set-up / device / weight copies, propagate).
  void propagate(int layer) override;
  double forward_seconds() const override;
  double hessian_seconds() const override;

  // For tests: sample `index`'s hidden states at the current layer boundary ([len, hidden], the
  // bf16 values as fp32), and the Hessian kept for `input` by the last calibrate() ([cols, cols]).
  std::vector<float> download_states(size_t index) const;
  std::vector<float> download_hessian(LinearRole input) const;

  // For MultiGpuCalibrationBackend (multi_gpu_calibration.h), which runs one of these per GPU over
  // its share of the samples and sums their Hessians into the first one's.
  //
  // The GPU this backend runs on.
  int device() const;
  // The Hessian of `input` kept by the last calibrate(): H = 2/samples · Σ x xᵀ over this
  // backend's samples, fp32 [cols, cols] row-major on device(), finalized and with the backend's
  // stream synchronized. gptq() and gptq_linear() read this very buffer until the next
  // calibrate(), so a reduction may overwrite it in place with the Hessian over every GPU's
  // samples. Internal when the last calibrate() did not collect `input`.
  struct KeptHessian {
    float* data = nullptr;
    int64_t cols = 0;
    int64_t samples = 0;
  };
  KeptHessian kept_hessian(LinearRole input);
  // Makes the next calibrate() / propagate() upload `linear`'s weight again even if its tensor
  // still starts where it did at the last upload: another backend's GPTQ replaced the weight, and
  // this backend's copy must not depend on the replacement getting a new address.
  void forget_upload(const models::Linear& linear);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A CUDA backend on GPU `device` (Unsupported "--device cuda: no CUDA device ..." when there is
// none, InvalidArgument when `device` does not exist).
std::unique_ptr<quant::CalibrationBackend> make_cuda_calibration_backend(int device);

}  // namespace lowbit::quant::gpu
