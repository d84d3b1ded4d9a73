// Model sizes for recommend: parameter counts and KV-cache shapes.
#include "eval/model_size.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "models/model_config.h"

namespace lowbit::eval {
namespace {

// Public configs of common dense models, the typical shape for a bare parameter count.
struct Typical {
  const char* name;
  double params;
  int64_t layers, kv_heads, head_dim, hidden, vocab;
  bool tied;
  int64_t max_context;
};
constexpr Typical kTypical[] = {
    {"Llama-3.2-1B", 1.24e9, 16, 8, 64, 2048, 128256, true, 131072},
    {"Llama-3.2-3B", 3.21e9, 28, 8, 128, 3072, 128256, true, 131072},
    {"Llama-3.1-8B", 8.03e9, 32, 8, 128, 4096, 128256, false, 131072},
    {"Qwen2.5-14B", 14.7e9, 48, 8, 128, 5120, 152064, false, 32768},
    {"Qwen2.5-32B", 32.8e9, 64, 8, 128, 5120, 152064, false, 32768},
    {"Llama-3.1-70B", 70.6e9, 80, 8, 128, 8192, 128256, false, 131072},
    {"Llama-3.1-405B", 405.9e9, 126, 8, 128, 16384, 128256, false, 131072},
};

ModelShape typical_shape(double params) {
  const Typical* best = &kTypical[0];
  for (const Typical& t : kTypical) {
    if (std::fabs(std::log(t.params / params)) < std::fabs(std::log(best->params / params))) {
      best = &t;
    }
  }
  ModelShape m;
  m.params = params;
  m.layers = best->layers;
  m.kv_heads = best->kv_heads;
  m.head_dim = best->head_dim;
  m.hidden = best->hidden;
  m.vocab = best->vocab;
  m.max_context = best->max_context;
  const double embeddings = static_cast<double>(best->vocab * best->hidden) * (best->tied ? 1 : 2);
  m.unquantized_params = std::min(embeddings, params / 2);
  m.assumed_shape = true;
  char text[256];
  std::snprintf(text, sizeof(text),
                "%s parameters with the shape of %s (%lld layers, %lld KV heads x %lld, hidden "
                "%lld, vocab %lld%s): an assumption; pass a model directory for its own shape",
                format_params(params).c_str(), best->name, static_cast<long long>(best->layers),
                static_cast<long long>(best->kv_heads), static_cast<long long>(best->head_dim),
                static_cast<long long>(best->hidden), static_cast<long long>(best->vocab),
                best->tied ? ", tied embeddings" : "");
  m.source = text;
  return m;
}

// "70B" → 7e10; nullopt when the text is not a count.
std::optional<double> parse_count(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string suffix = text.substr(used);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (suffix == "K") scale = 1e3;
  else if (suffix == "M") scale = 1e6;
  else if (suffix == "B" || suffix == "G") scale = 1e9;
  else if (suffix == "T") scale = 1e12;
  else if (!suffix.empty()) return std::nullopt;
  value *= scale;
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

// Parameters from the config's shapes (for checkpoints whose tensors are packed).
double params_from_config(const models::ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size);
  const double q = static_cast<double>(c.num_heads * c.head_dim);
  const double kv = static_cast<double>(c.num_kv_heads * c.head_dim);
  double total = static_cast<double>(c.vocab_size) * h * (c.tie_word_embeddings ? 1 : 2);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    total += h * q * 2 + h * kv * 2 + 2 * h;  // q, o, k, v projections and the two norms
    const bool moe = i < static_cast<int64_t>(c.layer_is_moe.size()) && c.layer_is_moe[i];
    if (moe) {
      total += static_cast<double>(c.num_experts) *
                   (3 * h * static_cast<double>(c.moe_intermediate_size)) +
               h * static_cast<double>(c.num_experts);
    } else {
      total += 3 * h * static_cast<double>(c.intermediate_size);
    }
  }
  return total;
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw IoError(path.string() + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

ModelShape model_shape_from_dir(const std::string& dir) {
  const std::filesystem::path base(dir);
  const nlohmann::json raw = read_json(base / "config.json");
  const models::ModelConfig c = models::load_model_config(dir);
  ModelShape m;
  m.dir = dir;
  m.layers = c.num_layers;
  m.kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  m.hidden = c.hidden_size;
  m.vocab = c.vocab_size;
  m.max_context = c.max_position_embeddings;
  m.unquantized_params =
      static_cast<double>(c.vocab_size * c.hidden_size) * (c.tie_word_embeddings ? 1 : 2);
  const bool quantized = raw.contains("quantization_config") || raw.contains("compression_config");
  if (quantized) {
    m.params = params_from_config(c);
    m.source = dir + " (already quantized: parameters counted from config.json's shapes)";
    return m;
  }
  const formats::Checkpoint checkpoint = formats::Checkpoint::open(dir);
  double params = 0;
  for (const auto& file : checkpoint.files()) {
    for (const auto& [name, entry] : file->entries()) {
      double n = 1;
      for (int64_t d : entry.shape) n *= static_cast<double>(d);
      params += n;
    }
  }
  LOWBIT_CHECK(params > 0, dir + ": the safetensors files hold no parameters");
  m.params = params;
  m.source = dir + " (config.json; parameters counted from the safetensors headers)";
  return m;
}

ModelShape parse_model_params(const std::string& text, const std::string& flag) {
  if (std::filesystem::is_directory(text)) return model_shape_from_dir(text);
  const std::optional<double> count = parse_count(text);
  if (!count) {
    throw InvalidArgument(flag + ": '" + text + "' is neither a parameter count (70B, 1.5B, 8e9, " +
                          "8000000000) nor a model directory");
  }
  LOWBIT_CHECK(*count >= 1e6 && *count <= 1e14,
               flag + ": " + text + " parameters is outside the range recommend knows (1M to 100T)");
  return typical_shape(*count);
}

double kv_bytes_per_token(const ModelShape& model, double bytes_per_value) {
  return 2.0 * static_cast<double>(model.layers * model.kv_heads * model.head_dim) *
         bytes_per_value;
}

double weight_bytes(const ModelShape& model, double bits_per_weight) {
  const double quantized = std::max(0.0, model.params - model.unquantized_params);
  return quantized * bits_per_weight / 8.0 + model.unquantized_params * 2.0;
}

std::string format_params(double params) {
  char text[32];
  if (params >= 1e9) {
    std::snprintf(text, sizeof(text), params >= 1e11 ? "%.0f B" : "%.3g B", params / 1e9);
  } else {
    std::snprintf(text, sizeof(text), "%.3g M", params / 1e6);
  }
  return text;
}

std::string format_bytes(double bytes) {
  char text[32];
  const double gib = bytes / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1) {
    std::snprintf(text, sizeof(text), "%.1f GB", gib);
  } else {
    std::snprintf(text, sizeof(text), "%.1f MB", bytes / (1024.0 * 1024.0));
  }
  return text;
}

}  // namespace lowbit::eval
