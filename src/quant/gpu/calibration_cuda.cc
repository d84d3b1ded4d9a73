// CudaCalibrationBackend: what it refuses, begin() (chunk plan, embedding, RoPE table, scratch),
// GPTQ on the kept Hessians, the factory and the test accessors. The layer forward itself is in
// calibration_forward.cc.
#include "quant/gpu/calibration_cuda.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "core/float_convert.h"
#include "core/log.h"
#include "gpu/gpu_kernels.h"
#include "gpu/gpu_linear.h"
#include "gpu/gpu_model.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/small_ops.h"
#include "lowbit/error.h"
#include "models/layers/attention.h"
#include "quant/gpu/calibration_impl.h"

namespace lowbit::quant::gpu {

namespace {

const char* kUseCpu = ": not yet on --device cuda (use --device cpu)";

std::string role_name(LinearRole r) {
  switch (r) {
    case LinearRole::Q: return "q/k/v input";
    case LinearRole::O: return "o_proj input";
    case LinearRole::Gate: return "gate/up input";
    case LinearRole::Down: return "down_proj input";
    default: return "input";
  }
}

// Checks a device allocation that scales with the calibration set, with a message saying what to
// lower.
template <typename T>
kc::DeviceBuffer<T> allocate(size_t count, const std::string& what) {
  try {
    return kc::DeviceBuffer<T>(count);
  } catch (const OutOfMemory&) {
    throw OutOfMemory("--device cuda: " + what + " (" +
                      std::to_string((count * sizeof(T)) >> 20) +
                      " MiB) does not fit on the device: lower --num-samples or --seq-len");
  }
}

}  // namespace

// Empty when the GPU can emulate `a` as a Linear's input quantization; else what it cannot.
std::string emulation_problem(const QuantArgs& a) {
  if (!a.is_dynamic()) return "static input activation scales (range observers)";
  if (a.dynamic != DynamicMode::Dynamic) return "locally dynamic (NVFP4) input activations";
  if (a.strategy != Strategy::Token && a.strategy != Strategy::Group) {
    return "dynamic input activations with strategy " + to_string(a.strategy);
  }
  if (a.scale_dtype) return "dynamic input activations with a scale_dtype (MX / NVFP4)";
  if (a.type == QuantType::Float && a.num_bits != 8) return "fp4 input activations";
  if (a.type == QuantType::Int && a.num_bits > 8) return "int input activations above 8 bits";
  return "";
}

ActFakeQuant act_fake_quant(const QuantArgs& a, int64_t cols) {
  ActFakeQuant q;
  q.group = a.strategy == Strategy::Group ? a.group_size : cols;
  q.is_float = a.type == QuantType::Float;
  q.symmetric = a.symmetric;
  q.qmin = static_cast<float>(a.qmin());
  q.qmax = static_cast<float>(a.qmax());
  q.bit_range = static_cast<float>(a.qmax() - a.qmin());
  return q;
}

CudaCalibrationBackend::CudaCalibrationBackend(int device, int64_t chunk_tokens)
    : impl_(std::make_unique<Impl>()) {
  LOWBIT_CHECK(chunk_tokens >= 1, "CudaCalibrationBackend: chunk_tokens must be >= 1");
  impl_->device = device;
  impl_->chunk_tokens = chunk_tokens;
}

CudaCalibrationBackend::~CudaCalibrationBackend() = default;

std::string CudaCalibrationBackend::name() const { return "cuda"; }

std::string CudaCalibrationBackend::unsupported(const models::Model& model,
                                                const OneshotPlan& plan) const {
  for (const PlanStep& step : plan.steps) {
    if (std::holds_alternative<SmoothQuantStep>(step)) return "SmoothQuant (SmoothQuantModifier)" + std::string(kUseCpu);
    if (std::holds_alternative<AwqStep>(step)) return "AWQ (AWQModifier)" + std::string(kUseCpu);
  }
  const QuantizeStep& q = plan.quantize();
  if (q.kv_cache_scheme) return "kv_cache_scheme (KV-cache scales need range observers)" + std::string(kUseCpu);
  for (const auto& [name, scheme] : q.groups) {
    if (!scheme.input_activations) continue;
    const std::string why = emulation_problem(*scheme.input_activations);
    if (!why.empty()) return "config group " + name + ": " + why + kUseCpu;
  }
  const models::ModelConfig& c = model.config();
  if (c.activation != kernels::Activation::SILU) {
    return c.source + ": hidden_act '" + c.hidden_act + "' (the GPU forward runs SiLU only)" + kUseCpu;
  }
  if (c.head_dim != 64 && c.head_dim != 128) {
    return c.source + ": head_dim " + std::to_string(c.head_dim) +
           " (the GPU attention kernels take 64 or 128)" + kUseCpu;
  }
  const models::DecoderWeights& w = model.weights();
  const DType e = w.embed.dtype();
  if (e != DType::BF16 && e != DType::F16 && e != DType::F32) {
    return "an embedding stored as " + std::string(dtype_name(e)) + kUseCpu;
  }
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const models::LayerWeights& layer = w.layers[l];
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    if (layer.is_moe()) return prefix + "mlp: mixture-of-experts layers" + kUseCpu;
    const models::AttentionWeights& a = layer.attention;
    const models::MlpWeights& m = layer.mlp;
    for (const models::Linear* lin : {&a.q, &a.k, &a.v, &a.o, &m.gate, &m.up, &m.down}) {
      if (lin->method) return prefix + ": an already quantized input checkpoint" + std::string(kUseCpu);
    }
  }
  return "";
}

