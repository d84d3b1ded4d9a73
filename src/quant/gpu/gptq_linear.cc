// CudaCalibrationBackend::gptq_linear: GPTQ of a bf16 Linear without the host's fp32 round trip.
//
// The default path (CalibrationBackend::gptq_linear) costs, for an 8B gate/up/down weight (58.7M
// values), single-threaded: weight_to_f32 (two fp32 copies, ~0.1 s), a 235 MB pageable upload and
// download (~0.05 s), set_weight's fp32 → bf16 rounding (~0.15 s). Here the bf16 bits travel (half
// the bytes) and are widened / rounded on the device; the observer's fp32 copy is made on every
// core into a buffer kept across calls (~10 ms); the result lands in the new tensor as bf16 bits
// and, device to device, in the uploaded layer, so propagate() does not upload it again.
#include <chrono>
#include <cstring>

#include "core/float_convert.h"
#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"
#include "quant/gpu/calibration_impl.h"

namespace lowbit::quant::gpu {

void widen_bf16(const uint16_t* bits, size_t count, std::vector<float>& out) {
  out.resize(count);
  const auto n = static_cast<int64_t>(count);
  float* dst = out.data();
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(bits[i]);
}

namespace {

// The uploaded layer's copy of `linear`, if it is one of the current layer's Linears.
DeviceLinear* uploaded(DeviceLayer& layer, const models::Linear& linear) {
  for (DeviceLinear* d : {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up,
                          &layer.down}) {
    if (d->source == &linear) return d;
  }
  return nullptr;
}

}  // namespace

GptqResult CudaCalibrationBackend::gptq_linear(models::Linear& linear, LinearRole input,
                                               const QuantArgs& args, const GptqOptions& options,
                                               DType compute) {
  Impl& im = *impl_;
  if (compute != DType::BF16 || linear.weight.dtype() != DType::BF16 || linear.method) {
    return CalibrationBackend::gptq_linear(linear, input, args, options, compute);
  }
  auto it = im.hessians.find(input);
  LOWBIT_CHECK_AS(Internal, it != im.hessians.end(),
                  "--device cuda: GPTQ of " + std::to_string(linear.out_features()) + "x" +
                      std::to_string(linear.in_features()) +
                      " weight asked for a Hessian the last calibrate() did not collect");
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  const auto start = std::chrono::steady_clock::now();
  const int64_t rows = linear.out_features(), cols = linear.in_features();
  const auto* bits = static_cast<const uint16_t*>(linear.weight.data());
  const size_t count = static_cast<size_t>(rows * cols);
  widen_bf16(bits, count, im.host_weight);
  // Tensor::zeros: the tensor set_weight would make (64-byte aligned, owned), filled below.
  Tensor out = Tensor::zeros(DType::BF16, linear.weight.shape());
  const double conversions =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The down_proj of a layer is not uploaded by calibrate(): only an uploaded copy of the right
  // size is overwritten.
  DeviceLinear* d = uploaded(im.layer, linear);
  if (d != nullptr && (d->weight.size() != count || d->source_data != linear.weight.data())) {
    d = nullptr;
  }
  GptqResult r = gptq_quantize_cuda_bf16(bits, im.host_weight, out.data_as<uint16_t>(),
                                         d != nullptr ? d->weight.data() : nullptr, rows, cols,
                                         it->second->hessian(), args, options, im.stream,
                                         &im.times.gptq);
  linear.weight = out;
  if (d != nullptr) d->source_data = linear.weight.data();
  im.times.gptq_host_copy += conversions;
  im.times.gptq_wall +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace lowbit::quant::gpu
