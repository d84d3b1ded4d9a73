// lowbit generate MODEL --prompt TEXT: streams a continuation to stdout.
#include <cstdio>
#include <iostream>

#include "command.h"
#include "device.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "options.h"
#include "runtime/generator.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

struct GenerateOptions {
  ModelLoadOptions load;
  std::string model;
  PromptOptions prompt;
  int32_t max_tokens = 128;
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool output_ids = false;
  bool stats = false;
  int threads = 0;
  DeviceOptions device;
};

// Sampling defaults: greedy, unless the model's generation_config.json asks for sampling
// (do_sample true), in which case its temperature/top_k/top_p apply, as in transformers.
// Explicit flags always win.
runtime::SamplingParams default_sampling(const models::ModelConfig& config) {
  runtime::SamplingParams params;
  const auto& generation = config.generation;
  if (generation.do_sample.value_or(false)) {
    params.temperature = static_cast<float>(generation.temperature.value_or(1.0));
    params.top_k = static_cast<int32_t>(generation.top_k.value_or(0));
    params.top_p = static_cast<float>(generation.top_p.value_or(1.0));
  }
  params.repetition_penalty = static_cast<float>(generation.repetition_penalty.value_or(1.0));
  return params;
}

int run_generate(const GenerateOptions& options, const CLI::App& app) {
  apply_threads(options.threads);
  auto model = load_model_on(options.device, options.model, prepare_model_load(options.load));
  auto tokenizer = load_tokenizer_if_present(options.model);
  runtime::GenerationRequest request;
  request.prompt_ids = resolve_prompt(options.prompt, options.model, tokenizer.get());
  request.max_new_tokens = options.max_tokens;
  request.sampling = default_sampling(model->config());
  auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--temperature")) request.sampling.temperature = options.sampling.temperature;
  if (given("--top-k")) request.sampling.top_k = options.sampling.top_k;
  if (given("--top-p")) request.sampling.top_p = options.sampling.top_p;
  if (given("--min-p")) request.sampling.min_p = options.sampling.min_p;
  if (given("--repetition-penalty")) {
    request.sampling.repetition_penalty = options.sampling.repetition_penalty;
  }
  request.sampling.seed = options.sampling.seed;
  request.stop = options.stop;
  request.eos_ids = model->config().eos_token_ids;
  request.ignore_eos = options.ignore_eos;

  const bool print_text = tokenizer && !options.output_ids;
  auto print = [&](int32_t, const std::string& text) {
    if (print_text && !text.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  };
  auto result = use_cuda(options.device)
                    ? generate_cuda(*model, tokenizer.get(), request, print, options.device)
                    : runtime::Generator(*model, tokenizer.get()).generate(request, print);
  if (print_text) std::fputc('\n', stdout);
  if (!print_text) std::printf("%s\n", format_id_list(result.output_ids).c_str());
  if (options.stats) {
    std::fflush(stdout);  // the text first, then the numbers (stderr is unbuffered)
    size_t n = result.output_ids.size();
    std::fprintf(stderr, "prompt %zu tokens in %.3f s (%.1f tok/s); generated %zu tokens in %.3f s (%.1f tok/s)\n",
                 request.prompt_ids.size(), result.prefill_seconds,
                 static_cast<double>(request.prompt_ids.size()) / result.prefill_seconds, n,
                 result.decode_seconds,
                 n > 1 ? static_cast<double>(n - 1) / result.decode_seconds : 0.0);
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt (streams tokens)");
  sub->add_option("model", options->model, "Model directory")->required();
  add_prompt_options(sub, options->prompt, /*chat_flags=*/true);
  sub->add_option("-n,--max-tokens", options->max_tokens, "Maximum new tokens")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature", options->sampling.temperature, "0 = greedy (default)");
  sub->add_option("--top-k", options->sampling.top_k, "Keep the k most likely tokens (0 = off)");
  sub->add_option("--top-p", options->sampling.top_p, "Nucleus sampling mass (1 = off)");
  sub->add_option("--min-p", options->sampling.min_p, "Drop tokens below min_p x the top probability");
  sub->add_option("--repetition-penalty", options->sampling.repetition_penalty,
                  "Penalize tokens already in the context (1 = off)");
  sub->add_option("--seed", options->sampling.seed, "Random seed for sampling")->capture_default_str();
  sub->add_option("--stop", options->stop, "Stop when this string appears (repeatable)")
      ->allow_extra_args(false);
  sub->add_flag("--ignore-eos", options->ignore_eos, "Keep generating after an end-of-sequence id");
  sub->add_flag("--output-ids", options->output_ids, "Print the generated token ids as a JSON list");
  sub->add_flag("--stats", options->stats, "Print prefill and decode speed to stderr");
  add_model_load_options(sub, options->load);
  add_threads_option(sub, options->threads);
  add_device_option(sub, options->device);
  commands.push_back({sub, [options, sub] { return run_generate(*options, *sub); }});
}

}  // namespace lowbit::cli
