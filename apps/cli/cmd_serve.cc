// lowbit serve MODEL: the OpenAI-compatible server (vLLM's flags where they mean the same).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "command.h"
#include "core/log.h"
#include "device.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "models/paged_kv_cache.h"
#include "options.h"
#include "serve/server.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

struct ServeOptions {
  ModelLoadOptions load;
  std::string model;
  serve::ServerOptions server;
  std::string kv_cache_memory;  // bytes, with an optional K/M/G suffix
  std::vector<std::string> served_model_names;
  double gpu_memory_utilization = 0;
  std::string batch_invariant = "auto";
  int threads = 0;
  DeviceOptions device;
};

// "512M", "2G", "1048576" → bytes.
int64_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InvalidArgument(flag + " '" + text + "': expected a size such as 512M or 2G");
  }
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "KiB" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) throw InvalidArgument(flag + " '" + text + "': unknown unit '" + suffix + "'");
  LOWBIT_CHECK(value > 0, flag + " must be positive");
  return static_cast<int64_t>(value * scale);
}

// SIGINT / SIGTERM stop the server from a watcher thread (no work in the signal handler). A
// signal handler can reach nothing but a global, hence this one flag.
std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested.store(true); }

int run_serve(ServeOptions& options) {
  apply_threads(options.threads);
  const bool cuda = use_cuda(options.device);
  LOWBIT_CHECK(cuda || options.gpu_memory_utilization == 0,
               "--gpu-memory-utilization sizes a GPU's KV cache: add --device cuda, or give the "
               "CPU's budget with --kv-cache-memory");
  // Start-up phases, printed with the address: where a slow start goes (checkpoint reading and
  // decoding on the host, the GPU's packing and uploads, the engine's set-up).
  const auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto model = load_model_on(options.device, options.model, prepare_model_load(options.load));
  auto tokenizer = load_tokenizer_if_present(options.model);
  const double host_load_s = since(start);  // weights and tokenizer, read and decoded
  serve::ServerOptions server_options = options.server;
  server_options.model_dir = options.model;
  server_options.engine.threads = options.threads;
  if (options.batch_invariant != "auto") {
    server_options.engine.batch_invariant = options.batch_invariant == "on";
  }
  server_options.served_model_names = options.served_model_names;
  if (server_options.served_model_names.empty()) server_options.served_model_names = {options.model};
  if (!options.kv_cache_memory.empty()) {
    server_options.engine.kv_cache_bytes = parse_bytes(options.kv_cache_memory, "--kv-cache-memory");
  }
  if (cuda) {
    serve::EngineOptions& e = server_options.engine;
    // The GPU sizes its RoPE table and block tables by the longest sequence: the model's limit
    // would be wasteful, so the default is capped (as GpuModelOptions::max_seq_len's is).
    if (e.max_model_len == 0) {
      e.max_model_len = std::min<int64_t>(model->config().max_position_embeddings, 32768);
    }
    CudaServeOptions gpu;
    gpu.max_model_len = e.max_model_len;
    gpu.max_num_seqs = e.max_num_seqs;
    gpu.max_batched_tokens = e.max_prefill_tokens;
    gpu.block_size = e.block_size;
    gpu.kv_cache_bytes = e.kv_cache_bytes;
    gpu.gpu_memory_utilization = options.gpu_memory_utilization;
    e.runner = make_cuda_serve_runner(*model, options.device, gpu);
  }
  const double device_load_s = since(start) - host_load_s;
  serve::Server server(*model, tokenizer.get(), server_options);
  server.bind();
  const double total_s = since(start);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  std::thread watcher([&] {
    while (!g_stop_requested.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.stop();
  });
  char device_phase[64] = "";
  if (cuda) {
    std::snprintf(device_phase, sizeof device_phase, ", GPU weights and KV cache %.1f s",
                  device_load_s);
  }
  std::fprintf(stderr,
               "lowbit serve: %s on http://%s:%d (OpenAI API under /v1), ready in %.1f s: "
               "checkpoint loaded in %.1f s%s, engine %.1f s\n",
               server_options.served_model_names.front().c_str(), server_options.host.c_str(),
               server.port(), total_s, host_load_s, device_phase,
               total_s - host_load_s - device_load_s);
  server.run();
  g_stop_requested.store(true);
  watcher.join();
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* sub = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (continuous batching)");
  sub->add_option("model", options->model, "Model directory")->required();
  auto& s = options->server;
  sub->add_option("--host", s.host, "Address to listen on (loopback by default)")->capture_default_str();
  sub->add_option("--port", s.port, "Port (0: any free port, printed at start)")->capture_default_str();
  sub->add_option("--api-key", s.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 routes (also $LOWBIT_API_KEY)")
      ->envname("LOWBIT_API_KEY");
  sub->add_option("--served-model-name", options->served_model_names,
                  "Model name(s) clients use (default: the model path)");
  sub->add_option("--max-model-len", s.engine.max_model_len,
                  "Prompt + output tokens per request (default: the model's max_position_embeddings)");
  sub->add_option("--max-num-seqs", s.engine.max_num_seqs, "Sequences batched per step")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--kv-cache-memory", options->kv_cache_memory,
                  "KV cache budget, e.g. 512M or 2G (default: max-num-seqs full-length sequences)");
  sub->add_option("--gpu-memory-utilization", options->gpu_memory_utilization,
                  "--device cuda: fraction of each GPU's memory for weights + KV cache (default 0.9)");
  sub->add_option("--block-size", s.engine.block_size, "Tokens per KV-cache block")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--max-waiting", s.engine.max_waiting,
                  "Queued requests beyond this get 503 with Retry-After")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--max-num-batched-tokens", s.engine.max_prefill_tokens,
                  "Prompt tokens admitted per step")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--batch-invariant", options->batch_invariant,
                  "on: every sequence computes exactly as if alone (greedy output equals `lowbit "
                  "generate`); off: one matmul per layer per step (faster for quantized models, "
                  "last-bit differences); auto: on for unquantized models, off for quantized ones")
      ->capture_default_str()->check(CLI::IsMember({"auto", "on", "off"}));
  sub->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching",
                s.engine.enable_prefix_caching,
                "Share the KV blocks of prompts' common starts between requests (vLLM's automatic "
                "prefix caching): a request whose prompt begins like an earlier one prefills only "
                "the rest. CPU engine; shared prefixes may change logits in the last bits");
  add_model_load_options(sub, options->load);
  add_threads_option(sub, options->threads);
  add_device_option(sub, options->device);
  commands.push_back({sub, [options] { return run_serve(*options); }});
}

}  // namespace lowbit::cli
