// GGUF → config.json text and Hugging Face-named tensors (see gguf_model.h).
#include "models/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "formats/gguf_dequant.h"
#include "lowbit/error.h"
#include "models/strings.h"

namespace lowbit::models {
namespace {

namespace fs = std::filesystem;
using formats::GgmlType;
using formats::GgufFile;
using formats::GgufTensorInfo;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GGUF tensor name (after "blk.N.") → Hugging Face name (after "model.layers.N."), for Llama.
// Projections map with both ".weight" and ".bias".
const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> names = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
  };
  return names;
}

// The Hugging Face name of a GGUF tensor, or "" when it has none.
std::string hf_name(const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer = name.substr(4, dot - 4);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  const std::string rest = name.substr(dot + 1);
  for (const auto& [gguf, hf] : layer_names()) {
    std::string suffix;
    if (rest == gguf) {
      suffix = "";
    } else if (rest == gguf + ".weight" || rest == gguf + ".bias") {
      suffix = rest.substr(gguf.size());
    } else {
      continue;
    }
    return "model.layers." + layer + "." + hf + suffix;
  }
  return "";
}

bool int_kernel_type(GgmlType type) {
  return type == GgmlType::Q4_0 || type == GgmlType::Q8_0 || type == GgmlType::Q6_K;
}

// The Hugging Face module ("model.layers.0.self_attn.q_proj", "lm_head") whose weight `info` is
// when it runs on the int kernels through the gguf quantization method (quant/methods/gguf.cc): a
// projection or the LM head stored as Q4_0, Q8_0 or Q6_K. "" for every other tensor (decoded at
// load).
std::string int_kernel_module(const GgufTensorInfo& info) {
  if (!int_kernel_type(info.type)) return "";
  if (info.ne.size() != 2) return "";
  const std::string name = hf_name(info.name);
  if (name != "lm_head.weight" && !ends_with(name, "_proj.weight")) return "";
  return name.substr(0, name.size() - std::string(".weight").size());
}

// A file without output.weight ties the LM head to token_embd. When token_embd has an int-kernel
// type (llama.cpp's Q4_0 / Q8_0 files keep it in Q6_K), the head runs on the int kernels from the
// same blocks while the embedding is decoded for the lookup: the model is loaded untied, with an
// "lm_head" module whose qweight is token_embd's bytes. Null when that does not apply.
const GgufTensorInfo* tied_int_kernel_output(const GgufFile& file) {
  if (file.find_tensor("output.weight") != nullptr) return nullptr;
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr || !int_kernel_type(embd->type) || embd->ne.size() != 2) return nullptr;
  return embd;
}

// The qweight tensor of an int-kernel module: the blocks as stored, one row of blocks per output
// feature, a view of the mapped file.
Tensor block_rows(const std::shared_ptr<GgufFile>& file, const GgufTensorInfo& info) {
  const int64_t rows = info.ne[1];
  std::span<const uint8_t> bytes = file->tensor_data(info);
  return Tensor::view(DType::U8, {rows, static_cast<int64_t>(bytes.size()) / rows},
                      const_cast<uint8_t*>(bytes.data()), std::shared_ptr<const void>(file));
}

bool is_plain(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
}

DType plain_dtype(GgmlType type) {
  if (type == GgmlType::F16) return DType::F16;
  if (type == GgmlType::BF16) return DType::BF16;
  return DType::F32;
}

