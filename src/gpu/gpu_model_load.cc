// GpuModel::load: checks what the GPU backend can run, uploads the weights (fusing dense q/k/v and
// gate/up), allocates the KV pool and the scratch of one pass.
#include <algorithm>
#include <cmath>
#include <map>

#include "core/log.h"
#include "gpu/gpu_impl.h"
#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"
#include "models/layers/attention.h"
#include "models/model.h"

namespace lowbit::gpu {

namespace kc = kernels::cuda;

namespace {

constexpr int64_t kDefaultMaxSeqLen = 32768;
constexpr size_t kLogitScratchBytes = size_t(256) << 20;

kc::DeviceBuffer<float> upload_f32(const std::vector<float>& v) {
  return kc::DeviceBuffer<float>(std::span<const float>(v));
}

bool is_dense(const models::Linear& l) { return !l.method && !l.input_quant; }

void check_supported(const models::ModelConfig& c, const models::DecoderWeights& w) {
  if (c.activation != kernels::Activation::SILU) {
    throw Unsupported("--device cuda: " + c.source + ": hidden_act '" + c.hidden_act +
                      "' is not supported by the GPU backend (silu only)");
  }
  if (c.head_dim != 64 && c.head_dim != 128) {
    throw Unsupported("--device cuda: " + c.source + ": head_dim " + std::to_string(c.head_dim) +
                      " is not supported by the GPU attention kernels (64 or 128)");
  }
  for (size_t l = 0; l < w.layers.size(); ++l) {
    if (w.layers[l].is_moe()) {
      throw Unsupported("--device cuda: " + c.source + ": model.layers." + std::to_string(l) +
                        ".mlp is a mixture of experts, which the GPU backend does not run yet");
    }
  }
  const DType e = w.embed.dtype();
  if (e != DType::BF16 && e != DType::F16 && e != DType::F32) {
    throw Unsupported("--device cuda: the embedding is stored as " + std::string(dtype_name(e)) +
                      "; the GPU backend needs F32, F16 or BF16");
  }
}

void upload_layer(const models::Model& cpu, size_t index, GpuModel::Impl& im, GpuLayer& g) {
  const models::LayerWeights& l = cpu.weights().layers[index];
  const std::string method = cpu.quantization();
  const std::string prefix = "model.layers." + std::to_string(index) + ".";
  g.input_norm = upload_f32(l.input_norm);
  g.post_norm = upload_f32(l.post_attention_norm);
  const models::AttentionWeights& a = l.attention;
  if (!a.q_norm.empty()) {
    g.q_norm = upload_f32(a.q_norm);
    g.k_norm = upload_f32(a.k_norm);
  }
  // Fused when every part is dense; q/k norms want q and k as dense [rows · heads, head_dim].
  if (is_dense(a.q) && is_dense(a.k) && is_dense(a.v) && a.q_norm.empty()) {
    g.qkv.push_back(GpuLinear::fused_dense({&a.q, &a.k, &a.v}, prefix + "self_attn.qkv_proj"));
  } else {
    g.qkv.push_back(GpuLinear::from(a.q, prefix + "self_attn.q_proj", method));
    g.qkv.push_back(GpuLinear::from(a.k, prefix + "self_attn.k_proj", method));
    g.qkv.push_back(GpuLinear::from(a.v, prefix + "self_attn.v_proj", method));
  }
  g.o = GpuLinear::from(a.o, prefix + "self_attn.o_proj", method);
  const models::MlpWeights& m = l.mlp;
  if (is_dense(m.gate) && is_dense(m.up)) {
    g.gate_up.push_back(GpuLinear::fused_dense({&m.gate, &m.up}, prefix + "mlp.gate_up_proj"));
  } else {
    g.gate_up.push_back(GpuLinear::from(m.gate, prefix + "mlp.gate_proj", method));
    g.gate_up.push_back(GpuLinear::from(m.up, prefix + "mlp.up_proj", method));
  }
  g.down = GpuLinear::from(m.down, prefix + "mlp.down_proj", method);
  g.window = l.sliding_window;
  if (im.intermediate == 0) im.intermediate = m.down.in_features();
  LOWBIT_CHECK_AS(Unsupported, m.down.in_features() == im.intermediate,
                  "--device cuda: " + prefix + "mlp has a different intermediate size than layer 0");
}

// The KV cache of each layer: bf16, or fp8 e4m3 with the CPU quantizer's scales.
void allocate_kv(const models::Model& cpu, GpuModel::Impl& im) {
  const models::KvCacheQuantizer* q = cpu.kv_cache_quantizer();
  if (q != nullptr && q->active()) {
    const std::string d = q->describe();
    if (d.rfind("fp8_e4m3", 0) != 0 || d.find("first batch") != std::string::npos) {
      throw Unsupported("--device cuda: KV cache " + d +
                        ": the GPU backend runs fp8_e4m3 caches with fixed scales only");
    }
  }
  const int64_t tokens = im.options.kv_cache_tokens;
  im.pool = std::make_shared<BlockPool>();
  im.pool->block_size = im.options.block_size;
  im.pool->num_blocks = (tokens + im.options.block_size - 1) / im.options.block_size;
  LOWBIT_CHECK(im.pool->num_blocks < (int64_t{1} << 31) / im.options.block_size,
               "--device cuda: kv_cache_tokens is too large");
  for (int64_t b = im.pool->num_blocks - 1; b >= 0; --b) im.pool->free.push_back(static_cast<int32_t>(b));
  im.max_blocks_per_seq =
      static_cast<int>((im.options.max_seq_len + im.options.block_size - 1) / im.options.block_size);
  for (size_t l = 0; l < im.layers.size(); ++l) {
    GpuLayer& g = im.layers[l];
    g.kv.block_size = im.options.block_size;
    g.kv.kv_heads = static_cast<int>(im.kv_heads);
    g.kv.head_dim = static_cast<int>(im.head_dim);
    if (q != nullptr && q->quantizes(static_cast<int64_t>(l))) {
      g.kv.dtype = kc::KvCacheDtype::FP8_E4M3;
      g.k_scale = upload_f32(q->k_scale(static_cast<int64_t>(l)));
      g.v_scale = upload_f32(q->v_scale(static_cast<int64_t>(l)));
      g.kv.k_scale = g.k_scale.data();
      g.kv.v_scale = g.v_scale.data();
      g.kv.scale_count = static_cast<int>(g.k_scale.size());
    }
    const size_t bytes = kc::kv_cache_block_bytes(g.kv) * static_cast<size_t>(im.pool->num_blocks);
    try {
      g.k_storage = kc::DeviceBuffer<uint8_t>(bytes);
      g.v_storage = kc::DeviceBuffer<uint8_t>(bytes);
    } catch (const OutOfMemory&) {
      throw OutOfMemory("--device cuda: the KV cache (" + std::to_string(tokens) +
                        " tokens, " + std::to_string(2 * bytes * im.layers.size() >> 20) +
                        " MiB) does not fit on the device: lower kv_cache_tokens / max_seq_len");
    }
    g.kv.k_blocks = g.k_storage.data();
    g.kv.v_blocks = g.v_storage.data();
    im.kv_bytes += 2 * bytes;
  }
}

kernels::AttentionShape attention_shape(const GpuModel::Impl& im, int64_t window) {
  kernels::AttentionShape s;
  s.heads = static_cast<int>(im.heads);
  s.kv_heads = static_cast<int>(im.kv_heads);
  s.head_dim = static_cast<int>(im.head_dim);
  s.window = window;
  s.scale = im.attention_scale;
  return s;
}

void allocate_scratch(GpuModel::Impl& im) {
  const int64_t t = im.options.max_step_tokens;
  const auto rows = static_cast<size_t>(t);
  im.residual = kc::DeviceBuffer<uint16_t>(rows * static_cast<size_t>(im.hidden));
  im.buf_a = kc::DeviceBuffer<uint16_t>(rows * static_cast<size_t>(im.hidden));
  im.buf_b = kc::DeviceBuffer<uint16_t>(rows * static_cast<size_t>(im.hidden));
  im.qkv = kc::DeviceBuffer<uint16_t>(rows * static_cast<size_t>(im.q_width + 2 * im.kv_width));
  im.attn = kc::DeviceBuffer<uint16_t>(rows * static_cast<size_t>(im.q_width));
  im.gate_up = kc::DeviceBuffer<uint16_t>(rows * static_cast<size_t>(2 * im.intermediate));
  im.act = kc::DeviceBuffer<uint16_t>(rows * static_cast<size_t>(im.intermediate));
  size_t ws = 0, attn_ws = 0;
  for (const GpuLayer& g : im.layers) {
    for (const GpuLinear& l : g.qkv) ws = std::max(ws, l.workspace_bytes(t));
    for (const GpuLinear& l : g.gate_up) ws = std::max(ws, l.workspace_bytes(t));
    ws = std::max({ws, g.o.workspace_bytes(t), g.down.workspace_bytes(t)});
    // Decode runs with max_context_len rounded up to a bucket (gpu_forward.cc): every bucket.
    for (int64_t len = 1; ; len *= 2) {
      const int64_t capped = std::min(len, im.options.max_seq_len);
      attn_ws = std::max(attn_ws, kc::decode_attention_workspace_bytes(
                                      attention_shape(im, g.window), 1, static_cast<int>(capped)));
      if (capped == im.options.max_seq_len) break;
    }
  }
  im.workspace = kc::DeviceBuffer<uint8_t>(ws);
  im.attn_workspace = kc::DeviceBuffer<uint8_t>(attn_ws);
  im.logit_rows = std::clamp<int64_t>(
      static_cast<int64_t>(kLogitScratchBytes / (sizeof(float) * static_cast<size_t>(im.vocab))), 1, t);
  im.logits = kc::DeviceBuffer<float>(static_cast<size_t>(im.logit_rows * im.vocab));
  im.logits_host = PinnedBuffer<float>(static_cast<size_t>(im.vocab));
  im.meta = kc::DeviceBuffer<int32_t>(static_cast<size_t>(3 * t + 3 + im.max_blocks_per_seq));
  im.meta_host = PinnedBuffer<int32_t>(im.meta.size());
}

// cos/sin rows [0, max_seq_len) of the frequencies every call uses until dynamic / longrope
// scaling switches (RotaryEmbedding::cos_sin, the CPU's own table code).
void build_rope_table(const models::Model& cpu, GpuModel::Impl& im) {
  models::RopeFrequencies scratch;
  const models::RopeFrequencies& freq = cpu.rotary().frequencies(0, scratch);
  const int64_t half = im.rotary_dim / 2, rows = im.options.max_seq_len;
  std::vector<float> cos(static_cast<size_t>(rows * half)), sin(cos.size());
  models::RotaryEmbedding::cos_sin(freq, 0, rows, cos.data(), sin.data());
  std::vector<float> table(static_cast<size_t>(rows * im.rotary_dim));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(cos.data() + r * half, half, table.data() + r * im.rotary_dim);
    std::copy_n(sin.data() + r * half, half, table.data() + r * im.rotary_dim + half);
  }
  im.rope_table = kc::DeviceBuffer<float>(std::span<const float>(table));
  im.rope_call = kc::DeviceBuffer<float>(static_cast<size_t>(im.options.max_step_tokens * im.rotary_dim));
  im.rope_call_host = PinnedBuffer<float>(im.rope_call.size());
}

void summarize(GpuModel::Impl& im) {
  std::map<std::string, int> kernels;
  size_t bytes = im.lm_head.device_bytes() + im.final_norm.bytes();
  auto count = [&](const GpuLinear& l, bool fused) {
    ++kernels[std::string(l.kernel_name()) + (fused ? " fused" : "")];
    bytes += l.device_bytes();
  };
  for (const GpuLayer& g : im.layers) {
    for (const GpuLinear& l : g.qkv) count(l, g.qkv.size() == 1);
    for (const GpuLinear& l : g.gate_up) count(l, g.gate_up.size() == 1);
    count(g.o, false);
    count(g.down, false);
    bytes += g.input_norm.bytes() + g.post_norm.bytes() + g.q_norm.bytes() + g.k_norm.bytes();
  }
  im.bytes_per_token = static_cast<double>(bytes) + static_cast<double>(im.hidden * 2);
  // A tied head reads the embedding table itself: held once.
  im.weight_bytes = bytes + (im.lm_head.shares_weight() ? 0 : im.embed.bytes());
  std::string s;
  for (const auto& [name, n] : kernels) s += (s.empty() ? "" : ", ") + name + " x " + std::to_string(n);
  im.kernels_summary = s + ", lm_head bf16 -> fp32 logits";
}

void resolve_options(const models::ModelConfig& c, GpuModelOptions& o) {
  LOWBIT_CHECK(o.block_size >= 1, "--device cuda: block_size must be >= 1");
  LOWBIT_CHECK(o.max_seq_len >= 0 && o.max_step_tokens >= 1 && o.kv_cache_tokens >= 0,
               "--device cuda: max_seq_len, max_step_tokens and kv_cache_tokens must be >= 0 (>= 1)");
  if (o.max_seq_len == 0) o.max_seq_len = std::min(c.max_position_embeddings, kDefaultMaxSeqLen);
  o.max_seq_len = std::max<int64_t>(o.max_seq_len, 1);
  o.max_step_tokens = std::min(o.max_step_tokens, o.max_seq_len);
  if (o.kv_cache_tokens == 0) o.kv_cache_tokens = 2 * o.max_seq_len;
  LOWBIT_CHECK(o.kv_cache_tokens >= o.max_seq_len,
               "--device cuda: kv_cache_tokens (" + std::to_string(o.kv_cache_tokens) +
                   ") must hold at least one sequence of max_seq_len (" +
                   std::to_string(o.max_seq_len) + ")");
}

}  // namespace

