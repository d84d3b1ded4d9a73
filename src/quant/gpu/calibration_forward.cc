// The decoder layer on the GPU for calibration: upload one layer from the models::Model as it holds
// it now, run it over the sample chunks (calibrate: on a copy, feeding the Hessians; propagate: in
// place). The math is the GPU model's (gpu/gpu_forward.cc) on unfused dense projections, so that
// each Linear's input can be observed and its own input quantization emulated.
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/float_convert.h"
#include "core/log.h"
#include "gpu/gpu_kernels.h"
#include "gpu/gpu_linear.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/small_ops.h"
#include "lowbit/error.h"
#include "quant/gpu/calibration_impl.h"

namespace lowbit::quant::gpu {

namespace {

using Clock = std::chrono::steady_clock;

const __nv_bfloat16* as_bf16(const uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
__nv_bfloat16* as_bf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

// Reallocates only when the size changes (every layer of a model has the same shapes).
template <typename T>
void ensure_size(kc::DeviceBuffer<T>& buffer, size_t count) {
  if (buffer.size() != count) buffer = kc::DeviceBuffer<T>(count);
}

// Stream-ordered copy: the previous layer's kernels on `stream` are done reading the old values.
template <typename T>
void upload(kc::DeviceBuffer<T>& buffer, const T* host, size_t count, cudaStream_t stream) {
  ensure_size(buffer, count);
  if (count > 0) {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(buffer.data(), host, count * sizeof(T),
                                      cudaMemcpyHostToDevice, stream));
  }
}

void upload_norm(kc::DeviceBuffer<float>& buffer, const std::vector<float>& v, cudaStream_t stream) {
  upload(buffer, v.data(), v.size(), stream);
}

void upload_linear(DeviceLinear& d, const models::Linear& l, const std::string& name,
                   cudaStream_t stream) {
  LOWBIT_CHECK_AS(Unsupported, !l.method,
                  "--device cuda: " + name + " is run by a quantization method; calibration "
                  "needs dense weights (use --device cpu)");
  d.n = l.out_features();
  d.k = l.in_features();
  const size_t count = static_cast<size_t>(d.n * d.k);
  if (d.source == &l && d.source_data == l.weight.data() && d.weight.size() == count) {
    // Already there: calibrate uploaded it and GPTQ left it, or gptq_linear wrote it.
  } else if (l.weight.dtype() == DType::BF16) {
    upload(d.weight, static_cast<const uint16_t*>(l.weight.data()), count, stream);
  } else {  // F32 / F16 weights (or compute dtypes other than bf16) run in bf16 on the GPU
    const std::vector<uint16_t> bits = ::lowbit::gpu::to_bf16_bits(l.weight);
    upload(d.weight, bits.data(), count, stream);
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));  // `bits` dies here
  }
  d.source = &l;
  d.source_data = l.weight.data();
  d.has_bias = !l.bias.empty();
  if (d.has_bias) {
    std::vector<uint16_t> bias(l.bias.size());
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = f32_to_bf16(l.bias[i]);
    upload(d.bias, bias.data(), bias.size(), stream);
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  d.input.reset();
  if (l.input_quant) {
    const std::string why = emulation_problem(l.input_quant->args);
    LOWBIT_CHECK_AS(Unsupported, why.empty(), "--device cuda: " + name + ": " + why +
                                                  " not yet on --device cuda (use --device cpu)");
    d.input = act_fake_quant(l.input_quant->args, d.k);
  }
}

// Stage of the forward that produces each Hessian input (calibrate stops after the deepest).
int stage_of(LinearRole r) {
  switch (r) {
    case LinearRole::Q: return 1;
    case LinearRole::O: return 2;
    case LinearRole::Gate: return 3;
    default: return 4;
  }
}

}  // namespace

EventPairs::~EventPairs() {
  for (cudaEvent_t e : events) cudaEventDestroy(e);
}

