// GpuModel::load: checks what the GPU backend can run, uploads each GPU's part of the weights (fusing
// dense q/k/v and gate/up), allocates the KV pool and the scratch of one pass per GPU.
#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "core/log.h"
#include "gpu/gpu_impl.h"
#include "gpu/gpu_kernels.h"
#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"
#include "models/layers/attention.h"
#include "models/model.h"

namespace lowbit::gpu {

namespace kc = kernels::cuda;

namespace {

constexpr int64_t kDefaultMaxSeqLen = 32768;
constexpr size_t kLogitScratchBytes = size_t(256) << 20;
constexpr int64_t kPeerAllReduceRows = 64;

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

// A norm's weights, or ones (random_weights: the CPU tensors are not read).
kc::DeviceBuffer<float> upload_norm(const Shard& im, const std::vector<float>& v, int64_t size) {
  return upload_f32(im.options.random_weights ? std::vector<float>(static_cast<size_t>(size), 1.0f) : v);
}

// Random dense weights of a layer's part: `seed` differs per layer, projection and rank.
void random_layer(Shard& im, size_t index, GpuLayer& g) {
  const uint64_t seed = (static_cast<uint64_t>(index) << 20) + (static_cast<uint64_t>(im.plan.rank) << 8);
  g.qkv.push_back(GpuLinear::random_dense(im.q_width + 2 * im.kv_width, im.hidden, seed + 1));
  g.o = GpuLinear::random_dense(im.hidden, im.q_width, seed + 2);
  g.gate_up.push_back(GpuLinear::random_dense(2 * im.intermediate, im.hidden, seed + 3));
  g.down = GpuLinear::random_dense(im.hidden, im.intermediate, seed + 4);
}

void upload_layer(const models::Model& cpu, size_t index, Shard& im, GpuLayer& g) {
  const models::LayerWeights& l = cpu.weights().layers[index];
  const std::string method = cpu.quantization();
  const std::string prefix = "model.layers." + std::to_string(index) + ".";
  const TpPlan& plan = im.plan;
  const int rank = plan.rank;
  g.input_norm = upload_norm(im, l.input_norm, im.hidden);
  g.post_norm = upload_norm(im, l.post_attention_norm, im.hidden);
  const models::AttentionWeights& a = l.attention;
  if (!a.q_norm.empty()) {
    g.q_norm = upload_norm(im, a.q_norm, im.head_dim);
    g.k_norm = upload_norm(im, a.k_norm, im.head_dim);
  }
  g.window = l.sliding_window;
  const models::MlpWeights& m = l.mlp;
  LOWBIT_CHECK_AS(Unsupported, m.down.in_features() == im.intermediate * plan.world,
                  "--device cuda: " + prefix + "mlp has a different intermediate size than layer 0");
  if (im.options.random_weights) {
    random_layer(im, index, g);
    return;
  }
  const Split q_rows = plan.q_rows(im.head_dim), kv_rows = plan.kv_rows(im.head_dim);
  // Fused when every part is dense, or all are FP8 W8A8 / weight-only int layers of one layout (one
  // launch instead of three); q/k norms want q and k as dense [rows · heads, head_dim].
  std::optional<GpuLinear> quant_qkv;
  if (a.q_norm.empty()) {
    quant_qkv = GpuLinear::fused_fp8({&a.q, &a.k, &a.v}, {q_rows, kv_rows, kv_rows}, rank,
                                   prefix + "self_attn.qkv_proj");
    if (!quant_qkv) {
      quant_qkv = GpuLinear::fused_wna16({&a.q, &a.k, &a.v}, {q_rows, kv_rows, kv_rows}, rank,
                                       prefix + "self_attn.qkv_proj");
    }
  }
  if (is_dense(a.q) && is_dense(a.k) && is_dense(a.v) && a.q_norm.empty()) {
    g.qkv.push_back(GpuLinear::fused_dense({&a.q, &a.k, &a.v}, {q_rows, kv_rows, kv_rows},
                                           prefix + "self_attn.qkv_proj"));
  } else if (quant_qkv) {
    g.qkv.push_back(std::move(*quant_qkv));
  } else {
    g.qkv.push_back(GpuLinear::from(a.q, q_rows, rank, prefix + "self_attn.q_proj", method));
    g.qkv.push_back(GpuLinear::from(a.k, kv_rows, rank, prefix + "self_attn.k_proj", method));
    g.qkv.push_back(GpuLinear::from(a.v, kv_rows, rank, prefix + "self_attn.v_proj", method));
  }
  g.o = GpuLinear::from(a.o, plan.o_cols(im.head_dim), rank, prefix + "self_attn.o_proj", method);
  const Split mlp_rows = plan.mlp_rows();
  std::optional<GpuLinear> quant_gate_up =
      GpuLinear::fused_fp8({&m.gate, &m.up}, {mlp_rows, mlp_rows}, rank, prefix + "mlp.gate_up_proj");
  if (!quant_gate_up) {
    quant_gate_up = GpuLinear::fused_wna16({&m.gate, &m.up}, {mlp_rows, mlp_rows}, rank,
                                         prefix + "mlp.gate_up_proj");
  }
  if (is_dense(m.gate) && is_dense(m.up)) {
    g.gate_up.push_back(GpuLinear::fused_dense({&m.gate, &m.up}, {mlp_rows, mlp_rows},
                                               prefix + "mlp.gate_up_proj"));
  } else if (quant_gate_up) {
    g.gate_up.push_back(std::move(*quant_gate_up));
  } else {
    g.gate_up.push_back(GpuLinear::from(m.gate, mlp_rows, rank, prefix + "mlp.gate_proj", method));
    g.gate_up.push_back(GpuLinear::from(m.up, mlp_rows, rank, prefix + "mlp.up_proj", method));
  }
  g.down = GpuLinear::from(m.down, plan.mlp_cols(), rank, prefix + "mlp.down_proj", method);
}

// This rank's part of a per-KV-head scale vector (a per-tensor scale is everyone's).
std::vector<float> kv_scale_part(const Shard& im, std::vector<float> scale) {
  if (scale.size() <= 1 || im.plan.world == 1) return scale;
  const auto begin = scale.begin() + im.plan.kv_head_begin;
  return std::vector<float>(begin, begin + im.kv_heads);
}

// The KV cache of each layer: bf16, or fp8 e4m3 with the CPU quantizer's scales.
void allocate_kv(const models::Model& cpu, Shard& im) {
  const models::KvCacheQuantizer* q = cpu.kv_cache_quantizer();
  if (q != nullptr && q->active()) {
    const std::string d = q->describe();
    if (d.rfind("fp8_e4m3", 0) != 0 || d.find("first batch") != std::string::npos) {
      throw Unsupported("--device cuda: KV cache " + d +
                        ": the GPU backend runs fp8_e4m3 caches with fixed scales only");
    }
  }
  const int64_t tokens = im.options.kv_cache_tokens;
  for (size_t l = 0; l < im.layers.size(); ++l) {
    GpuLayer& g = im.layers[l];
    g.kv.block_size = im.options.block_size;
    g.kv.kv_heads = static_cast<int>(im.kv_heads);
    g.kv.head_dim = static_cast<int>(im.head_dim);
    if (q != nullptr && q->quantizes(static_cast<int64_t>(l))) {
      g.kv.dtype = kc::KvCacheDtype::FP8_E4M3;
      g.k_scale = upload_f32(kv_scale_part(im, q->k_scale(static_cast<int64_t>(l))));
      g.v_scale = upload_f32(kv_scale_part(im, q->v_scale(static_cast<int64_t>(l))));
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

kernels::AttentionShape attention_shape(const Shard& im, int64_t window) {
  kernels::AttentionShape s;
  s.heads = static_cast<int>(im.heads);
  s.kv_heads = static_cast<int>(im.kv_heads);
  s.head_dim = static_cast<int>(im.head_dim);
  s.window = window;
  s.scale = im.attention_scale;
  return s;
}

void allocate_scratch(Shard& im) {
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
  ws = std::max(ws, im.lm_head.workspace_bytes_f32(t));
  im.workspace = kc::DeviceBuffer<uint8_t>(ws);
  im.attn_workspace = kc::DeviceBuffer<uint8_t>(attn_ws);
  const auto vocab_rows = static_cast<size_t>(std::max<int64_t>(im.vocab_rows, 1));
  im.logit_rows = std::clamp<int64_t>(
      static_cast<int64_t>(kLogitScratchBytes / (sizeof(float) * vocab_rows)), 1, t);
  im.logits = kc::DeviceBuffer<float>(static_cast<size_t>(im.logit_rows) * vocab_rows);
  im.logits_host = PinnedBuffer<float>(vocab_rows);
  const int64_t seqs = im.options.max_batch_size;
  im.meta = kc::DeviceBuffer<int32_t>(
      static_cast<size_t>(3 * t + 3 * seqs + 1 + seqs * im.max_blocks_per_seq));
  im.meta_host = PinnedBuffer<int32_t>(im.meta.size());
  im.argmax = kc::DeviceBuffer<int32_t>(static_cast<size_t>(2 * seqs));
  im.argmax_host = PinnedBuffer<int32_t>(im.argmax.size());
}

// cos/sin rows [0, max_seq_len) of the frequencies every call uses until dynamic / longrope
// scaling switches (RotaryEmbedding::cos_sin, the CPU's own table code).
void build_rope_table(const models::Model& cpu, Shard& im) {
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

void summarize(Shard& im) {
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
  im.kernels_summary = s + ", lm_head " + im.lm_head.kernel_name() + " -> fp32 logits";
}

void resolve_options(const models::ModelConfig& c, GpuModelOptions& o) {
  LOWBIT_CHECK(o.block_size >= 1, "--device cuda: block_size must be >= 1");
  LOWBIT_CHECK(o.max_batch_size >= 1, "--device cuda: max_batch_size must be >= 1");
  LOWBIT_CHECK(o.max_seq_len >= 0 && o.max_step_tokens >= 1 && o.kv_cache_tokens >= 0,
               "--device cuda: max_seq_len, max_step_tokens and kv_cache_tokens must be >= 0 (>= 1)");
  if (o.max_seq_len == 0) o.max_seq_len = std::min(c.max_position_embeddings, kDefaultMaxSeqLen);
  o.max_seq_len = std::max<int64_t>(o.max_seq_len, 1);
  o.max_step_tokens = std::min(o.max_step_tokens, o.max_seq_len);
  LOWBIT_CHECK(o.gpu_memory_utilization >= 0 && o.gpu_memory_utilization <= 1,
               "--gpu-memory-utilization must be in (0, 1]");
  if (o.kv_cache_tokens == 0 && o.gpu_memory_utilization > 0) return;  // sized after the weights
  if (o.kv_cache_tokens == 0) o.kv_cache_tokens = 2 * o.max_seq_len;
  LOWBIT_CHECK(o.kv_cache_tokens >= o.max_seq_len,
               "--device cuda: kv_cache_tokens (" + std::to_string(o.kv_cache_tokens) +
                   ") must hold at least one sequence of max_seq_len (" +
                   std::to_string(o.max_seq_len) + ")");
}

}  // namespace

void upload_weights(const models::Model& cpu, Shard& im) {
  const models::ModelConfig& c = cpu.config();
  const models::DecoderWeights& w = cpu.weights();
  check_supported(c, w);
  const TpPlan& plan = im.plan;
  im.hidden = c.hidden_size;
  im.vocab = c.vocab_size;
  im.vocab_begin = plan.vocab_begin;
  im.vocab_rows = plan.vocab_rows;
  im.heads = plan.heads;
  im.kv_heads = plan.kv_heads;
  im.head_dim = c.head_dim;
  im.rotary_dim = c.rotary_dim();
  im.q_width = im.heads * im.head_dim;
  im.kv_width = im.kv_heads * im.head_dim;
  im.intermediate = plan.intermediate;
  im.eps = static_cast<float>(c.rms_norm_eps);
  im.embed_scale = w.embed_scale;
  im.attention_scale = models::attention_scale(c.head_dim);
  const bool random = im.options.random_weights;
  const Split vocab = plan.vocab();
  if (random) {
    im.embed = kc::DeviceBuffer<uint16_t>(static_cast<size_t>(im.vocab_rows * im.hidden));
    fill_random_bf16(im.embed.data(), im.vocab_rows * im.hidden, (uint64_t{1} << 40) + plan.rank);
  } else {
    im.embed = kc::DeviceBuffer<uint16_t>(std::span<const uint16_t>(
        slice_matrix(to_bf16_bits(w.embed), im.vocab, im.hidden, vocab)));
  }
  im.layers.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) upload_layer(cpu, l, im, im.layers[l]);
  im.final_norm = upload_norm(im, w.final_norm, im.hidden);
  // A tied head is the embedding matrix itself (same tensor): one device copy serves both.
  const bool tied = !w.lm_head.method && !w.lm_head.input_quant &&
                    w.lm_head.weight.data() == w.embed.data() &&
                    w.lm_head.weight.shape() == w.embed.shape();
  if (random) {
    im.lm_head = tied ? GpuLinear::dense_view(im.embed.data(), im.vocab_rows, im.hidden)
                      : GpuLinear::random_dense(im.vocab_rows, im.hidden, (uint64_t{2} << 40) + plan.rank);
  } else {
    im.lm_head = GpuLinear::lm_head(w.lm_head, vocab, cpu.quantization(),
                                    tied ? im.embed.data() : nullptr);
  }
  summarize(im);
}

Shard::~Shard() {
  for (DecodeGraph& g : graphs) {
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
}

namespace {

// One GPU's part: weights, scratch, RoPE table; on the calling thread (its device set). The KV
// cache comes after, once its size is known on every GPU.
void load_shard(const models::Model& cpu, Shard& im) {
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  cudaDeviceProp props{};
  LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, im.device));
  im.device_name = props.name;
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&im.stream, cudaStreamNonBlocking));
  im.blas = std::make_unique<kc::BlasLt>();
  upload_weights(cpu, im);
  im.max_blocks_per_seq =
      static_cast<int>((im.options.max_seq_len + im.options.block_size - 1) / im.options.block_size);
  allocate_scratch(im);
  build_rope_table(cpu, im);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads and fills are done before any use
}

// KV tokens that fit in `fraction` of this GPU's memory beside what is allocated already.
int64_t kv_tokens_that_fit(const models::Model& cpu, Shard& im, double fraction) {
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  size_t free_bytes = 0, total_bytes = 0;
  LOWBIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const models::KvCacheQuantizer* q = cpu.kv_cache_quantizer();
  int64_t per_token = 0;
  for (size_t l = 0; l < im.layers.size(); ++l) {
    const bool fp8 = q != nullptr && q->active() && q->quantizes(static_cast<int64_t>(l));
    per_token += 2 * im.kv_heads * im.head_dim * (fp8 ? 1 : 2);
  }
  const double budget = static_cast<double>(total_bytes) * fraction -
                        static_cast<double>(total_bytes - free_bytes);
  // Decode-attention scratch of a full batch grows with it: keep 5% of the budget for it.
  return budget > 0 ? static_cast<int64_t>(0.95 * budget / static_cast<double>(per_token)) : 0;
}

// Sizes the KV pool from gpu_memory_utilization when asked (the smallest GPU's room decides).
void size_kv_cache(const models::Model& cpu, GpuModel::Impl& im) {
  GpuModelOptions& o = im.options;
  if (o.kv_cache_tokens > 0) return;
  int64_t tokens = o.max_batch_size * o.max_seq_len;
  for (auto& shard : im.shards) {
    tokens = std::min(tokens, kv_tokens_that_fit(cpu, *shard, o.gpu_memory_utilization));
  }
  if (tokens < o.max_seq_len) {
    throw OutOfMemory("--device cuda: --gpu-memory-utilization " +
                      std::to_string(o.gpu_memory_utilization) + " leaves room for " +
                      std::to_string(tokens) + " KV-cache tokens after the weights, less than one "
                      "sequence of " + std::to_string(o.max_seq_len) +
                      ": raise it, lower --max-model-len, or use more GPUs");
  }
  o.kv_cache_tokens = tokens;
  for (auto& shard : im.shards) shard->options.kv_cache_tokens = tokens;
}

std::shared_ptr<BlockPool> make_pool(const GpuModelOptions& o) {
  auto pool = std::make_shared<BlockPool>();
  pool->block_size = o.block_size;
  pool->num_blocks = (o.kv_cache_tokens + o.block_size - 1) / o.block_size;
  LOWBIT_CHECK(pool->num_blocks < (int64_t{1} << 31) / o.block_size,
               "--device cuda: kv_cache_tokens is too large");
  for (int64_t b = pool->num_blocks - 1; b >= 0; --b) pool->free.push_back(static_cast<int32_t>(b));
  return pool;
}

}  // namespace

GpuModel::GpuModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuModel::~GpuModel() = default;

std::unique_ptr<GpuModel> GpuModel::load(const models::Model& cpu_model,
                                         const GpuModelOptions& options) {
  const int world = options.tensor_parallel_size;
  LOWBIT_CHECK(world >= 1, "--tensor-parallel-size must be >= 1 (got " + std::to_string(world) + ")");
  require_device(options.device);
  if (world > 1) require_device(options.device + world - 1);
  auto im = std::make_unique<Impl>();
  im->cpu = &cpu_model;
  im->options = options;
  resolve_options(cpu_model.config(), im->options);
  const models::ModelConfig& c = cpu_model.config();
  if (im->options.random_weights) {
    LOWBIT_CHECK_AS(Unsupported, cpu_model.quantization().rfind("none", 0) == 0,
                    "--random-weights: " + c.source + " is quantized (" + cpu_model.quantization() +
                        "); random weights are made for unquantized checkpoints only");
  }
  const int64_t intermediate = cpu_model.weights().layers.empty()
                                   ? 0
                                   : cpu_model.weights().layers[0].mlp.down.in_features();
  std::vector<int> devices;
  for (int r = 0; r < world; ++r) devices.push_back(options.device + r);
  if (world > 1) {
    im->nccl = std::make_unique<NcclGroup>(devices);
    // Up to kPeerAllReduceRows rows of the residual stream: decode steps and short chunks.
    if (options.peer_all_reduce) {
      im->peer = PeerAllReduce::create(devices, kPeerAllReduceRows * c.hidden_size);
    }
  }
  for (int r = 0; r < world; ++r) {
    auto shard = std::make_unique<Shard>();
    shard->cpu = &cpu_model;
    shard->options = im->options;
    shard->device = devices[static_cast<size_t>(r)];
    shard->plan = plan_tensor_parallel(c, intermediate, r, world);
    shard->nccl = im->nccl.get();
    shard->peer = im->peer.get();
    shard->graphs_enabled = options.cuda_graphs;
    im->shards.push_back(std::move(shard));
  }
  run_per_rank(world, [&](int r) { load_shard(cpu_model, *im->shards[static_cast<size_t>(r)]); });
  size_kv_cache(cpu_model, *im);
  im->pool = make_pool(im->options);
  run_per_rank(world, [&](int r) {
    Shard& shard = *im->shards[static_cast<size_t>(r)];
    shard.pool = im->pool;
    LOWBIT_CUDA_CHECK(cudaSetDevice(shard.device));
    allocate_kv(cpu_model, shard);
  });
  size_t weights = 0, kv = 0;
  for (const auto& s : im->shards) {
    weights += s->weight_bytes;
    kv += s->kv_bytes;
  }
  const Shard& first = *im->shards.front();
  log_info("GPU model on " + (world > 1 ? std::to_string(world) + " x " : "") + first.device_name +
           ": " + std::to_string(weights >> 20) + " MiB of weights (" + first.kernels_summary +
           (world > 1 ? " per GPU" : "") + "), KV cache " +
           std::to_string(im->options.kv_cache_tokens) + " tokens (" + std::to_string(kv >> 20) +
           " MiB)");
  return std::unique_ptr<GpuModel>(new GpuModel(std::move(im)));
}

const models::Model& GpuModel::cpu_model() const { return *impl_->cpu; }
const GpuModelOptions& GpuModel::options() const { return impl_->options; }
int GpuModel::tensor_parallel_size() const { return static_cast<int>(impl_->shards.size()); }
std::string GpuModel::device_name() const {
  const std::string& name = impl_->shards.front()->device_name;
  return impl_->shards.size() > 1 ? std::to_string(impl_->shards.size()) + " x " + name : name;
}
double GpuModel::weight_bytes_per_token() const {
  double bytes = 0;
  for (const auto& s : impl_->shards) bytes += s->bytes_per_token;
  return bytes;
}
size_t GpuModel::weight_device_bytes() const {
  size_t bytes = 0;
  for (const auto& s : impl_->shards) bytes += s->weight_bytes;
  return bytes;
}
size_t GpuModel::kv_cache_device_bytes() const {
  size_t bytes = 0;
  for (const auto& s : impl_->shards) bytes += s->kv_bytes;
  return bytes;
}
std::string GpuModel::describe() const {
  const Shard& s = *impl_->shards.front();
  if (impl_->shards.size() == 1) return s.kernels_summary;
  return "tensor parallel x " + std::to_string(impl_->shards.size()) +
         (impl_->peer ? " (NCCL; peer all-reduce up to " + std::to_string(kPeerAllReduceRows) + " rows)"
                      : " (NCCL)") +
         ", per GPU: " + s.kernels_summary;
}

}  // namespace lowbit::gpu
