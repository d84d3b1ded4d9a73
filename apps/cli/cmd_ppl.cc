// lowbit ppl MODEL --text FILE: perplexity with the reference protocol (src/eval/perplexity.h).
#include <unistd.h>

#include <cstdio>

#include "command.h"
#include "device.h"
#include "eval/perplexity.h"
#include "eval/py_text.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "options.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

struct PplOptions {
  ModelLoadOptions load;
  std::string model;
  std::string text_file;
  int64_t context = 512;
  bool bos = false;
  int64_t max_windows = 0;
  bool json = false;
  int threads = 0;
  DeviceOptions device;
};

int run_ppl(const PplOptions& options) {
  apply_threads(options.threads);
  auto model = load_model_on(options.device, options.model, prepare_model_load(options.load));
  auto tokenizer = load_tokenizer_if_present(options.model);
  LOWBIT_CHECK(tokenizer != nullptr, options.model + " has no tokenizer.json: ppl needs one");
  std::vector<int32_t> tokens = tokenizer->encode(
      // As Python's open() in text mode reads it (the reference protocol was run that way): the
      // WikiText copy has CRLF line endings.
      eval::read_text_file_universal_newlines(options.text_file), false);

  eval::PerplexityOptions ppl_options;
  ppl_options.context = options.context;
  ppl_options.max_windows = options.max_windows;
  if (options.bos) {
    LOWBIT_CHECK(model->config().bos_token_id.has_value(),
                 options.model + "/config.json: --bos needs bos_token_id, which is not set");
    ppl_options.bos_id = *model->config().bos_token_id;
  }
  // A progress line only for a person watching a terminal, not in logs or pipes.
  const bool show_progress = !options.json && isatty(fileno(stderr));
  auto progress = [&](int64_t done, int64_t total) {
    if (show_progress) std::fprintf(stderr, "\rwindow %lld/%lld", static_cast<long long>(done),
                                    static_cast<long long>(total));
  };
  auto result = use_cuda(options.device)
                    ? perplexity_cuda(*model, tokens, ppl_options, progress, options.device)
                    : eval::perplexity(*model, tokens, ppl_options, progress);
  if (show_progress) std::fputc('\n', stderr);
  if (options.json) {
    std::printf(
        "{\"perplexity\": %.6f, \"scored_tokens\": %lld, \"windows\": %lld, \"context\": %lld, "
        "\"bos\": %s, \"seconds\": %.3f}\n",
        result.perplexity, static_cast<long long>(result.scored_tokens),
        static_cast<long long>(result.windows), static_cast<long long>(options.context),
        options.bos ? "true" : "false", result.seconds);
  } else {
    std::printf("perplexity %.4f over %lld tokens (%lld windows of %lld) in %.1f s\n",
                result.perplexity, static_cast<long long>(result.scored_tokens),
                static_cast<long long>(result.windows), static_cast<long long>(options.context),
                result.seconds);
  }
  return 0;
}

}  // namespace

void add_ppl_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<PplOptions>();
  CLI::App* sub = app.add_subcommand(
      "ppl", "Perplexity of a text file (non-overlapping windows, each scored on its own)");
  sub->add_option("model", options->model, "Model directory")->required();
  sub->add_option("--text", options->text_file, "UTF-8 text file (line endings read as \\n)")->required();
  sub->add_option("--ctx", options->context, "Window length in tokens")->capture_default_str();
  sub->add_flag("--bos", options->bos, "Start every window with the BOS token");
  sub->add_option("--max-windows", options->max_windows, "Score at most this many windows (0 = all)");
  sub->add_flag("--json", options->json, "Print one JSON object");
  add_model_load_options(sub, options->load);
  add_threads_option(sub, options->threads);
  add_device_option(sub, options->device);
  commands.push_back({sub, [options] { return run_ppl(*options); }});
}

}  // namespace lowbit::cli
