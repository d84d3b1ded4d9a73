// The inside of CudaCalibrationBackend (internal to src/quant/gpu): the device states, the chunk
// plan over the samples, the uploaded layer and the scratch of one chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm_bf16.h"
#include "models/model.h"
#include "quant/gpu/calibration_cuda.h"
#include "quant/gpu/calibration_kernels.h"
#include "quant/gpu/gptq_cuda.h"

namespace lowbit::quant::gpu {

namespace kc = kernels::cuda;

// Samples [first, first + count) run together: their tokens are rows [token_begin, + tokens) of
// the states. Their positions, context lengths, query starts and block tables (block size 1: the
// cache of a chunk is its dense [tokens, kv_width] key and value outputs) are at `meta` in
// Impl::meta.
struct Chunk {
  size_t first = 0, count = 0;
  int64_t token_begin = 0, tokens = 0;
  int64_t max_len = 0;
  int64_t meta = 0;
};

// One Linear of the uploaded layer: dense bf16 [n, k], its bias (bf16) and the emulated dynamic
// input quantization, if the model's Linear has one.
struct DeviceLinear {
  kc::DeviceBuffer<uint16_t> weight;
  // What `weight` holds: the bytes of source->weight at source_data. A Linear whose weight tensor
  // still starts there (the pipeline replaces tensors, never writes them in place) is not uploaded
  // again; gptq_linear's fast path points these at the tensor it stores.
  const models::Linear* source = nullptr;
  const void* source_data = nullptr;
  kc::DeviceBuffer<uint16_t> bias;
  bool has_bias = false;
  int64_t n = 0, k = 0;
  std::optional<ActFakeQuant> input;
};

struct DeviceLayer {
  kc::DeviceBuffer<float> input_norm, post_norm, q_norm, k_norm;
  bool qk_norm = false;
  DeviceLinear q, k, v, o, gate, up, down;
  int64_t window = 0;
};

// Scratch of one chunk (T = the largest chunk's tokens).
struct ChunkScratch {
  kc::DeviceBuffer<uint16_t> residual;  // [T, hidden]: calibrate's copy of the states
  kc::DeviceBuffer<uint16_t> normed;    // [T, hidden]
  kc::DeviceBuffer<uint16_t> q, k, v;   // [T, q_width], [T, kv_width] x 2
  kc::DeviceBuffer<uint16_t> attn;      // [T, q_width]
  kc::DeviceBuffer<uint16_t> branch;    // [T, hidden]
  kc::DeviceBuffer<uint16_t> gate, up, act;  // [T, intermediate]
  kc::DeviceBuffer<uint16_t> quantized;      // [T, widest input]: fake-quantized inputs
};

// One layer's time split for the log line propagate() writes (seconds).
struct LayerTimes {
  double upload = 0.0;                     // queuing the weight uploads (pageable: ~the copy)
  double calibrate = 0.0, hessian = 0.0;   // calibrate's wall time, its Hessian adds (events)
  double calibrate_attention = 0.0;        // its attention kernels (events)
  double gptq_wall = 0.0;                  // gptq / gptq_linear wall time, host copies included
  double gptq_host_copy = 0.0;             // bf16 → fp32 for the observer, the output tensor
  GptqTimes gptq;
  double propagate = 0.0, propagate_attention = 0.0;
};

// Hessian-time bookkeeping: events around each DeviceHessian::add, summed after a synchronize.
struct EventPairs {
  std::vector<cudaEvent_t> events;  // start, stop, start, stop ...
  size_t used = 0;
  ~EventPairs();
  void record_start(cudaStream_t stream);
  void record_stop(cudaStream_t stream);
  double seconds_and_reset();  // after the stream is synchronized
};

// Empty when the GPU can emulate `args` as a Linear's input quantization, else what it cannot
// (calibration_cuda.cc); and the kernel's form of it for inputs `cols` wide.
std::string emulation_problem(const QuantArgs& args);
ActFakeQuant act_fake_quant(const QuantArgs& args, int64_t cols);

struct CudaCalibrationBackend::Impl {
  int device = 0;
  int64_t chunk_tokens = 0;
  const models::Model* model = nullptr;
  cudaStream_t stream = nullptr;
  std::unique_ptr<kc::BlasLt> blas;

  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  int64_t q_width = 0, kv_width = 0, intermediate = 0;
  float eps = 1e-6f, attention_scale = 1.0f;

  std::vector<int64_t> lengths, offsets;  // per sample
  std::vector<Chunk> chunks;
  kc::DeviceBuffer<uint16_t> states;  // bf16 [total tokens, hidden]
  kc::DeviceBuffer<int32_t> meta;
  kc::DeviceBuffer<float> rope;  // [max_len, rotary_dim] cos | sin
  int64_t rope_rows = 0;
  ChunkScratch scratch;
  DeviceLayer layer;
  std::map<LinearRole, std::unique_ptr<DeviceHessian>> hessians;
  EventPairs hessian_events;
  EventPairs attention_events;
  LayerTimes times;
  std::vector<float> host_weight;  // gptq_linear's fp32 copy for the observer, reused

  double forward_seconds = 0.0, hessian_seconds = 0.0;
  // The input last fake-quantized into scratch.quantized (reset for every chunk).
  const uint16_t* memo_src = nullptr;
  int64_t memo_m = 0;
  ActFakeQuant memo_quant;

  ~Impl();
  void plan_chunks(const CalibrationSet& samples);
  void embed(const CalibrationSet& samples);
  void upload_layer(int index, bool with_down);
  // Runs the uploaded layer over chunk c: propagate (in place, to the end) or calibrate (on a
  // copy, up to the deepest input in `inputs`, feeding their Hessians).
  void run_chunk(const Chunk& c, bool propagate, const std::vector<LinearRole>& inputs);
  void linear(const DeviceLinear& l, const uint16_t* x, int64_t m, uint16_t* y);
  void feed(LinearRole role, const std::vector<LinearRole>& inputs, const uint16_t* x, int64_t m,
            int64_t cols, int64_t sequences);
};

}  // namespace lowbit::quant::gpu
