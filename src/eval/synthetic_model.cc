#include "eval/synthetic_model.h"

#include <omp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/float_convert.h"
#include "core/log.h"
#include "formats/safetensors.h"
#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The published config.json fields that shape each model (values from the models' own configs).
json preset_config(const std::string& name) {
  json llama3_rope = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                      {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                      {"original_max_position_embeddings", 8192}};
  auto llama = [&](int hidden, int inter, int layers, int heads, int kv, int head_dim, bool tied,
                   double rope_factor) {
    json rope = llama3_rope;
    rope["factor"] = rope_factor;
    return json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                {"hidden_size", hidden}, {"intermediate_size", inter},
                {"num_hidden_layers", layers}, {"num_attention_heads", heads},
                {"num_key_value_heads", kv}, {"head_dim", head_dim}, {"vocab_size", 128256},
                {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-5},
                {"tie_word_embeddings", tied}, {"rope_parameters", rope},
                {"bos_token_id", 128000}, {"eos_token_id", 128001}, {"hidden_act", "silu"},
                {"attention_bias", false}, {"mlp_bias", false}, {"dtype", "bfloat16"}};
  };
  if (name == "llama-3.2-1b") return llama(2048, 8192, 16, 32, 8, 64, true, 32.0);
  if (name == "llama-3.2-3b") return llama(3072, 8192, 28, 24, 8, 128, true, 32.0);
  if (name == "llama-3.1-8b") return llama(4096, 14336, 32, 32, 8, 128, false, 8.0);
  if (name == "llama-3.1-70b") return llama(8192, 28672, 80, 64, 8, 128, false, 8.0);
  auto qwen = [&](const char* arch, const char* type, int hidden, int inter, int layers, int heads,
                  int kv, int head_dim) {
    return json{{"architectures", {arch}}, {"model_type", type}, {"hidden_size", hidden},
                {"intermediate_size", inter}, {"num_hidden_layers", layers},
                {"num_attention_heads", heads}, {"num_key_value_heads", kv},
                {"head_dim", head_dim}, {"vocab_size", 151936},
                {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6},
                {"tie_word_embeddings", true},
                {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                {"bos_token_id", 151643}, {"eos_token_id", 151645}, {"hidden_act", "silu"},
                {"dtype", "bfloat16"}};
  };
  if (name == "qwen2.5-0.5b") return qwen("Qwen2ForCausalLM", "qwen2", 896, 4864, 24, 14, 2, 64);
  if (name == "qwen3-0.6b") return qwen("Qwen3ForCausalLM", "qwen3", 1024, 3072, 28, 16, 8, 128);
  if (name == "mistral-7b") {
    return json{{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"},
                {"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_hidden_layers", 32},
                {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"head_dim", 128},
                {"vocab_size", 32768}, {"max_position_embeddings", 32768},
                {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", false}, {"sliding_window", nullptr},
                {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                {"bos_token_id", 1}, {"eos_token_id", 2}, {"hidden_act", "silu"},
                {"dtype", "bfloat16"}};
  }
  std::string known;
  for (const auto& p : synth_presets()) known += (known.empty() ? "" : ", ") + p;
  throw InvalidArgument("--like " + name + ": unknown model shape (known: " + known + ")");
}

struct TensorSpec {
  std::string name;
  Shape shape;
  float scale;     // magnitude of the random values
  bool is_norm;    // RMSNorm weights: around 1
};

std::vector<TensorSpec> tensor_specs(const json& config) {
  const int64_t hidden = config["hidden_size"], inter = config["intermediate_size"];
  const int64_t layers = config["num_hidden_layers"], heads = config["num_attention_heads"];
  const int64_t kv = config["num_key_value_heads"], head_dim = config["head_dim"];
  const int64_t vocab = config["vocab_size"];
  const bool qk_norm = config["model_type"] == "qwen3";
  const bool qkv_bias = config["model_type"] == "qwen2";
  auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  std::vector<TensorSpec> specs = {{"model.embed_tokens.weight", {vocab, hidden}, 0.02f, false},
                                   {"model.norm.weight", {hidden}, 0, true}};
  if (!config["tie_word_embeddings"].get<bool>()) {
    specs.push_back({"lm_head.weight", {vocab, hidden}, inv_sqrt(hidden), false});
  }
  for (int64_t l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    specs.push_back({p + "input_layernorm.weight", {hidden}, 0, true});
    specs.push_back({p + "post_attention_layernorm.weight", {hidden}, 0, true});
    specs.push_back({p + "self_attn.q_proj.weight", {heads * head_dim, hidden}, inv_sqrt(hidden), false});
    specs.push_back({p + "self_attn.k_proj.weight", {kv * head_dim, hidden}, inv_sqrt(hidden), false});
    specs.push_back({p + "self_attn.v_proj.weight", {kv * head_dim, hidden}, inv_sqrt(hidden), false});
    specs.push_back({p + "self_attn.o_proj.weight", {hidden, heads * head_dim}, inv_sqrt(heads * head_dim), false});
    if (qkv_bias) {
      specs.push_back({p + "self_attn.q_proj.bias", {heads * head_dim}, 0.02f, false});
      specs.push_back({p + "self_attn.k_proj.bias", {kv * head_dim}, 0.02f, false});
      specs.push_back({p + "self_attn.v_proj.bias", {kv * head_dim}, 0.02f, false});
    }
    if (qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {head_dim}, 0, true});
      specs.push_back({p + "self_attn.k_norm.weight", {head_dim}, 0, true});
    }
    specs.push_back({p + "mlp.gate_proj.weight", {inter, hidden}, inv_sqrt(hidden), false});
    specs.push_back({p + "mlp.up_proj.weight", {inter, hidden}, inv_sqrt(hidden), false});
    specs.push_back({p + "mlp.down_proj.weight", {hidden, inter}, inv_sqrt(inter), false});
  }
  return specs;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Values ±scale·[0.25, 1.75) (norms: 1 ± 0.25): never zero, deterministic for (seed, tensor, index).
Tensor random_tensor(const TensorSpec& spec, uint64_t stream) {
  Tensor t = Tensor::zeros(DType::BF16, spec.shape);
  uint16_t* out = t.data_as<uint16_t>();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = splitmix64(stream ^ static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull);
    float unit = static_cast<float>(r >> 40) / static_cast<float>(1 << 24);  // [0, 1)
    float value = spec.is_norm ? 0.75f + 0.5f * unit
                               : spec.scale * (0.25f + 1.5f * unit) * ((r & 1) ? 1.0f : -1.0f);
    out[i] = f32_to_bf16(value);
  }
  return t;
}

// A safetensors file whose tensors are all zeros, written as a header and a hole: the file takes
// no disk blocks (a 70B shape fits any disk), and reads as zeros through mmap.
void write_hole_safetensors(const fs::path& path, const std::vector<TensorSpec>& specs) {
  json header = {{"__metadata__", {{"format", "pt"}, {"lowbit_synth", "no-data"}}}};
  size_t offset = 0;
  for (const TensorSpec& spec : specs) {
    size_t bytes = 2;
    for (int64_t d : spec.shape) bytes *= static_cast<size_t>(d);
    header[spec.name] = {{"dtype", "BF16"}, {"shape", spec.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = text.size();
  char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out.write(prefix, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw IoError(path.string() + ": cannot write");
  fs::resize_file(path, 8 + text.size() + offset);  // the data: a hole of zeros
}

void write_json(const fs::path& path, const json& value) {
  std::ofstream out(path);
  out << value.dump(2) << "\n";
  if (!out) throw IoError(path.string() + ": cannot write");
}

}  // namespace

std::vector<std::string> synth_presets() {
  return {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-0.5b",
          "qwen3-0.6b", "mistral-7b"};
}

long long write_synthetic_model(const SynthOptions& options) {
  json config = preset_config(options.like);
  if (options.num_layers_override > 0) config["num_hidden_layers"] = options.num_layers_override;
  fs::path out(options.output_dir);
  LOWBIT_CHECK(!out.empty(), "synth: -o DIR is required");
  if (fs::exists(out) && !options.overwrite) {
    throw InvalidArgument(out.string() + " already exists (use --overwrite to replace it)");
  }
  fs::path tokenizer_dir(options.tokenizer_from);
  LOWBIT_CHECK(fs::exists(tokenizer_dir / "tokenizer.json"),
               tokenizer_dir.string() + "/tokenizer.json: not found (synth copies its tokenizer)");

  fs::path tmp = out.string() + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_json(tmp / "config.json", config);
  write_json(tmp / "generation_config.json",
             {{"bos_token_id", config["bos_token_id"]}, {"eos_token_id", config["eos_token_id"]}});
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
    if (fs::exists(tokenizer_dir / file)) fs::copy_file(tokenizer_dir / file, tmp / file);
  }

  // Shards of about 2 GiB, generated and written one at a time so memory stays at one shard.
  const size_t shard_limit = size_t{2} << 30;
  std::vector<std::vector<TensorSpec>> shards(1);
  size_t shard_bytes = 0, total_bytes = 0;
  long long parameters = 0;
  for (const auto& spec : tensor_specs(config)) {
    int64_t numel = 1;
    for (int64_t d : spec.shape) numel *= d;
    size_t bytes = static_cast<size_t>(numel) * 2;
    if (shard_bytes > 0 && shard_bytes + bytes > shard_limit) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(spec);
    shard_bytes += bytes;
    total_bytes += bytes;
    parameters += numel;
  }
  json weight_map = json::object();
  uint64_t stream = splitmix64(options.seed);
  for (size_t s = 0; s < shards.size(); ++s) {
    char file[64];
    std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    for (const auto& spec : shards[s]) weight_map[spec.name] = file;
    if (options.no_data) {
      write_hole_safetensors(tmp / file, shards[s]);
      continue;
    }
    std::map<std::string, Tensor> tensors;
    for (const auto& spec : shards[s]) {
      stream = splitmix64(stream);
      tensors[spec.name] = random_tensor(spec, stream);
    }
    formats::write_safetensors((tmp / file).string(), tensors, {{"format", "pt"}});
    log_info("synth: wrote " + std::string(file));
  }
  write_json(tmp / "model.safetensors.index.json",
             {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}});
  fs::remove_all(out);
  fs::rename(tmp, out);
  return parameters;
}

}  // namespace lowbit::eval