void CudaCalibrationBackend::Impl::plan_chunks(const CalibrationSet& samples) {
  lengths.clear();
  offsets.clear();
  chunks.clear();
  int64_t total = 0;
  for (const std::vector<int32_t>& s : samples) {
    offsets.push_back(total);
    lengths.push_back(static_cast<int64_t>(s.size()));
    total += static_cast<int64_t>(s.size());
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    if (chunks.empty() || chunks.back().tokens + lengths[i] > chunk_tokens) {
      Chunk c;
      c.first = i;
      c.token_begin = offsets[i];
      chunks.push_back(c);
    }
    Chunk& c = chunks.back();
    ++c.count;
    c.tokens += lengths[i];
    c.max_len = std::max(c.max_len, lengths[i]);
  }
  // Per chunk: positions [tokens], context lengths [count], query starts [count + 1], block tables
  // [count, max_len] (block size 1: slot = the row of the chunk's key / value outputs).
  std::vector<int32_t> host;
  for (Chunk& c : chunks) {
    c.meta = static_cast<int64_t>(host.size());
    for (size_t s = c.first; s < c.first + c.count; ++s) {
      for (int64_t j = 0; j < lengths[s]; ++j) host.push_back(static_cast<int32_t>(j));
    }
    for (size_t s = c.first; s < c.first + c.count; ++s) host.push_back(static_cast<int32_t>(lengths[s]));
    host.push_back(0);
    for (size_t s = c.first; s < c.first + c.count; ++s) {
      host.push_back(static_cast<int32_t>(offsets[s] + lengths[s] - c.token_begin));
    }
    for (size_t s = c.first; s < c.first + c.count; ++s) {
      const int64_t row = offsets[s] - c.token_begin;
      for (int64_t j = 0; j < c.max_len; ++j) {
        host.push_back(static_cast<int32_t>(row + std::min(j, lengths[s] - 1)));
      }
    }
  }
  meta = kc::DeviceBuffer<int32_t>(std::span<const int32_t>(host));
}

