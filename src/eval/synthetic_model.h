// Synthetic checkpoints with the exact shapes of well-known models and random, never-zero bf16
// weights: benchmark material that needs no download. The tokenizer is copied from another model
// directory (by default the bundled reference model), so prompts work; its ids are a subset of the
// synthetic vocabulary.
#pragma once

#include <string>
#include <vector>

namespace lowbit::eval {

struct SynthOptions {
  std::string like;             // preset name, see synth_presets()
  std::string output_dir;
  std::string tokenizer_from;   // directory with tokenizer.json (+ tokenizer_config.json, chat template)
  bool overwrite = false;
  unsigned long long seed = 0;
  int num_layers_override = 0;  // > 0: fewer layers than the real model (quick tests)
  // Shapes only: every tensor reads as zeros from a sparse file that takes no disk space (for
  // `lowbit bench --device cuda --random-weights`, which makes the weights on the GPU).
  bool no_data = false;
};

std::vector<std::string> synth_presets();

// Writes OUTPUT_DIR (through OUTPUT_DIR.tmp and a rename). Returns the number of parameters.
long long write_synthetic_model(const SynthOptions& options);

}  // namespace lowbit::eval
