#include "device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>

#include "lowbit/error.h"
#include "models/model.h"
#include "runtime/sampler.h"
#include "runtime/stop_strings.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"

#include "quant/pipeline/calibration_backend.h"

#ifdef LOWBIT_CUDA_BACKEND
#include "gpu/gpu_batch_runner.h"
#include "gpu/gpu_model.h"
#include "quant/gpu/multi_gpu_calibration.h"
#endif

namespace lowbit::cli {

void add_device_option(CLI::App* app, DeviceOptions& options) {
  app->add_option("--device", options.device, "Where the model runs: cpu, or cuda (the GPU backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app->add_option("--tensor-parallel-size,--tp", options.tensor_parallel_size,
                  "GPUs to split the model over (tensor parallelism over NCCL; --device cuda; "
                  "GPUs 0..N-1)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

bool use_cuda(const DeviceOptions& options) {
  if (options.device != "cuda") {
    LOWBIT_CHECK(options.tensor_parallel_size == 1,
                 "--tensor-parallel-size " + std::to_string(options.tensor_parallel_size) +
                     " splits a model over GPUs: add --device cuda");
    return false;
  }
#ifndef LOWBIT_CUDA_BACKEND
  throw Unsupported("--device cuda: this lowbit was built without the CUDA backend "
                    "(configure with -DLOWBIT_CUDA=ON on a machine with nvcc)");
#else
  return true;
#endif
}

std::unique_ptr<quant::CalibrationBackend> make_calibration_backend(const DeviceOptions& options) {
  LOWBIT_CHECK(options.device == "cuda" || options.tensor_parallel_size == 1,
               "--tensor-parallel-size " + std::to_string(options.tensor_parallel_size) +
                   " quantizes on several GPUs: add --device cuda");
  if (!use_cuda(options)) return nullptr;
#ifdef LOWBIT_CUDA_BACKEND
  // GPU 0 alone, or data-parallel calibration over GPUs 0 .. N-1.
  return quant::gpu::make_multi_gpu_calibration_backend(options.tensor_parallel_size);
#else
  return nullptr;  // not reached: use_cuda throws in a build without the backend
#endif
}

#ifndef LOWBIT_CUDA_BACKEND

namespace {
[[noreturn]] void no_backend() {
  throw Unsupported("--device cuda: this lowbit was built without the CUDA backend");
}
}  // namespace

std::unique_ptr<models::Model> load_model_on(const DeviceOptions& device, const std::string& dir,
                                             const models::LoadOptions& options) {
  if (use_cuda(device)) no_backend();
  return models::Model::load(dir, options);
}
runtime::GenerationResult generate_cuda(const models::Model&, const Tokenizer*,
                                        const runtime::GenerationRequest&,
                                        const runtime::TokenCallback&, const DeviceOptions&) {
  no_backend();
}
eval::PerplexityResult perplexity_cuda(const models::Model&, const std::vector<int32_t>&,
                                       const eval::PerplexityOptions&,
                                       const std::function<void(int64_t, int64_t)>&,
                                       const DeviceOptions&) {
  no_backend();
}
int run_bench_cuda(const models::Model&, const CudaBenchOptions&) { no_backend(); }
std::shared_ptr<models::BatchRunner> make_cuda_serve_runner(const models::Model&,
                                                           const DeviceOptions&,
                                                           const CudaServeOptions&) {
  no_backend();
}
eval::WindowLogits cuda_window_logits(const models::Model&, const DeviceOptions&, int64_t) {
  no_backend();
}

#else  // LOWBIT_CUDA_BACKEND

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::unique_ptr<models::Model> load_model_on(const DeviceOptions& device, const std::string& dir,
                                             const models::LoadOptions& options) {
  if (use_cuda(device)) {
    for (int d = 1; d < device.tensor_parallel_size; ++d) gpu::require_device(d);
    return gpu::load_model_for_gpu(dir, options, /*device=*/0);
  }
  return models::Model::load(dir, options);
}

// The loop of runtime::Generator::generate (runtime/generator.cc) over a GpuModel.
runtime::GenerationResult generate_cuda(const models::Model& model, const Tokenizer* tokenizer,
                                        const runtime::GenerationRequest& request,
                                        const runtime::TokenCallback& on_token,
                                        const DeviceOptions& device) {
  LOWBIT_CHECK(!request.prompt_ids.empty(), "the prompt is empty: give at least one token");
  LOWBIT_CHECK(request.max_new_tokens >= 0, "max_new_tokens must be >= 0");
  LOWBIT_CHECK(request.stop.empty() || tokenizer != nullptr,
               "stop strings need a tokenizer, and this model has none");
  gpu::GpuModelOptions gpu_options;
  gpu_options.max_seq_len = static_cast<int64_t>(request.prompt_ids.size()) + request.max_new_tokens;
  gpu_options.tensor_parallel_size = device.tensor_parallel_size;
  auto gpu = gpu::GpuModel::load(model, gpu_options);
  gpu::GpuSequence sequence = gpu->new_sequence();

  runtime::GenerationResult result;
  runtime::Sampler sampler(request.sampling);
  runtime::StopStringMatcher stops(request.stop);
  std::optional<DecodeStream> stream;
  if (tokenizer) stream.emplace(*tokenizer, /*skip_special_tokens=*/true, request.prompt_ids);
  std::vector<int32_t> context = request.prompt_ids;
  const int64_t vocab = model.config().vocab_size;

  auto start = std::chrono::steady_clock::now();
  Tensor logits = gpu->forward(request.prompt_ids, sequence, /*all_logits=*/false);
  result.prefill_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  for (int32_t step = 0; step < request.max_new_tokens; ++step) {
    if (step > 0) {
      if (model.needs_reprefill(sequence.length(), static_cast<int64_t>(context.size()))) {
        sequence.clear();  // positions changed meaning (Phi3 longrope): recompute the cache
        logits = gpu->forward(context, sequence, false);
      } else {
        logits = gpu->forward(std::span<const int32_t>(&context.back(), 1), sequence, false);
      }
    }
    std::span<float> row(logits.data_as<float>(), static_cast<size_t>(vocab));
    const int32_t id = sampler.sample(row, context);
    context.push_back(id);
    result.output_ids.push_back(id);
    const bool is_eos = !request.ignore_eos && std::find(request.eos_ids.begin(),
                                                         request.eos_ids.end(), id) != request.eos_ids.end();
    std::string piece;
    if (stream && !is_eos) piece = stops.push(stream->step(id));
    result.text += piece;
    if (on_token) on_token(id, piece);
    if (is_eos || stops.stopped()) {
      result.finish_reason = runtime::FinishReason::STOP;
      break;
    }
  }
  if (stream && !stops.stopped()) {
    std::string tail = stops.push(stream->flush());
    tail += stops.flush();
    result.text += tail;
    if (on_token && !tail.empty()) on_token(-1, tail);
  }
  result.decode_seconds = seconds_since(start);
  return result;
}

eval::PerplexityResult perplexity_cuda(const models::Model& model,
                                       const std::vector<int32_t>& tokens,
                                       const eval::PerplexityOptions& options,
                                       const std::function<void(int64_t, int64_t)>& progress,
                                       const DeviceOptions& device) {
  return eval::perplexity(cuda_window_logits(model, device, options.context),
                          model.config().vocab_size, tokens, options, progress);
}

namespace {

// Decode tok/s of `batch` sequences stepping together (GpuModel::forward_batch, what continuous
// batching runs): each sequence prefilled with its own 8-token prompt, then decode_tokens batched
// steps with a host argmax per sequence; best of `repeats` rounds after a warm-up round, the first
// step of each round excluded. Returns tokens of all sequences per second.
double batched_decode_tps(gpu::GpuModel& gpu, const std::vector<int32_t>& prompt, int64_t batch,
                          const CudaBenchOptions& options) {
  const auto vocab = static_cast<size_t>(gpu.cpu_model().config().vocab_size);
  std::vector<gpu::GpuSequence> seqs;
  for (int64_t b = 0; b < batch; ++b) seqs.push_back(gpu.new_sequence());
  double best = 1e30;
  for (int r = 0; r <= options.repeats; ++r) {
    std::vector<int32_t> next(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      seqs[static_cast<size_t>(b)].clear();
      const size_t shift = static_cast<size_t>(b) % (prompt.size() - 7);  // distinct prompts
      const Tensor logits = gpu.forward(std::span<const int32_t>(prompt.data() + shift, 8),
                                        seqs[static_cast<size_t>(b)], false);
      next[static_cast<size_t>(b)] = runtime::argmax({logits.data_as<const float>(), vocab});
    }
    double start = now_seconds();
    for (int64_t step = 0; step < options.decode_tokens; ++step) {
      if (step == 1) start = now_seconds();
      std::vector<gpu::GpuModel::BatchItem> items;
      for (int64_t b = 0; b < batch; ++b) {
        items.push_back({std::span<const int32_t>(&next[static_cast<size_t>(b)], 1),
                         &seqs[static_cast<size_t>(b)], false});
      }
      const std::vector<Tensor> logits = gpu.forward_batch(items);
      for (int64_t b = 0; b < batch; ++b) {
        next[static_cast<size_t>(b)] =
            runtime::argmax({logits[static_cast<size_t>(b)].data_as<const float>(), vocab});
      }
    }
    const double per_step = (now_seconds() - start) / static_cast<double>(options.decode_tokens - 1);
    if (r > 0) best = std::min(best, per_step);
  }
  return static_cast<double>(batch) / best;
}

}  // namespace

int run_bench_cuda(const models::Model& model, const CudaBenchOptions& options) {
  const models::ModelConfig& config = model.config();
  gpu::GpuModelOptions gpu_options;
  gpu_options.max_seq_len = std::max<int64_t>(options.prompt_tokens, 8) + options.decode_tokens;
  gpu_options.tensor_parallel_size = options.tensor_parallel_size;
  gpu_options.random_weights = options.random_weights;
  gpu_options.kv_cache_tokens = gpu_options.max_seq_len * std::max<int64_t>(2, options.batch);
  gpu_options.max_batch_size = std::max<int64_t>(options.batch, 1);
  // LOWBIT_TP_ALL_REDUCE=nccl: every all-reduce through NCCL (to measure the peer kernel's gain).
  const char* all_reduce = std::getenv("LOWBIT_TP_ALL_REDUCE");
  gpu_options.peer_all_reduce = all_reduce == nullptr || std::string(all_reduce) != "nccl";
  auto gpu = gpu::GpuModel::load(model, gpu_options);
  // Each GPU streams its own part of the weights: the limit is N devices' bandwidth.
  const double bandwidth =
      gpu::measure_device_read_bandwidth_gbps(0) * static_cast<double>(options.tensor_parallel_size);
  constexpr double kSpecGbpsPerGpu = 4800.0;  // H200 HBM3e
  const double spec_gbps = kSpecGbpsPerGpu * static_cast<double>(options.tensor_parallel_size);

  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> any_token(
      0, static_cast<int32_t>(std::min<int64_t>(config.vocab_size, 8192)) - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(std::max<int64_t>(options.prompt_tokens, 8)));
  for (auto& id : prompt) id = any_token(rng);
  const std::span<const int32_t> full(prompt.data(), static_cast<size_t>(options.prompt_tokens));
  gpu::GpuSequence sequence = gpu->new_sequence();

  double prefill_best = 1e30;
  for (int r = 0; r <= options.repeats; ++r) {  // round 0 warms up (cuBLASLt plans)
    sequence.clear();
    const double start = now_seconds();
    gpu->forward(full, sequence, /*all_logits=*/false);
    if (r > 0) prefill_best = std::min(prefill_best, now_seconds() - start);
  }
  // Decode after an 8-token prompt, with a host argmax per step like the CPU bench; round 0 warms
  // up (plans, CUDA graph capture), and the first step of each round is excluded.
  double decode_best = 1e30;
  for (int r = 0; r <= options.repeats; ++r) {
    sequence.clear();
    Tensor logits = gpu->forward(std::span<const int32_t>(prompt.data(), 8), sequence, false);
    int32_t next = runtime::argmax({logits.data_as<const float>(), static_cast<size_t>(config.vocab_size)});
    double start = now_seconds();
    for (int64_t step = 0; step < options.decode_tokens; ++step) {
      if (step == 1) start = now_seconds();
      logits = gpu->forward(std::span<const int32_t>(&next, 1), sequence, false);
      next = runtime::argmax({logits.data_as<const float>(), static_cast<size_t>(config.vocab_size)});
    }
    const double per_step = (now_seconds() - start) / static_cast<double>(options.decode_tokens - 1);
    if (r > 0) decode_best = std::min(decode_best, per_step);
  }
  const double batch_tps = options.batch > 1 ? batched_decode_tps(*gpu, prompt, options.batch, options) : 0;
  const double bytes = gpu->weight_bytes_per_token();
  const double prefill_tps = static_cast<double>(options.prompt_tokens) / prefill_best;
  const double decode_tps = 1.0 / decode_best;
  const double weight_gbps = bytes * decode_tps / 1e9;
  const double limit_tps = bandwidth * 1e9 / bytes;
  const double spec_limit_tps = spec_gbps * 1e9 / bytes;
  if (options.json) {
    std::printf(
        "{\"model\": \"%s\", \"architecture\": \"%s\", \"device\": \"%s\", \"kernels\": \"%s\", "
        "\"weight_bytes_per_token\": %.0f, \"device_bandwidth_gbps\": %.2f, "
        "\"spec_bandwidth_gbps\": %.0f, \"prefill_tokens\": %lld, \"prefill_tps\": %.2f, "
        "\"decode_tps\": %.2f, \"decode_weight_gbps\": %.2f, \"decode_bandwidth_fraction\": %.4f, "
        "\"decode_spec_fraction\": %.4f, \"weight_device_bytes\": %zu, \"kv_cache_device_bytes\": %zu, "
        "\"tensor_parallel_size\": %d, \"random_weights\": %s, \"batch\": %lld, "
        "\"batch_decode_tps\": %.2f}\n",
        options.model_dir.c_str(), config.architecture.c_str(), gpu->device_name().c_str(),
        gpu->describe().c_str(), bytes, bandwidth, spec_gbps,
        static_cast<long long>(options.prompt_tokens), prefill_tps, decode_tps, weight_gbps,
        weight_gbps / bandwidth, weight_gbps / spec_gbps, gpu->weight_device_bytes(),
        gpu->kv_cache_device_bytes(), options.tensor_parallel_size,
        options.random_weights ? "true" : "false", static_cast<long long>(options.batch), batch_tps);
    return 0;
  }
  std::printf("model            %s (%s) on %s\n", options.model_dir.c_str(),
              config.architecture.c_str(), gpu->device_name().c_str());
  std::printf("kernels          %s\n", gpu->describe().c_str());
  if (options.random_weights) std::printf("weights          random (made on the GPU; shapes from the checkpoint)\n");
  std::printf("weights/token    %.3f GB read per decode step\n", bytes / 1e9);
  std::printf("device bandwidth %.1f GB/s read (streaming kernel, this run); spec %.0f GB/s\n",
              bandwidth, spec_gbps);
  std::printf("prefill          %lld tokens: %.1f tok/s (%.4f s)\n",
              static_cast<long long>(options.prompt_tokens), prefill_tps, prefill_best);
  std::printf("decode           %.2f tok/s = %.1f GB/s of weights = %.1f%% of measured bandwidth "
              "(limit %.1f tok/s; %.1f%% of spec, limit %.1f tok/s)\n",
              decode_tps, weight_gbps, 100.0 * weight_gbps / bandwidth, limit_tps,
              100.0 * weight_gbps / spec_gbps, spec_limit_tps);
  if (options.batch > 1) {
    std::printf("decode x %-6lld %.1f tok/s over %lld sequences stepping together (%.2f tok/s each; "
                "%.1fx batch 1)\n",
                static_cast<long long>(options.batch), batch_tps, static_cast<long long>(options.batch),
                batch_tps / static_cast<double>(options.batch), batch_tps / decode_tps);
  }
  std::printf("device memory    %.1f MiB weights, %.1f MiB KV cache\n",
              static_cast<double>(gpu->weight_device_bytes()) / (1024.0 * 1024.0),
              static_cast<double>(gpu->kv_cache_device_bytes()) / (1024.0 * 1024.0));
  return 0;
}

eval::WindowLogits cuda_window_logits(const models::Model& model, const DeviceOptions& device,
                                      int64_t max_len) {
  gpu::GpuModelOptions options;
  options.tensor_parallel_size = device.tensor_parallel_size;
  options.max_seq_len = std::max<int64_t>(max_len, 1);
  std::shared_ptr<gpu::GpuModel> gpu = gpu::GpuModel::load(model, options);
  auto sequence = std::make_shared<gpu::GpuSequence>(gpu->new_sequence());
  return [gpu, sequence](std::span<const int32_t> tokens) {
    sequence->clear();
    return gpu->forward(tokens, *sequence, /*all_logits=*/true);
  };
}

std::shared_ptr<models::BatchRunner> make_cuda_serve_runner(const models::Model& model,
                                                           const DeviceOptions& device,
                                                           const CudaServeOptions& options) {
  const models::ModelConfig& config = model.config();
  gpu::GpuModelOptions gpu_options;
  gpu_options.tensor_parallel_size = device.tensor_parallel_size;
  LOWBIT_CHECK(options.max_model_len > 0, "make_cuda_serve_runner: max_model_len must be set");
  gpu_options.max_seq_len = options.max_model_len;
  gpu_options.max_batch_size = options.max_num_seqs;
  // A step holds the admitted prompts (up to max_batched_tokens, one may exceed it: it then runs
  // alone) and one token of every running sequence.
  gpu_options.max_step_tokens = options.max_batched_tokens + options.max_num_seqs;
  gpu_options.block_size = static_cast<int>(options.block_size);
  if (options.kv_cache_bytes > 0) {
    // bf16 keys and values of every layer, this GPU's KV heads
    const int64_t kv_heads = std::max<int64_t>(1, config.num_kv_heads / device.tensor_parallel_size);
    const int64_t per_token = 2 * config.num_layers * kv_heads * config.head_dim * 2;
    gpu_options.kv_cache_tokens = std::max<int64_t>(options.kv_cache_bytes / per_token, 1);
  } else {
    gpu_options.gpu_memory_utilization =
        options.gpu_memory_utilization > 0 ? options.gpu_memory_utilization : 0.9;
  }
  return gpu::make_gpu_batch_runner(gpu::GpuModel::load(model, gpu_options));
}

#endif  // LOWBIT_CUDA_BACKEND

}  // namespace lowbit::cli