void EventPairs::record_start(cudaStream_t stream) {
  if (used + 2 > events.size()) {
    for (int i = 0; i < 2; ++i) {
      cudaEvent_t e = nullptr;
      LOWBIT_CUDA_CHECK(cudaEventCreate(&e));
      events.push_back(e);
    }
  }
  LOWBIT_CUDA_CHECK(cudaEventRecord(events[used++], stream));
}

void EventPairs::record_stop(cudaStream_t stream) {
  LOWBIT_CUDA_CHECK(cudaEventRecord(events[used++], stream));
}

double EventPairs::seconds_and_reset() {
  double seconds = 0.0;
  for (size_t i = 0; i + 1 < used; i += 2) {
    float ms = 0.0f;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
    seconds += ms / 1000.0;
  }
  used = 0;
  return seconds;
}

CudaCalibrationBackend::Impl::~Impl() {
  if (stream != nullptr) {
    cudaStreamSynchronize(stream);
    hessians.clear();  // before the stream their work was queued on
    cudaStreamDestroy(stream);
  }
}

void CudaCalibrationBackend::Impl::upload_layer(int index, bool with_down) {
  const auto start = Clock::now();
  const models::LayerWeights& l = model->weights().layers.at(static_cast<size_t>(index));
  const std::string prefix = "model.layers." + std::to_string(index) + ".";
  upload_norm(layer.input_norm, l.input_norm, stream);
  upload_norm(layer.post_norm, l.post_attention_norm, stream);
  const models::AttentionWeights& a = l.attention;
  layer.qk_norm = !a.q_norm.empty();
  if (layer.qk_norm) {
    upload_norm(layer.q_norm, a.q_norm, stream);
    upload_norm(layer.k_norm, a.k_norm, stream);
  }
  layer.window = l.sliding_window;
  upload_linear(layer.q, a.q, prefix + "self_attn.q_proj", stream);
  upload_linear(layer.k, a.k, prefix + "self_attn.k_proj", stream);
  upload_linear(layer.v, a.v, prefix + "self_attn.v_proj", stream);
  upload_linear(layer.o, a.o, prefix + "self_attn.o_proj", stream);
  upload_linear(layer.gate, l.mlp.gate, prefix + "mlp.gate_proj", stream);
  upload_linear(layer.up, l.mlp.up, prefix + "mlp.up_proj", stream);
  if (with_down) upload_linear(layer.down, l.mlp.down, prefix + "mlp.down_proj", stream);
  LOWBIT_CHECK_AS(Unsupported, layer.gate.n == intermediate,
                  "--device cuda: " + prefix + "mlp has a different intermediate size than layer 0");
  times.upload += std::chrono::duration<double>(Clock::now() - start).count();
}

void CudaCalibrationBackend::Impl::linear(const DeviceLinear& l, const uint16_t* x, int64_t m,
                                          uint16_t* y) {
  const uint16_t* input = x;
  if (l.input) {
    // q/k/v (and gate/up) share one input and usually one input quantization: quantize it once.
    if (memo_src != x || memo_m != m || !(memo_quant == *l.input)) {
      fake_quantize_activations_bf16(x, m, l.k, *l.input, scratch.quantized.data(), stream);
      memo_src = x;
      memo_m = m;
      memo_quant = *l.input;
    }
    input = scratch.quantized.data();
  }
  kc::gemm_bf16(*blas, input, m, l.k, l.weight.data(), l.n, y, stream,
                l.has_bias ? l.bias.data() : nullptr);
}

void CudaCalibrationBackend::Impl::feed(LinearRole role, const std::vector<LinearRole>& inputs,
                                        const uint16_t* x, int64_t m, int64_t cols,
                                        int64_t sequences) {
  if (std::find(inputs.begin(), inputs.end(), role) == inputs.end()) return;
  hessian_events.record_start(stream);
  hessians.at(role)->add(x, m, cols, sequences);
  hessian_events.record_stop(stream);
}

