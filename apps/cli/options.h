// Option groups shared by several subcommands: threads, the prompt (text, ids or chat), sampling.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace lowbit {
class Tokenizer;
namespace models {
class Model;
struct LoadOptions;
}
}  // namespace lowbit

namespace lowbit::cli {

struct PromptOptions {
  std::string prompt;
  std::string prompt_ids;  // "1,2,3" or "[1,2,3]"
  bool chat = false;
  std::string system;
  bool no_special_tokens = false;
};

void add_prompt_options(CLI::App* app, PromptOptions& options, bool chat_flags);

// Resolves the prompt to ids: --prompt-ids as given; --prompt encoded by the model's tokenizer
// (with special tokens unless --no-special-tokens), or rendered with the chat template first.
std::vector<int32_t> resolve_prompt(const PromptOptions& options, const std::string& model_dir,
                                    const Tokenizer* tokenizer);

// "1,2,3", "[1, 2, 3]" → ids; InvalidArgument naming `flag` for anything else.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);
std::string format_id_list(const std::vector<int32_t>& ids);

// --quantization, --linear-backend and --plugin: how a model's layers are quantized and run.
struct ModelLoadOptions {
  std::string quantization;
  std::string linear_backend;
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";
  bool calculate_kv_scales = false;
  std::vector<std::string> kv_cache_skip_layers;
  std::string head_dtype = "auto";
  std::vector<std::string> plugins;
};
void add_model_load_options(CLI::App* app, ModelLoadOptions& options);
void add_plugin_option(CLI::App* app, std::vector<std::string>& plugins);
// Loads the plugins (--plugin, then LOWBIT_PLUGINS) and returns the model's load options.
models::LoadOptions prepare_model_load(const ModelLoadOptions& options);
void load_cli_plugins(const std::vector<std::string>& plugins);

void add_threads_option(CLI::App* app, int& threads);
void apply_threads(int threads);  // 0: OpenMP's default (all cores)

// The tokenizer of a model directory, or null when it has no tokenizer.json.
std::unique_ptr<Tokenizer> load_tokenizer_if_present(const std::string& model_dir);

}  // namespace lowbit::cli