// Undoes LlamaModel.permute on dimension 0 (rows of `row_bytes` bytes each): within each of
// `heads` heads of d rows, Hugging Face row i*d/2 + j is GGUF row 2*j + i.
Tensor unpermute_rows(const Tensor& t, int64_t heads, const std::string& where) {
  const int64_t rows = t.dim(0);
  if (heads <= 0 || rows % (2 * heads) != 0) {
    throw InvalidArgument(where + cat(": ", rows, " rows cannot be split into ", heads,
                                      " heads of an even size"));
  }
  const int64_t d = rows / heads;
  const int64_t half = d / 2;
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(rows);
  Tensor out = Tensor::zeros(t.dtype(), t.shape());
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        const int64_t hf_row = h * d + i * half + j;
        const int64_t gguf_row = h * d + 2 * j + i;
        std::memcpy(dst + static_cast<size_t>(hf_row) * row_bytes,
                    src + static_cast<size_t>(gguf_row) * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

// A GGUF tensor as a lowbit Tensor: plain types as views of the mapping, the rest decoded to F32
// and then rounded to `decoded_dtype` if that is not F32.
Tensor load_tensor(const std::shared_ptr<GgufFile>& file, const GgufTensorInfo& info,
                   DType decoded_dtype) {
  if (!is_plain(info.type)) {
    Tensor t = formats::dequantize_gguf_tensor(*file, info);
    if (decoded_dtype == DType::F32) return t;
    return Tensor::from_f32(t.data_as<const float>(), t.shape(), decoded_dtype);
  }
  std::span<const uint8_t> bytes = file->tensor_data(info);
  return Tensor::view(plain_dtype(info.type), info.shape(), const_cast<uint8_t*>(bytes.data()),
                      std::shared_ptr<const void>(file));
}

std::vector<std::string> required_tensors(int64_t num_layers) {
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
  for (int64_t l = 0; l < num_layers; ++l) {
    for (const char* t : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                          "ffn_gate", "ffn_up", "ffn_down"}) {
      names.push_back(cat("blk.", l, ".", t, ".weight"));
    }
  }
  return names;
}

void add_rope_scaling(const GgufFile& file, const std::string& arch, nlohmann::json& config) {
  const std::string prefix = arch + ".rope.scaling.";
  std::string type = "none";
  if (file.find(prefix + "type") != nullptr) type = file.get_string(prefix + "type");
  double factor = file.get_float(prefix + "factor", 0.0);
  if (type == "none" && file.find(arch + ".rope.scale_linear") != nullptr) {
    type = "linear";  // the older key
    factor = file.get_float(arch + ".rope.scale_linear");
  }
  if (type == "none") return;
  if (type != "linear" && type != "yarn") {
    throw Unsupported(file.path() + ": " + prefix + "type '" + type +
                      "' is not supported (none, linear, yarn)");
  }
  nlohmann::json rope = {{"rope_type", type}, {"factor", factor}};
  if (type == "yarn") {
    rope["original_max_position_embeddings"] = file.get_uint(prefix + "original_context_length");
  }
  rope["rope_theta"] = config["rope_theta"];
  config["rope_scaling"] = rope;
}

// llama.cpp's rope_freqs.weight (written for Llama 3.1-style RoPE scaling): one divisor per rotary
// frequency, angle_i = pos · base^(-2i/d) / f_i at every length. transformers computes exactly that
// for rope_type longrope with short_factor = long_factor = f and attention_factor 1, so the model
// runs it as such.
void add_rope_freqs(const GgufFile& file, const std::string& arch, nlohmann::json& config) {
  const GgufTensorInfo* info = file.find_tensor("rope_freqs.weight");
  if (info == nullptr) return;
  const std::string where = file.path() + ": tensor 'rope_freqs.weight'";
  if (config.contains("rope_scaling")) {
    throw Unsupported(where + " together with " + arch + ".rope.scaling.type '" +
                      config["rope_scaling"]["rope_type"].get<std::string>() +
                      "': llama.cpp applies both; lowbit runs one or the other");
  }
  const int64_t half = config["head_dim"].get<int64_t>() / 2;
  if (info->type != GgmlType::F32 || info->shape() != Shape{half}) {
    throw InvalidArgument(where + ": must be F32 [" + std::to_string(half) +
                          "] (one factor per rotary frequency), not " +
                          std::string(formats::ggml_type_name(info->type)) + " " +
                          shape_to_string(info->shape()));
  }
  std::vector<float> factors(static_cast<size_t>(half));
  std::memcpy(factors.data(), file.tensor_data(*info).data(), factors.size() * sizeof(float));
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!std::isfinite(factors[i]) || factors[i] <= 0.0f) {
      throw InvalidArgument(where + ": factor " + std::to_string(i) + " is " +
                            std::to_string(factors[i]) + " (must be finite and > 0)");
    }
  }
  const std::vector<double> f(factors.begin(), factors.end());
  config["rope_scaling"] = {{"rope_type", "longrope"},
                            {"short_factor", f},
                            {"long_factor", f},
                            {"attention_factor", 1.0},
                            {"original_max_position_embeddings", config["max_position_embeddings"]},
                            {"rope_theta", config["rope_theta"]}};
}

}  // namespace

