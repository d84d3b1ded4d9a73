// --device cpu|cuda and --tensor-parallel-size for generate, bench and ppl, and what those commands
// run on the GPU backend
// (src/gpu). In a build without the CUDA backend (LOWBIT_CUDA_BACKEND undefined) every cuda entry
// point throws Unsupported("... built without the CUDA backend").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eval/kl_divergence.h"
#include "eval/perplexity.h"
#include "runtime/generator.h"

namespace lowbit {
class Tokenizer;
namespace quant {
class CalibrationBackend;
}  // namespace quant
namespace models {
class Model;
struct LoadOptions;
class BatchRunner;
}  // namespace models
}  // namespace lowbit

namespace lowbit::cli {

struct DeviceOptions {
  std::string device = "cpu";
  int tensor_parallel_size = 1;  // GPUs 0 .. N-1, NCCL tensor parallelism (cuda only)
};

void add_device_option(CLI::App* app, DeviceOptions& options);

// True for "cuda" (after checking that this build has the backend), false for "cpu" (then
// --tensor-parallel-size above 1 is an InvalidArgument).
bool use_cuda(const DeviceOptions& options);

// Model::load, or on cuda the load the GPU backend needs (device checked first, quantized layers
// keep their canonical weights).
std::unique_ptr<models::Model> load_model_on(const DeviceOptions& device, const std::string& dir,
                                             const models::LoadOptions& options);

// `lowbit quantize --device cuda`: where GPTQ's calibration forwards and column loop run, on GPU 0
// (null for the CPU); with --tensor-parallel-size N > 1, data-parallel calibration over GPUs
// 0 .. N-1 (quant/gpu/multi_gpu_calibration.h). N > 1 without --device cuda, or more GPUs than are
// visible, is an InvalidArgument.
std::unique_ptr<quant::CalibrationBackend> make_calibration_backend(const DeviceOptions& options);

// runtime::Generator::generate on the GPU: same stopping rules, sampling and streaming.
runtime::GenerationResult generate_cuda(const models::Model& model, const Tokenizer* tokenizer,
                                        const runtime::GenerationRequest& request,
                                        const runtime::TokenCallback& on_token,
                                        const DeviceOptions& device);

// eval::perplexity on the GPU: the same windows and per-token NLL.
eval::PerplexityResult perplexity_cuda(const models::Model& model,
                                       const std::vector<int32_t>& tokens,
                                       const eval::PerplexityOptions& options,
                                       const std::function<void(int64_t, int64_t)>& progress,
                                       const DeviceOptions& device);

// `lowbit serve --device cuda`: the serving engine's step runner on the GPU(s), for sequences of up
// to max_model_len (> 0) tokens; KV cache: --kv-cache-memory bytes per GPU
// when given (kv_cache_bytes > 0), else gpu_memory_utilization (0: 0.9, vLLM's default) of
// each GPU's memory.
struct CudaServeOptions {
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 32;
  int64_t max_batched_tokens = 2048;
  int64_t block_size = 16;
  int64_t kv_cache_bytes = 0;
  double gpu_memory_utilization = 0;
};
std::shared_ptr<models::BatchRunner> make_cuda_serve_runner(const models::Model& model,
                                                           const DeviceOptions& device,
                                                           const CudaServeOptions& options);

// eval's window logits on the GPU(s): a GpuModel of `model` for windows of up to max_len tokens,
// each run as a fresh sequence (all rows' logits).
eval::WindowLogits cuda_window_logits(const models::Model& model, const DeviceOptions& device,
                                      int64_t max_len);

struct CudaBenchOptions {
  std::string model_dir;
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 64;
  int repeats = 3;
  bool json = false;
  int tensor_parallel_size = 1;
  bool random_weights = false;  // --random-weights: weights made on the GPUs (shapes only read)
  int64_t batch = 1;            // --batch: also decode this many sequences stepping together
};

// `lowbit bench --device cuda`: prefill and decode tok/s beside the device memory bandwidth
// measured in the same run (and the H200's 4.8 TB/s spec).
int run_bench_cuda(const models::Model& model, const CudaBenchOptions& options);

}  // namespace lowbit::cli
