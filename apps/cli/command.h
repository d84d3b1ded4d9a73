// How the `lowbit` binary is put together: each subcommand lives in its own file and adds itself to
// the CLI11 app through an add_*_command function; main() runs the one the user picked and turns
// library exceptions into one error line and an exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace lowbit::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;  // returns the exit code
};
using CommandList = std::vector<Command>;

void add_generate_command(CLI::App& app, CommandList& commands);
void add_inspect_command(CLI::App& app, CommandList& commands);
void add_ppl_command(CLI::App& app, CommandList& commands);
void add_logits_command(CLI::App& app, CommandList& commands);
void add_tokenize_commands(CLI::App& app, CommandList& commands);
void add_synth_command(CLI::App& app, CommandList& commands);
void add_bench_command(CLI::App& app, CommandList& commands);
void add_bench_serve_command(CLI::App& bench, CommandList& commands);  // `bench serve`, from add_bench_command
void add_quantize_command(CLI::App& app, CommandList& commands);
void add_methods_command(CLI::App& app, CommandList& commands);
void add_serve_command(CLI::App& app, CommandList& commands);
void add_recommend_command(CLI::App& app, CommandList& commands);
void add_report_command(CLI::App& app, CommandList& commands);
void add_eval_command(CLI::App& app, CommandList& commands);
void add_compare_command(CLI::App& app, CommandList& commands);

}  // namespace lowbit::cli