void CudaCalibrationBackend::Impl::embed(const CalibrationSet& samples) {
  const models::DecoderWeights& w = model->weights();
  const int64_t vocab = model->config().vocab_size;
  std::vector<int32_t> ids;
  for (const std::vector<int32_t>& s : samples) {
    for (int32_t id : s) {
      if (id < 0 || id >= vocab) {
        throw InvalidArgument("calibration token id " + std::to_string(id) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      }
    }
    ids.insert(ids.end(), s.begin(), s.end());
  }
  const int64_t tokens = static_cast<int64_t>(ids.size());
  states = allocate<uint16_t>(static_cast<size_t>(tokens * hidden),
                              "the bf16 hidden states of the calibration samples");
  // The table only lives while the samples are embedded.
  kc::DeviceBuffer<uint16_t> table(static_cast<size_t>(vocab * hidden));
  if (w.embed.dtype() == DType::BF16) {
    LOWBIT_CUDA_CHECK(cudaMemcpy(table.data(), w.embed.data(), table.bytes(), cudaMemcpyHostToDevice));
  } else {
    table.upload(::lowbit::gpu::to_bf16_bits(w.embed));
  }
  const kc::DeviceBuffer<int32_t> device_ids{std::span<const int32_t>(ids)};
  kc::embedding_gather(table.data(), vocab, hidden, device_ids.data(), tokens, states.data(), nullptr,
                       stream);
  if (w.embed_scale != 1.0f) ::lowbit::gpu::scale_bf16(states.data(), tokens * hidden, w.embed_scale, stream);
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

namespace {

// cos | sin rows [0, rows) of the frequencies every sample uses; Unsupported when samples of
// different lengths would use different ones (dynamic / longrope scaling past its limit).
std::vector<float> rope_table(const models::Model& model, const std::vector<int64_t>& lengths,
                              int64_t rows, int64_t rotary_dim) {
  models::RopeFrequencies scratch, other_scratch;
  const models::RopeFrequencies* freq = nullptr;
  for (int64_t len : std::set<int64_t>(lengths.begin(), lengths.end())) {
    const models::RopeFrequencies& f = model.rotary().frequencies(len, freq == nullptr ? scratch : other_scratch);
    if (freq == nullptr) {
      freq = &f;
    } else if (&f != freq || &f == &other_scratch) {
      throw Unsupported("--device cuda: calibration samples of " + std::to_string(len) +
                        " tokens use other RoPE frequencies than shorter ones (dynamic / longrope "
                        "scaling)" + std::string(kUseCpu));
    }
  }
  const int64_t half = static_cast<int64_t>(freq->inv_freq.size());
  LOWBIT_CHECK_AS(Internal, 2 * half == rotary_dim, "calibration RoPE: rotary_dim mismatch");
  std::vector<float> cos(static_cast<size_t>(rows * half)), sin(cos.size());
  models::RotaryEmbedding::cos_sin(*freq, 0, rows, cos.data(), sin.data());
  std::vector<float> table(static_cast<size_t>(rows * rotary_dim));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(cos.data() + r * half, half, table.data() + r * rotary_dim);
    std::copy_n(sin.data() + r * half, half, table.data() + r * rotary_dim + half);
  }
  return table;
}

}  // namespace

void CudaCalibrationBackend::begin(const models::Model& model, const CalibrationSet& samples) {
  LOWBIT_CHECK(!samples.empty(), "--device cuda: no calibration samples");
  Impl& im = *impl_;
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  if (im.stream == nullptr) {
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&im.stream, cudaStreamNonBlocking));
    im.blas = std::make_unique<kc::BlasLt>();
  }
  const models::ModelConfig& c = model.config();
  im.model = &model;
  im.hidden = c.hidden_size;
  im.heads = c.num_heads;
  im.kv_heads = c.num_kv_heads;
  im.head_dim = c.head_dim;
  im.rotary_dim = c.rotary_dim();
  im.q_width = im.heads * im.head_dim;
  im.kv_width = im.kv_heads * im.head_dim;
  im.intermediate = model.weights().layers.empty() ? 0 : model.weights().layers[0].mlp.down.in_features();
  im.eps = static_cast<float>(c.rms_norm_eps);
  im.attention_scale = models::attention_scale(c.head_dim);
  im.plan_chunks(samples);
  const int64_t max_len = *std::max_element(im.lengths.begin(), im.lengths.end());
  im.rope_rows = max_len;
  im.rope = kc::DeviceBuffer<float>(std::span<const float>(rope_table(model, im.lengths, max_len, im.rotary_dim)));
  im.embed(samples);
  int64_t t = 0;
  for (const Chunk& ch : im.chunks) t = std::max(t, ch.tokens);
  const auto rows = static_cast<size_t>(t);
  const auto h = static_cast<size_t>(im.hidden);
  ChunkScratch& s = im.scratch;
  s.residual = allocate<uint16_t>(rows * h, "the layer scratch");
  s.normed = allocate<uint16_t>(rows * h, "the layer scratch");
  s.branch = allocate<uint16_t>(rows * h, "the layer scratch");
  s.q = allocate<uint16_t>(rows * static_cast<size_t>(im.q_width), "the layer scratch");
  s.attn = allocate<uint16_t>(rows * static_cast<size_t>(im.q_width), "the layer scratch");
  s.k = allocate<uint16_t>(rows * static_cast<size_t>(im.kv_width), "the layer scratch");
  s.v = allocate<uint16_t>(rows * static_cast<size_t>(im.kv_width), "the layer scratch");
  const auto inter = rows * static_cast<size_t>(im.intermediate);
  s.gate = allocate<uint16_t>(inter, "the layer scratch");
  s.up = allocate<uint16_t>(inter, "the layer scratch");
  s.act = allocate<uint16_t>(inter, "the layer scratch");
  const int64_t widest = std::max({im.hidden, im.q_width, im.intermediate});
  s.quantized = allocate<uint16_t>(rows * static_cast<size_t>(widest), "the layer scratch");
  cudaDeviceProp props{};
  LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, im.device));
  log_info("calibration on " + std::string(props.name) + ": " + std::to_string(samples.size()) +
           " samples, " + std::to_string(im.states.size() / h) + " tokens as bf16 hidden states (" +
           std::to_string(im.states.bytes() >> 20) + " MiB), " + std::to_string(im.chunks.size()) +
           " chunks of up to " + std::to_string(t) + " tokens");
}