void CudaCalibrationBackend::Impl::run_chunk(const Chunk& c, bool propagate,
                                             const std::vector<LinearRole>& inputs) {
  int stage = 4;
  if (!propagate) {
    stage = 0;
    for (LinearRole r : inputs) stage = std::max(stage, stage_of(r));
  }
  const int64_t m = c.tokens;
  const auto seqs = static_cast<int64_t>(c.count);
  ChunkScratch& s = scratch;
  memo_src = nullptr;  // the scratch is rewritten: no quantized input carries over
  uint16_t* x = states.data() + c.token_begin * hidden;
  kc::rmsnorm(x, layer.input_norm.data(), eps, m, hidden, s.normed.data(), stream);
  feed(LinearRole::Q, inputs, s.normed.data(), m, hidden, seqs);
  if (stage <= 1) return;
  linear(layer.q, s.normed.data(), m, s.q.data());
  linear(layer.k, s.normed.data(), m, s.k.data());
  linear(layer.v, s.normed.data(), m, s.v.data());
  if (layer.qk_norm) {  // Qwen3: per-head RMSNorm of q and k before RoPE
    kc::rmsnorm(s.q.data(), layer.q_norm.data(), eps, m * heads, head_dim, s.q.data(), stream);
    kc::rmsnorm(s.k.data(), layer.k_norm.data(), eps, m * kv_heads, head_dim, s.k.data(), stream);
  }
  const int32_t* positions = meta.data() + c.meta;
  const int32_t* context = positions + m;
  const int32_t* query_start = context + c.count;
  const int32_t* tables = query_start + c.count + 1;
  kc::rope_neox(s.q.data(), s.k.data(), positions, m, static_cast<int>(heads),
                static_cast<int>(kv_heads), static_cast<int>(head_dim), static_cast<int>(rotary_dim),
                rope.data(), rope_rows, stream);
  // The chunk's key and value outputs are its cache: block size 1, sample s's position j at row
  // (its first row) + j.
  kc::PagedKvCache cache;
  cache.k_blocks = s.k.data();
  cache.v_blocks = s.v.data();
  cache.block_size = 1;
  cache.kv_heads = static_cast<int>(kv_heads);
  cache.head_dim = static_cast<int>(head_dim);
  kernels::AttentionShape shape;
  shape.heads = static_cast<int>(heads);
  shape.kv_heads = static_cast<int>(kv_heads);
  shape.head_dim = static_cast<int>(head_dim);
  shape.window = layer.window;
  shape.scale = attention_scale;
  kc::PagedBatch batch;
  batch.num_seqs = static_cast<int>(c.count);
  batch.context_lens = context;
  batch.block_tables = tables;
  batch.max_blocks_per_seq = static_cast<int>(c.max_len);
  batch.max_context_len = static_cast<int>(c.max_len);
  batch.query_start = query_start;
  batch.max_query_len = static_cast<int>(c.max_len);
  attention_events.record_start(stream);
  kc::prefill_attention(as_bf16(s.q.data()), 0, cache, batch, shape, as_bf16(s.attn.data()), stream);
  attention_events.record_stop(stream);
  feed(LinearRole::O, inputs, s.attn.data(), m, q_width, seqs);
  if (stage <= 2) return;
  linear(layer.o, s.attn.data(), m, s.branch.data());
  uint16_t* residual = x;
  if (!propagate) {  // calibrate leaves the states as they are
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(s.residual.data(), x, static_cast<size_t>(m * hidden) * 2,
                                      cudaMemcpyDeviceToDevice, stream));
    residual = s.residual.data();
  }
  // residual += attention; branch = RMSNorm_post(residual)
  kc::fused_add_rmsnorm(s.branch.data(), residual, layer.post_norm.data(), eps, m, hidden, stream);
  feed(LinearRole::Gate, inputs, s.branch.data(), m, hidden, seqs);
  if (stage <= 3) return;
  linear(layer.gate, s.branch.data(), m, s.gate.data());
  linear(layer.up, s.branch.data(), m, s.up.data());
  ::lowbit::gpu::silu_mul_split(s.gate.data(), s.up.data(), m, intermediate, s.act.data(), stream);
  feed(LinearRole::Down, inputs, s.act.data(), m, intermediate, seqs);
  if (!propagate) return;
  linear(layer.down, s.act.data(), m, s.normed.data());
  kc::add(x, s.normed.data(), m * hidden, stream);
}

