// The `lowbit` command line. Exit codes: 0 success, 2 bad input (a file, flag or value lowbit
// cannot use; the message names it), 1 an internal error.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "command.h"
#include "core/log.h"
#include "lowbit/error.h"

namespace {

// `lowbit serve` shares the cores between the forward pass's OpenMP threads and the HTTP threads
// that write each token. OpenMP threads that spin while waiting (libgomp's default) then keep a
// descheduled teammate from reaching the next barrier: measured 32 ms per token instead of 5 on
// 2 cores (bench/NOTES.md). The wait policy is read once when the OpenMP runtime loads, before
// main, so the server re-executes itself with OMP_WAIT_POLICY=passive unless the user set it.
void reexec_serve_with_passive_openmp(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "serve") != 0 || std::getenv("OMP_WAIT_POLICY") != nullptr) {
    return;
  }
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
  // Still here: exec failed; serving works, only slower.
}

}  // namespace

int main(int argc, char** argv) {
  using namespace lowbit;
  reexec_serve_with_passive_openmp(argc, argv);
  CLI::App app{
      "lowbit: quantize, run, serve and evaluate large language models in one binary.\n"
      "Run `lowbit COMMAND --help` for a command's options. Models are Hugging Face checkpoint\n"
      "directories (config.json, *.safetensors, tokenizer.json) or llama.cpp .gguf files;\n"
      "models/ref-llama-19m is bundled."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lowbit 0.1.0");
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "Log debug messages");
  app.add_flag("-q,--quiet", quiet, "Log only errors");

  cli::CommandList commands;
  cli::add_generate_command(app, commands);
  cli::add_inspect_command(app, commands);
  cli::add_ppl_command(app, commands);
  cli::add_logits_command(app, commands);
  cli::add_tokenize_commands(app, commands);
  cli::add_synth_command(app, commands);
  cli::add_bench_command(app, commands);
  cli::add_quantize_command(app, commands);
  cli::add_methods_command(app, commands);
  cli::add_serve_command(app, commands);
  cli::add_recommend_command(app, commands);
  cli::add_report_command(app, commands);
  cli::add_eval_command(app, commands);
  cli::add_compare_command(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (verbose) set_log_level(LogLevel::DEBUG);
  if (quiet) set_log_level(LogLevel::ERROR);

  try {
    for (auto& command : commands) {
      if (command.app->parsed()) return command.run();
    }
    return 2;
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "lowbit: error: %s\n", e.what());
    return 2;
  } catch (const Unsupported& e) {
    std::fprintf(stderr, "lowbit: unsupported: %s\n", e.what());
    return 2;
  } catch (const IoError& e) {
    std::fprintf(stderr, "lowbit: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit: internal error: %s\n", e.what());
    return 1;
  }
}