std::optional<std::string> find_gguf_model(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (ends_with(path, ".gguf")) return path;
    return std::nullopt;
  }
  std::vector<std::string> gguf;
  bool safetensors = false;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ends_with(name, ".gguf")) gguf.push_back(it->path().string());
    if (ends_with(name, ".safetensors")) safetensors = true;
  }
  if (safetensors || gguf.empty()) return std::nullopt;
  if (gguf.size() > 1) {
    std::sort(gguf.begin(), gguf.end());
    std::string list;
    for (const std::string& g : gguf) list += (list.empty() ? "" : ", ") + g;
    throw InvalidArgument(path + ": holds several .gguf files (" + list +
                          "): name the one to load");
  }
  return gguf.front();
}

std::string gguf_config_json(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture");
  if (arch != "llama" && arch != "qwen2") {
    throw Unsupported(file.path() + ": general.architecture '" + arch +
                      "' is not supported for GGUF models yet (supported: llama, qwen2)");
  }
  if (file.find_tensor("blk.0.ffn_gate_exps.weight") != nullptr) {
    throw Unsupported(file.path() + ": " + arch + " with experts (ffn_*_exps) is not supported "
                      "for GGUF models yet");
  }
  const std::string p = arch + ".";
  const uint64_t heads = file.get_uint(p + "attention.head_count");
  const uint64_t hidden = file.get_uint(p + "embedding_length");
  nlohmann::json config;
  config["architectures"] = {arch == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  config["model_type"] = arch;
  config["hidden_size"] = hidden;
  config["num_hidden_layers"] = file.get_uint(p + "block_count");
  config["intermediate_size"] = file.get_uint(p + "feed_forward_length");
  config["num_attention_heads"] = heads;
  config["num_key_value_heads"] = file.get_uint(p + "attention.head_count_kv", heads);
  const uint64_t head_dim = file.get_uint(p + "attention.key_length", heads ? hidden / heads : 0);
  config["head_dim"] = head_dim;
  if (file.get_uint(p + "attention.value_length", head_dim) != head_dim) {
    throw Unsupported(file.path() + ": " + p + "attention.value_length differs from key_length");
  }
  if (file.get_uint(p + "rope.dimension_count", head_dim) != head_dim) {
    throw Unsupported(file.path() + ": " + p + "rope.dimension_count " +
                      std::to_string(file.get_uint(p + "rope.dimension_count")) +
                      " differs from the head size; " + arch + " rotates whole heads");
  }
  config["max_position_embeddings"] = file.get_uint(p + "context_length");
  config["rms_norm_eps"] = file.get_float(p + "attention.layer_norm_rms_epsilon");
  config["rope_theta"] = file.get_float(p + "rope.freq_base", 10000.0);
  add_rope_scaling(file, arch, config);
  add_rope_freqs(file, arch, config);
  if (file.find("tokenizer.ggml.tokens") != nullptr) {
    config["vocab_size"] = file.get("tokenizer.ggml.tokens")
                               .as_array(file.path() + ": metadata key \"tokenizer.ggml.tokens\"")
                               .items.size();
  } else {
    config["vocab_size"] = file.get_uint(p + "vocab_size");
  }
  // Q4_0 / Q8_0 projections run on the int kernels: the gguf method, told which modules.
  nlohmann::json modules = nlohmann::json::object();
  for (const GgufTensorInfo& info : file.tensors()) {
    const std::string module = int_kernel_module(info);
    if (!module.empty()) modules[module] = std::string(formats::ggml_type_name(info.type));
  }
  const GgufTensorInfo* tied_output = tied_int_kernel_output(file);
  if (tied_output != nullptr) modules["lm_head"] = std::string(formats::ggml_type_name(tied_output->type));
  if (!modules.empty()) {
    config["quantization_config"] = {{"quant_method", "gguf"}, {"modules", modules}};
  }
  config["tie_word_embeddings"] = file.find_tensor("output.weight") == nullptr && tied_output == nullptr;
  if (arch == "llama") {  // Qwen2 always has q/k/v biases and no others (models/qwen2.cc)
    config["attention_bias"] = file.find_tensor("blk.0.attn_q.bias") != nullptr;
    config["mlp_bias"] = file.find_tensor("blk.0.ffn_up.bias") != nullptr;
  } else {
    for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
      if (file.find_tensor(std::string("blk.0.") + bias) == nullptr) {
        throw InvalidArgument(file.path() + ": tensor 'blk.0." + bias + "' is missing (" + arch +
                              " needs it)");
      }
    }
  }
  for (const char* key : {"bos_token_id", "eos_token_id", "padding_token_id"}) {
    const std::string gguf_key = std::string("tokenizer.ggml.") + key;
    if (file.find(gguf_key) == nullptr) continue;
    config[key == std::string("padding_token_id") ? "pad_token_id" : key] =
        file.get_uint(gguf_key);
  }
  return config.dump();
}

