// lowbit synth --like llama-3.2-1b -o DIR: a random-weight checkpoint with a real model's shapes.
#include <cstdio>

#include "command.h"
#include "eval/synthetic_model.h"

namespace lowbit::cli {
namespace {

struct SynthCliOptions {
  eval::SynthOptions synth;
};

}  // namespace

void add_synth_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<SynthCliOptions>();
  options->synth.tokenizer_from = LOWBIT_BUNDLED_MODEL_DIR;
  std::string presets;
  for (const auto& p : eval::synth_presets()) presets += (presets.empty() ? "" : ", ") + p;
  CLI::App* sub = app.add_subcommand(
      "synth", "Write a checkpoint with a real model's shapes and random bf16 weights (for benchmarks)");
  sub->add_option("--like", options->synth.like, "Model shape: " + presets)->required();
  sub->add_option("-o,--output", options->synth.output_dir, "Output directory")->required();
  sub->add_option("--tokenizer-from", options->synth.tokenizer_from,
                  "Copy the tokenizer from this model directory")
      ->capture_default_str();
  sub->add_option("--layers", options->synth.num_layers_override,
                  "Use fewer decoder layers than the real model");
  sub->add_option("--seed", options->synth.seed, "Random seed")->capture_default_str();
  sub->add_flag("--overwrite", options->synth.overwrite, "Replace an existing output directory");
  sub->add_flag("--no-data", options->synth.no_data,
                "Shapes only: all-zero tensors in sparse files that take no disk space (for "
                "`lowbit bench --device cuda --random-weights` on shapes no disk holds)");
  commands.push_back({sub, [options] {
                        long long parameters = eval::write_synthetic_model(options->synth);
                        std::printf("wrote %s: %s shape, %.3f B parameters (bf16)\n",
                                    options->synth.output_dir.c_str(), options->synth.like.c_str(),
                                    static_cast<double>(parameters) / 1e9);
                        return 0;
                      }});
}

}  // namespace lowbit::cli
