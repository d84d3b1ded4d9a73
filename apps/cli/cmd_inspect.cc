// lowbit inspect MODEL: what a checkpoint is (architecture, shapes, parameters, dtypes, bytes,
// quantization config) without loading it for inference.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "command.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "models/gguf_model.h"
#include "models/model_config.h"

namespace lowbit::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool tensors = false;
};

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw IoError(path.string() + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f %s", bytes, units[unit]);
  return buffer;
}

void print_model_config(const models::ModelConfig& config) {
  auto ll = [](int64_t v) { return static_cast<long long>(v); };
  std::printf("layers           %lld\n", ll(config.num_layers));
  std::printf("hidden           %lld (intermediate %lld)\n", ll(config.hidden_size),
              ll(config.intermediate_size));
  std::printf("attention        %lld heads, %lld kv heads, head_dim %lld\n", ll(config.num_heads),
              ll(config.num_kv_heads), ll(config.head_dim));
  std::printf("vocab            %lld%s\n", ll(config.vocab_size),
              config.tie_word_embeddings ? " (tied embeddings)" : "");
  std::printf("rope             %s, theta %g\n", config.rope.type_name.c_str(), config.rope.theta);
}

void print_config_summary(const std::string& dir, const nlohmann::json& raw) {
  auto field = [&](const char* key) { return raw.contains(key) ? raw[key].dump() : "-"; };
  std::printf("architecture     %s (model_type %s)\n",
              raw.contains("architectures") ? raw["architectures"].dump().c_str() : "-",
              field("model_type").c_str());
  try {
    models::ModelConfig config = models::load_model_config(dir);
    auto ll = [](int64_t v) { return static_cast<long long>(v); };
    print_model_config(config);
    if (config.num_experts > 0) {
      std::printf("experts          %lld (top %lld)\n", ll(config.num_experts),
                  ll(config.num_experts_per_tok));
    }
    std::printf("runs on lowbit   yes\n");
  } catch (const Error& e) {
    std::printf("runs on lowbit   no: %s\n", e.what());
  }
  if (raw.contains("quantization_config")) {
    std::printf("quantization     %s\n", raw["quantization_config"].dump(2).c_str());
  } else {
    std::printf("quantization     none\n");
  }
}

// A GGUF file: its metadata as lowbit reads it, and its tensors by ggml type as stored.
int run_inspect_gguf(const std::string& path, const InspectOptions& options) {
  auto file = formats::GgufFile::open(path);
  auto text = [&](const std::string& key) {
    const formats::GgufValue* v = file->find(key);
    return v == nullptr ? std::string("-") : v->to_string();
  };
  std::printf("file             %s (GGUF v%u)\n", path.c_str(), file->version());
  std::printf("architecture     %s (name %s, file_type %s)\n", text("general.architecture").c_str(),
              text("general.name").c_str(), text("general.file_type").c_str());
  std::printf("tokenizer        %s (pre %s)\n", text("tokenizer.ggml.model").c_str(),
              text("tokenizer.ggml.pre").c_str());
  try {
    const std::string config = models::gguf_config_json(*file);
    print_model_config(models::parse_model_config(config, path));
    std::printf("runs on lowbit   yes (Q4_0 / Q8_0 / Q6_K projections on the int kernels, other "
                "quantized tensors decoded to F32 at load)\n");
    // The modules the gguf method runs (quant/methods/gguf.cc), by type.
    std::map<std::string, int> int_modules;
    const nlohmann::json j = nlohmann::json::parse(config);
    if (j.contains("quantization_config")) {
      for (const auto& [module, type] : j["quantization_config"]["modules"].items()) {
        ++int_modules[type.get<std::string>()];
      }
    }
    std::string line;
    for (const auto& [type, n] : int_modules) {
      const char* as = type == "Q4_0"   ? "W4A16 group 32"
                       : type == "Q6_K" ? "6-bit group 16"
                                        : "W8A16 group 32";
      line += (line.empty() ? "" : "; ") + type + ": " + std::to_string(n) + " module(s) (wna16, " +
              as + ")";
    }
    std::printf("int kernels      %s\n",
                line.empty() ? "none (no Q4_0 / Q8_0 / Q6_K projection)" : line.c_str());
  } catch (const Error& e) {
    std::printf("runs on lowbit   no: %s\n", e.what());
  }
  std::map<std::string, std::pair<int64_t, size_t>> by_type;  // ggml type → (parameters, bytes)
  int64_t parameters = 0;
  size_t bytes = 0;
  for (const formats::GgufTensorInfo& t : file->tensors()) {
    auto& slot = by_type[std::string(formats::ggml_type_name(t.type))];
    slot.first += t.numel();
    slot.second += t.nbytes;
    parameters += t.numel();
    bytes += t.nbytes;
    if (options.tensors) {
      std::printf("  %-60s %-8s %s\n", t.name.c_str(),
                  std::string(formats::ggml_type_name(t.type)).c_str(),
                  shape_to_string(t.shape()).c_str());
    }
  }
  std::printf("tensors          %zu\n", file->tensors().size());
  std::printf("parameters       %.3f M (%lld)\n", static_cast<double>(parameters) / 1e6,
              static_cast<long long>(parameters));
  std::printf("weights          %s\n", human_bytes(static_cast<double>(bytes)).c_str());
  for (const auto& [type, entry] : by_type) {
    std::printf("  %-14s %lld elements, %s\n", type.c_str(), static_cast<long long>(entry.first),
                human_bytes(static_cast<double>(entry.second)).c_str());
  }
  return 0;
}

int run_inspect(const InspectOptions& options) {
  if (std::optional<std::string> gguf = models::find_gguf_model(options.model)) {
    return run_inspect_gguf(*gguf, options);
  }
  std::filesystem::path dir(options.model);
  LOWBIT_CHECK(std::filesystem::is_directory(dir), options.model + ": not a model directory");
  print_config_summary(options.model, read_json_file(dir / "config.json"));

  formats::Checkpoint checkpoint = formats::Checkpoint::open(options.model);
  std::map<std::string, std::pair<int64_t, size_t>> by_dtype;  // dtype → (parameters, bytes)
  int64_t parameters = 0;
  size_t bytes = 0;
  auto names = checkpoint.names();
  for (const auto& name : names) {
    Tensor t = checkpoint.get(name);
    auto& slot = by_dtype[std::string(dtype_name(t.dtype()))];
    slot.first += t.numel();
    slot.second += t.nbytes();
    parameters += t.numel();
    bytes += t.nbytes();
    if (options.tensors) {
      std::printf("  %-60s %-8s %s\n", name.c_str(), std::string(dtype_name(t.dtype())).c_str(),
                  t.shape_string().c_str());
    }
  }
  std::printf("tensors          %zu in %zu file(s)\n", names.size(), checkpoint.files().size());
  std::printf("parameters       %.3f M (%lld)\n", static_cast<double>(parameters) / 1e6,
              static_cast<long long>(parameters));
  std::printf("weights          %s\n", human_bytes(static_cast<double>(bytes)).c_str());
  for (const auto& [dtype, entry] : by_dtype) {
    std::printf("  %-14s %lld elements, %s\n", dtype.c_str(), static_cast<long long>(entry.first),
                human_bytes(static_cast<double>(entry.second)).c_str());
  }
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "Describe a checkpoint: architecture, parameters, dtypes, bytes, quantization");
  sub->add_option("model", options->model, "Model directory or .gguf file")->required();
  sub->add_flag("--tensors", options->tensors, "List every tensor");
  commands.push_back({sub, [options] { return run_inspect(*options); }});
}

}  // namespace lowbit::cli