GptqResult CudaCalibrationBackend::gptq(std::vector<float>& w, int64_t rows, int64_t cols,
                                        LinearRole input, const QuantArgs& args,
                                        const GptqOptions& options, DType compute) {
  Impl& im = *impl_;
  auto it = im.hessians.find(input);
  LOWBIT_CHECK_AS(Internal, it != im.hessians.end(),
                  "--device cuda: GPTQ asked for the Hessian of the " + role_name(input) +
                      ", which the last calibrate() did not collect");
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  const auto start = std::chrono::steady_clock::now();
  GptqResult r = gptq_quantize_cuda(w, rows, cols, it->second->hessian(), args, options, compute,
                                    im.stream, &im.times.gptq);
  im.times.gptq_wall +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

double CudaCalibrationBackend::forward_seconds() const { return impl_->forward_seconds; }
double CudaCalibrationBackend::hessian_seconds() const { return impl_->hessian_seconds; }

std::vector<float> CudaCalibrationBackend::download_states(size_t index) const {
  const Impl& im = *impl_;
  LOWBIT_CHECK(index < im.lengths.size(), "download_states: no sample " + std::to_string(index));
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
  std::vector<uint16_t> bits(static_cast<size_t>(im.lengths[index] * im.hidden));
  LOWBIT_CUDA_CHECK(cudaMemcpy(bits.data(), im.states.data() + im.offsets[index] * im.hidden,
                               bits.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

std::vector<float> CudaCalibrationBackend::download_hessian(LinearRole input) const {
  auto it = impl_->hessians.find(input);
  LOWBIT_CHECK(it != impl_->hessians.end(), "download_hessian: no Hessian kept for the " + role_name(input));
  return it->second->download();
}

int CudaCalibrationBackend::device() const { return impl_->device; }

CudaCalibrationBackend::KeptHessian CudaCalibrationBackend::kept_hessian(LinearRole input) {
  Impl& im = *impl_;
  auto it = im.hessians.find(input);
  LOWBIT_CHECK_AS(Internal, it != im.hessians.end(),
                  "kept_hessian: the last calibrate() did not collect the " + role_name(input));
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  DeviceHessian& h = *it->second;
  KeptHessian kept;
  // DeviceHessian::hessian() returns its own finalized buffer (device memory it allocated, not a
  // const object) and keeps returning it, unchanged, until the next add() or reset().
  kept.data = const_cast<float*>(h.hessian());
  kept.cols = h.cols();
  kept.samples = h.sequences();
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
  return kept;
}

void CudaCalibrationBackend::forget_upload(const models::Linear& linear) {
  DeviceLayer& l = impl_->layer;
  for (DeviceLinear* d : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
    if (d->source == &linear) {
      d->source = nullptr;
      d->source_data = nullptr;
    }
  }
}

std::unique_ptr<quant::CalibrationBackend> make_cuda_calibration_backend(int device) {
  ::lowbit::gpu::require_device(device);
  return std::make_unique<CudaCalibrationBackend>(device);
}

}  // namespace lowbit::quant::gpu