void upload_weights(const models::Model& cpu, GpuModel::Impl& im) {
  const models::ModelConfig& c = cpu.config();
  const models::DecoderWeights& w = cpu.weights();
  check_supported(c, w);
  im.hidden = c.hidden_size;
  im.vocab = c.vocab_size;
  im.heads = c.num_heads;
  im.kv_heads = c.num_kv_heads;
  im.head_dim = c.head_dim;
  im.rotary_dim = c.rotary_dim();
  im.q_width = im.heads * im.head_dim;
  im.kv_width = im.kv_heads * im.head_dim;
  im.eps = static_cast<float>(c.rms_norm_eps);
  im.embed_scale = w.embed_scale;
  im.attention_scale = models::attention_scale(c.head_dim);
  im.embed = kc::DeviceBuffer<uint16_t>(std::span<const uint16_t>(to_bf16_bits(w.embed)));
  im.layers.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) upload_layer(cpu, l, im, im.layers[l]);
  im.final_norm = upload_f32(w.final_norm);
  // A tied head is the embedding matrix itself (same tensor): one device copy serves both.
  const bool tied = !w.lm_head.method && !w.lm_head.input_quant &&
                    w.lm_head.weight.data() == w.embed.data() &&
                    w.lm_head.weight.shape() == w.embed.shape();
  im.lm_head = GpuLinear::lm_head(w.lm_head, cpu.quantization(), tied ? im.embed.data() : nullptr);
  summarize(im);
}

