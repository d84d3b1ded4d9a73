// lowbit bench MODEL: prefill and decode speed beside the physical limit measured in the same run
// (the machine's memory bandwidth, which bounds batch-1 decode: every weight byte is read once per
// token).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "command.h"
#include "core/memory_usage.h"
#include "device.h"
#include "formats/safetensors.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/matmul.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "options.h"
#include "runtime/sampler.h"

namespace lowbit::cli {
namespace {

struct BenchOptions {
  ModelLoadOptions load;
  std::string model;
  int threads = 0;
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 64;
  int repeats = 3;
  bool json = false;
  DeviceOptions device;
  bool random_weights = false;
  int64_t batch = 1;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Bytes a batch-1 decode step reads: every weight once, except an untied input embedding, of
// which only one row is read.
// The loaded model's checkpoint: the files of a safetensors model, the decoded tensors of a GGUF.
double weight_bytes_per_token(const formats::Checkpoint& checkpoint,
                              const models::ModelConfig& config) {
  double bytes = 0;
  for (const auto& name : checkpoint.names()) {
    Tensor t = checkpoint.get(name);
    bool input_embedding = name == "model.embed_tokens.weight" && !config.tie_word_embeddings;
    bytes += input_embedding ? static_cast<double>(t.nbytes()) / static_cast<double>(t.dim(0))
                             : static_cast<double>(t.nbytes());
  }
  return bytes;
}

int run_bench(const BenchOptions& options) {
  LOWBIT_CHECK(!options.model.empty(), "bench: a MODEL directory is required (or `lowbit bench serve` to "
                                       "load-test a server)");
  apply_threads(options.threads);
  LOWBIT_CHECK(options.prompt_tokens >= 1 && options.decode_tokens >= 2 && options.repeats >= 1,
               "bench: --prompt-tokens >= 1, --decode-tokens >= 2 and --repeats >= 1 are required");
  LOWBIT_CHECK(options.batch >= 1 && (options.batch == 1 || options.device.device == "cuda"),
               "bench: --batch N (N >= 1) decodes N sequences together on the GPU: add --device cuda "
               "(on the CPU, `lowbit bench serve` measures batching through the server)");
  LOWBIT_CHECK(!options.random_weights || options.device.device == "cuda",
               "bench: --random-weights makes the weights on the GPU: add --device cuda");
  auto model = load_model_on(options.device, options.model, prepare_model_load(options.load));
  if (use_cuda(options.device)) {
    return run_bench_cuda(*model, {options.model, options.prompt_tokens, options.decode_tokens,
                                   options.repeats, options.json,
                                   options.device.tensor_parallel_size, options.random_weights,
                                   options.batch});
  }
  const auto& config = model->config();
  const double bytes_per_token = weight_bytes_per_token(model->checkpoint(), config);
  const int threads = omp_get_max_threads();

  double bandwidth = kernels::cpu::measure_memory_bandwidth({.threads = threads}).triad_gb_per_s;
  // Peak memory is the model's: the bandwidth probe's buffers are freed and forgotten here.
  reset_peak_rss();

  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> any_token(
      0, static_cast<int32_t>(std::min<int64_t>(config.vocab_size, 8192)) - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(options.prompt_tokens));
  for (auto& id : prompt) id = any_token(rng);

  auto cache = model->new_cache(options.prompt_tokens + options.decode_tokens);
  double prefill_best = 1e30;
  for (int r = 0; r < options.repeats; ++r) {
    cache.clear();
    double start = now_seconds();
    model->forward(prompt, cache, /*all_logits=*/false);
    prefill_best = std::min(prefill_best, now_seconds() - start);
  }

  // Decode after the prompt; the first step is excluded (it pays for cold caches).
  double decode_best = 1e30;
  for (int r = 0; r < options.repeats; ++r) {
    cache.clear();
    Tensor logits = model->forward(std::span<const int32_t>(prompt.data(), 8), cache, false);
    int32_t next = runtime::argmax({logits.data_as<const float>(), static_cast<size_t>(config.vocab_size)});
    double start = 0;
    for (int64_t step = 0; step < options.decode_tokens; ++step) {
      if (step == 1) start = now_seconds();
      logits = model->forward(std::span<const int32_t>(&next, 1), cache, false);
      next = runtime::argmax({logits.data_as<const float>(), static_cast<size_t>(config.vocab_size)});
    }
    decode_best = std::min(decode_best, (now_seconds() - start) / static_cast<double>(options.decode_tokens - 1));
  }
  const int64_t peak_rss = peak_rss_bytes();
  // Measure again after the model ran: the best of the two is the machine's bandwidth now.
  bandwidth = std::max(bandwidth, kernels::cpu::measure_memory_bandwidth({.threads = threads}).triad_gb_per_s);

  const double prefill_tps = static_cast<double>(options.prompt_tokens) / prefill_best;
  const double decode_tps = 1.0 / decode_best;
  const double weight_gbps = bytes_per_token * decode_tps / 1e9;
  const double limit_tps = bandwidth * 1e9 / bytes_per_token;
  if (options.json) {
    std::printf(
        "{\"model\": \"%s\", \"architecture\": \"%s\", \"threads\": %d, \"kernel\": \"%s\", "
        "\"weight_bytes_per_token\": %.0f, \"memory_bandwidth_gbps\": %.2f, \"prefill_tokens\": %lld, "
        "\"prefill_tps\": %.2f, \"decode_tps\": %.2f, \"decode_weight_gbps\": %.2f, "
        "\"decode_bandwidth_fraction\": %.4f, \"peak_rss_bytes\": %lld}\n",
        options.model.c_str(), config.architecture.c_str(), threads, kernels::matmul_kernel_name(),
        bytes_per_token, bandwidth, static_cast<long long>(options.prompt_tokens), prefill_tps,
        decode_tps, weight_gbps, weight_gbps / bandwidth, static_cast<long long>(peak_rss));
    return 0;
  }
  std::printf("model            %s (%s), %d threads, matmul kernel %s\n", options.model.c_str(),
              config.architecture.c_str(), threads, kernels::matmul_kernel_name());
  std::printf("weights/token    %.3f GB read per decode step\n", bytes_per_token / 1e9);
  std::printf("memory bandwidth %.1f GB/s (STREAM triad, %d threads, best of runs before and after)\n",
              bandwidth, threads);
  std::printf("prefill          %lld tokens: %.1f tok/s (%.3f s)\n",
              static_cast<long long>(options.prompt_tokens), prefill_tps, prefill_best);
  std::printf("decode           %.2f tok/s = %.1f GB/s of weights = %.1f%% of measured bandwidth "
              "(bandwidth limit %.2f tok/s)\n",
              decode_tps, weight_gbps, 100.0 * weight_gbps / bandwidth, limit_tps);
  std::printf("peak memory      %.1f MiB resident (model, cache and buffers)\n",
              static_cast<double>(peak_rss) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench", "Prefill and decode speed, beside the memory bandwidth measured in the same run");
  // Not ->required(): `lowbit bench serve ...` is a subcommand of bench and has no MODEL.
  sub->add_option("model", options->model, "Model directory");
  add_model_load_options(sub, options->load);
  add_threads_option(sub, options->threads);
  sub->add_option("--prompt-tokens", options->prompt_tokens, "Prefill length")->capture_default_str();
  sub->add_option("--decode-tokens", options->decode_tokens, "Decode steps")->capture_default_str();
  sub->add_option("--repeats", options->repeats, "Repetitions (best is reported)")->capture_default_str();
  sub->add_flag("--json", options->json, "Print one JSON record");
  add_device_option(sub, options->device);
  sub->add_flag("--random-weights", options->random_weights,
                "--device cuda: fill the weights with random values on the GPUs instead of reading "
                "them (speed of shapes no disk holds; see `lowbit synth --no-data`)");
  sub->add_option("--batch", options->batch,
                  "--device cuda: also decode this many sequences stepping together (batched "
                  "forward, what continuous batching runs)")
      ->capture_default_str();
  // Listed before bench itself: main() runs the first parsed command, and `bench serve` parses both.
  add_bench_serve_command(*sub, commands);
  commands.push_back({sub, [options] { return run_bench(*options); }});
}

}  // namespace lowbit::cli
