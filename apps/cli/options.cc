#include "options.h"

#include <omp.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "formats/gguf.h"
#include "lowbit/error.h"
#include "models/gguf_model.h"
#include "models/gguf_tokenizer.h"
#include "models/model.h"
#include "quant/methods/plugins.h"
#include "runtime/chat_source.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {

void add_prompt_options(CLI::App* app, PromptOptions& options, bool chat_flags) {
  app->add_option("-p,--prompt", options.prompt, "Prompt text");
  app->add_option("--prompt-ids", options.prompt_ids,
                  "Prompt as token ids, e.g. 1,2,3 (for models without a tokenizer)");
  app->add_flag("--no-special-tokens", options.no_special_tokens,
                "Encode --prompt without the tokenizer's special tokens (no BOS)");
  if (chat_flags) {
    app->add_flag("--chat", options.chat,
                  "Wrap --prompt as a user message with the model's chat template");
    app->add_option("--system", options.system, "System message for --chat");
  }
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::string body = text;
  auto first = body.find_first_not_of(" \t\n");
  auto last = body.find_last_not_of(" \t\n");
  body = first == std::string::npos ? "" : body.substr(first, last - first + 1);
  if (!body.empty() && body.front() == '[') {
    LOWBIT_CHECK(body.back() == ']', flag + ": unbalanced '[' in id list");
    body = body.substr(1, body.size() - 2);
  }
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t comma = body.find(',', pos);
    std::string item = body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    long long value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && (item[used] == ' ' || item[used] == '\t')) ++used;
    LOWBIT_CHECK(used == item.size() && used > 0 && value >= 0 && value <= INT32_MAX,
                 flag + ": '" + item + "' is not a token id (a non-negative integer)");
    ids.push_back(static_cast<int32_t>(value));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  LOWBIT_CHECK(!ids.empty(), flag + ": no token ids given");
  return ids;
}

std::string format_id_list(const std::vector<int32_t>& ids) {
  return nlohmann::json(ids).dump();
}

std::unique_ptr<Tokenizer> load_tokenizer_if_present(const std::string& model_dir) {
  if (std::optional<std::string> gguf = models::find_gguf_model(model_dir)) {
    // The GGUF's own tokenizer; a tokenizer.json beside the file when lowbit cannot build that
    // one (other tokenizer models or pre-tokenizers).
    const std::filesystem::path beside = std::filesystem::path(*gguf).parent_path();
    try {
      auto file = formats::GgufFile::open(*gguf);
      return std::make_unique<Tokenizer>(
          Tokenizer::from_json_string(models::gguf_tokenizer_json(*file), *gguf));
    } catch (const Unsupported& e) {
      if (!std::filesystem::exists(beside / "tokenizer.json")) {
        log_warn(std::string(e.what()) + "; no tokenizer.json beside it either");
        return nullptr;
      }
      log_warn(std::string(e.what()) + "; using " + (beside / "tokenizer.json").string());
      return std::make_unique<Tokenizer>(Tokenizer::from_dir(beside.string()));
    }
  }
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) return nullptr;
  return std::make_unique<Tokenizer>(Tokenizer::from_dir(model_dir));
}

std::vector<int32_t> resolve_prompt(const PromptOptions& options, const std::string& model_dir,
                                    const Tokenizer* tokenizer) {
  bool has_text = !options.prompt.empty() || options.chat;
  LOWBIT_CHECK(has_text != !options.prompt_ids.empty(), "give exactly one of --prompt and --prompt-ids");
  if (!options.prompt_ids.empty()) return parse_id_list(options.prompt_ids, "--prompt-ids");
  LOWBIT_CHECK(tokenizer != nullptr, model_dir + " has no tokenizer.json: use --prompt-ids");
  if (!options.chat) return tokenizer->encode(options.prompt, !options.no_special_tokens);

  auto chat_template = runtime::model_chat_template(model_dir);
  LOWBIT_CHECK(chat_template.has_value(),
               model_dir + " has no chat template (chat_template.jinja, tokenizer_config.json or a "
                           "GGUF's tokenizer.chat_template)");
  nlohmann::json messages = nlohmann::json::array();
  if (!options.system.empty()) messages.push_back({{"role", "system"}, {"content", options.system}});
  messages.push_back({{"role", "user"}, {"content", options.prompt}});
  std::string rendered =
      chat_template->render(messages, /*add_generation_prompt=*/true, runtime::model_special_tokens(model_dir));
  // The template writes the special tokens itself (BOS included): encode without adding more.
  return tokenizer->encode(rendered, /*add_special_tokens=*/false);
}

void add_plugin_option(CLI::App* app, std::vector<std::string>& plugins) {
  app->add_option("--plugin", plugins,
                  "Load a quantization-method plugin (shared library; repeatable; also "
                  "LOWBIT_PLUGINS=a.so:b.so)")
      ->allow_extra_args(false);
}

void add_model_load_options(CLI::App* app, ModelLoadOptions& options) {
  app->add_option("--quantization", options.quantization,
                  "Quantization method: the checkpoint's own (detected), or an online one for an "
                  "unquantized checkpoint: fp8, fp8_per_channel, fp8_per_block, ... (`lowbit "
                  "methods` lists them)");
  app->add_option("--linear-backend", options.linear_backend,
                  "Force the kernel family of quantized Linear layers: wna16, w8a8, fp8 or "
                  "dequant (an error if it cannot run a layer). GGUF files: w8a8 runs Q4_0 / "
                  "Q8_0 / Q6_K with int8 activations, llama.cpp's arithmetic (faster prefill; "
                  "faster Q4_0 decode on AVX2-only CPUs)");
  app->add_option("--dtype", options.dtype,
                  "What dequantized weights are held in: auto (the checkpoint's), float32, "
                  "bfloat16, float16")
      ->capture_default_str();
  app->add_option("--kv-cache-dtype", options.kv_cache_dtype,
                  "KV cache precision: auto, fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2; scales come "
                  "from the checkpoint (k_scale / v_scale) or are 1.0")
      ->capture_default_str();
  app->add_flag("--calculate-kv-scales", options.calculate_kv_scales,
                "Take fp8 KV-cache scales from the first forward pass instead of the checkpoint");
  app->add_option("--kv-cache-dtype-skip-layers", options.kv_cache_skip_layers,
                  "Layers whose KV cache stays full precision: indices, or sliding_window")
      ->delimiter(',');
  app->add_option("--head-dtype", options.head_dtype,
                  "LM head precision: auto or fp32 (CPU: always computed in fp32)")
      ->check(CLI::IsMember({"auto", "fp32", "float32"}))
      ->capture_default_str();
  add_plugin_option(app, options.plugins);
}

void load_cli_plugins(const std::vector<std::string>& plugins) {
  quant::load_plugins(plugins);
  quant::load_plugins(quant::plugins_from_environment());
}

models::LoadOptions prepare_model_load(const ModelLoadOptions& options) {
  load_cli_plugins(options.plugins);
  models::LoadOptions load;
  load.quantization = options.quantization;
  load.linear_backend = options.linear_backend;
  load.dtype = options.dtype;
  load.kv_cache.dtype = options.kv_cache_dtype;
  load.kv_cache.calculate_scales = options.calculate_kv_scales;
  load.kv_cache.skip_layers = options.kv_cache_skip_layers;
  return load;
}

void add_threads_option(CLI::App* app, int& threads) {
  app->add_option("-t,--threads", threads, "CPU threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
}

void apply_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace lowbit::cli