GpuModel::Impl::~Impl() {
  for (DecodeGraph& g : graphs) {
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
}

GpuModel::GpuModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuModel::~GpuModel() = default;

std::unique_ptr<GpuModel> GpuModel::load(const models::Model& cpu_model,
                                         const GpuModelOptions& options) {
  require_device(options.device);
  auto im = std::make_unique<Impl>();
  im->cpu = &cpu_model;
  im->options = options;
  resolve_options(cpu_model.config(), im->options);
  im->device = options.device;
  im->graphs_enabled = options.cuda_graphs;
  LOWBIT_CUDA_CHECK(cudaSetDevice(im->device));
  cudaDeviceProp props{};
  LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, im->device));
  im->device_name = props.name;
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
  im->blas = std::make_unique<kc::BlasLt>();
  upload_weights(cpu_model, *im);
  allocate_kv(cpu_model, *im);
  allocate_scratch(*im);
  build_rope_table(cpu_model, *im);
  log_info("GPU model on " + im->device_name + ": " +
           std::to_string(im->weight_bytes >> 20) + " MiB of weights (" + im->kernels_summary +
           "), KV cache " + std::to_string(im->options.kv_cache_tokens) + " tokens (" +
           std::to_string(im->kv_bytes >> 20) + " MiB)");
  return std::unique_ptr<GpuModel>(new GpuModel(std::move(im)));
}

const models::Model& GpuModel::cpu_model() const { return *impl_->cpu; }
const GpuModelOptions& GpuModel::options() const { return impl_->options; }
std::string GpuModel::device_name() const { return impl_->device_name; }
double GpuModel::weight_bytes_per_token() const { return impl_->bytes_per_token; }
size_t GpuModel::weight_device_bytes() const { return impl_->weight_bytes; }
size_t GpuModel::kv_cache_device_bytes() const { return impl_->kv_bytes; }
std::string GpuModel::describe() const { return impl_->kernels_summary; }

}  // namespace lowbit::gpu