formats::Checkpoint gguf_checkpoint(const std::shared_ptr<GgufFile>& file, int64_t num_layers,
                                    int64_t num_heads, int64_t num_kv_heads,
                                    DType decoded_dtype) {
  if (decoded_dtype != DType::F32 && decoded_dtype != DType::BF16 && decoded_dtype != DType::F16) {
    throw InvalidArgument(file->path() + ": quantized GGUF tensors decode to float32, bfloat16 or "
                          "float16, not " + std::string(dtype_name(decoded_dtype)));
  }
  const std::string arch = file->get_string("general.architecture");
  for (const std::string& name : required_tensors(num_layers)) {
    if (file->find_tensor(name) == nullptr) {
      throw InvalidArgument(file->path() + ": tensor '" + name + "' is missing (" + arch +
                            " needs it)");
    }
  }
  // Only LlamaModel.permute's interleaving needs undoing: the converter writes Qwen2's q/k as
  // they are.
  const bool permuted_qk = arch == "llama";
  std::map<std::string, Tensor> tensors;
  for (const GgufTensorInfo& info : file->tensors()) {
    if (info.name == "rope_freqs.weight") continue;  // read into the config (add_rope_freqs)
    std::string name = hf_name(info.name);
    if (name.empty()) name = info.name;  // reported as unused by the weight loader
    const std::string where = file->path() + ": tensor '" + info.name + "'";
    const bool q = ends_with(name, "self_attn.q_proj.weight") || ends_with(name, "self_attn.q_proj.bias");
    const bool k = ends_with(name, "self_attn.k_proj.weight") || ends_with(name, "self_attn.k_proj.bias");
    const int64_t permuted_heads = !permuted_qk ? 0 : q ? num_heads : k ? num_kv_heads : 0;
    Tensor t;
    if (const std::string module = int_kernel_module(info); !module.empty()) {
      // The blocks as stored, one row of blocks per output feature: the gguf method's qweight.
      // Moving whole rows moves each row's codes and scales together, so the permutation below
      // applies to it unchanged.
      name = module + ".qweight";
      t = block_rows(file, info);
    } else {
      t = load_tensor(file, info, decoded_dtype);
    }
    if (permuted_heads > 0) t = unpermute_rows(t, permuted_heads, where);
    tensors.emplace(std::move(name), std::move(t));
  }
  if (const GgufTensorInfo* embd = tied_int_kernel_output(*file)) {
    tensors.emplace("lm_head.qweight", block_rows(file, *embd));
  }
  return formats::Checkpoint::from_tensors(file->path(), std::move(tensors));
}

}  // namespace lowbit::models