void CudaCalibrationBackend::calibrate(int layer, const std::vector<LinearRole>& inputs) {
  Impl& im = *impl_;
  LOWBIT_CHECK_AS(Internal, im.model != nullptr, "CudaCalibrationBackend: calibrate before begin");
  const auto start = Clock::now();
  im.times = LayerTimes{};
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  im.upload_layer(layer, /*with_down=*/false);
  // One Hessian per requested input, replacing the previous layer's (allocations kept).
  for (auto it = im.hessians.begin(); it != im.hessians.end();) {
    const bool wanted = std::find(inputs.begin(), inputs.end(), it->first) != inputs.end();
    it = wanted ? std::next(it) : im.hessians.erase(it);
  }
  for (LinearRole r : inputs) {
    const int64_t cols = r == LinearRole::O      ? im.q_width
                         : r == LinearRole::Down ? im.intermediate
                                                 : im.hidden;
    LOWBIT_CHECK_AS(Internal, r == LinearRole::Q || r == LinearRole::O || r == LinearRole::Gate ||
                                  r == LinearRole::Down,
                    "CudaCalibrationBackend::calibrate: not a Hessian source role");
    auto& h = im.hessians[r];
    if (h && h->cols() == cols) {
      h->reset();
    } else {
      h.reset();
      h = std::make_unique<DeviceHessian>(cols, im.stream);
    }
  }
  for (const Chunk& c : im.chunks) im.run_chunk(c, false, inputs);
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
  im.times.hessian = im.hessian_events.seconds_and_reset();
  im.times.calibrate_attention = im.attention_events.seconds_and_reset();
  im.hessian_seconds += im.times.hessian;
  im.times.calibrate = std::chrono::duration<double>(Clock::now() - start).count();
  im.forward_seconds += im.times.calibrate;
}

void CudaCalibrationBackend::propagate(int layer) {
  Impl& im = *impl_;
  LOWBIT_CHECK_AS(Internal, im.model != nullptr, "CudaCalibrationBackend: propagate before begin");
  const auto start = Clock::now();
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  im.upload_layer(layer, /*with_down=*/true);
  for (const Chunk& c : im.chunks) im.run_chunk(c, true, {});
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
  LayerTimes& t = im.times;
  t.propagate_attention = im.attention_events.seconds_and_reset();
  t.propagate = std::chrono::duration<double>(Clock::now() - start).count();
  im.forward_seconds += t.propagate;
  // Calibrate and propagate include their uploads; GPTQ's wall time includes its parts. The GPU
  // number at the end tells the lines of several GPUs (--tp) apart.
  char line[400];
  std::snprintf(line, sizeof line,
                "layer %d on cuda: uploads %.2f s; calibrate %.2f s (Hessians %.2f, attention "
                "%.2f); GPTQ %d modules %.2f s (host set-up %.2f, device %.2f, weight copies "
                "%.2f, host conversions %.2f); propagate %.2f s (attention %.2f) [GPU %d]",
                layer, t.upload, t.calibrate, t.hessian, t.calibrate_attention, t.gptq.calls,
                t.gptq_wall, t.gptq.host, t.gptq.device, t.gptq.copies, t.gptq_host_copy,
                t.propagate, t.propagate_attention, im.device);
  log_info(line);
  t = LayerTimes{};
}

}  // namespace lowbit::quant::gpu
