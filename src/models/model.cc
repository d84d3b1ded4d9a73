// Model loading, KV cache management and the checkpoint summary. The forward pass is in decoder.cc.
#include "models/model.h"

#include <algorithm>
#include <set>

#include "core/log.h"
#include "lowbit/error.h"
#include "models/gguf_model.h"
#include "models/weight_loader.h"
#include "quant/methods/resolve.h"

namespace lowbit::models {

KvCache::KvCache(int layers, int64_t row_size, int64_t capacity, bool fixed)
    : row_size_(row_size), capacity_(0), fixed_(false) {
  keys_.resize(static_cast<size_t>(layers));
  values_.resize(static_cast<size_t>(layers));
  if (fixed) {
    // Exactly what was asked for, allocated now.
    try {
      for (auto& k : keys_) k.resize(static_cast<size_t>(capacity * row_size));
      for (auto& v : values_) v.resize(static_cast<size_t>(capacity * row_size));
    } catch (const std::bad_alloc&) {
      throw OutOfMemory("KV cache: cannot allocate " + std::to_string(capacity) + " tokens");
    }
    capacity_ = capacity;
  }
  fixed_ = fixed;
}

void KvCache::truncate(int64_t n) {
  if (n < 0 || n > length_) {
    throw InvalidArgument("KV cache: cannot truncate to " + std::to_string(n) +
                          " tokens; it holds " + std::to_string(length_));
  }
  length_ = n;
}

void KvCache::reserve(int64_t tokens) {
  if (tokens <= capacity_) return;
  if (fixed_) {
    throw InvalidArgument("KV cache: " + std::to_string(tokens) +
                          " tokens exceed its fixed capacity of " + std::to_string(capacity_));
  }
  // Doubling keeps appends amortised O(1); the floor avoids many tiny regrowths when decoding.
  const int64_t grown = std::max({tokens, 2 * capacity_, int64_t{256}});
  const size_t floats = static_cast<size_t>(grown * row_size_);
  try {
    for (auto& k : keys_) k.resize(floats);
    for (auto& v : values_) v.resize(floats);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("KV cache: cannot grow to " + std::to_string(grown) + " tokens");
  }
  capacity_ = grown;
}

namespace {

// --dtype values (vLLM's spellings); nullopt for "auto".
std::optional<DType> parse_dtype_option(const std::string& name) {
  if (name.empty() || name == "auto") return std::nullopt;
  if (name == "float32" || name == "float") return DType::F32;
  if (name == "bfloat16") return DType::BF16;
  if (name == "float16" || name == "half") return DType::F16;
  throw InvalidArgument("--dtype '" + name + "': expected auto, float32, bfloat16 or float16");
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& dir, const LoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  // A .gguf file (or a directory holding only one) goes through the same parser and loader: its
  // metadata as config.json text, its tensors under Hugging Face's names (gguf_model.h).
  const std::optional<std::string> gguf_path = find_gguf_model(dir);
  std::shared_ptr<formats::GgufFile> gguf;
  if (gguf_path) {
    gguf = formats::GgufFile::open(*gguf_path);
    model->config_ = parse_model_config(gguf_config_json(*gguf), *gguf_path);
  } else {
    model->config_ = load_model_config(dir);
  }
  model->spec_ = ArchRegistry::instance().find(model->config_.architecture);
  if (model->spec_ == nullptr) {
    throw Internal("architecture " + model->config_.architecture + " parsed but not registered");
  }
  model->checkpoint_ = std::make_unique<formats::Checkpoint>(
      gguf ? gguf_checkpoint(gguf, model->config_.num_layers, model->config_.num_heads,
                             model->config_.num_kv_heads,
                             parse_dtype_option(options.dtype).value_or(DType::F32))
           : formats::Checkpoint::open(dir));
  quant::ResolvedQuantization quantization = quant::resolve_quantization(
      dir, model->config_.quantization_config_json, model->config_.source,
      quant::QuantizationRequest{options.quantization});
  if (quantization.config == nullptr && !options.linear_backend.empty()) {
    throw InvalidArgument("--linear-backend " + options.linear_backend + ": " + dir +
                          " is not quantized (add --quantization to quantize it online)");
  }
  model->quantization_ = quantization.describe();
  model->weights_ =
      load_decoder_weights(*model->checkpoint_, model->config_, *model->spec_,
                           quantization.config.get(), options.linear_backend,
                           parse_dtype_option(options.dtype), &model->unused_tensors_);
  std::set<std::string> kv_scale_tensors;
  auto kv = std::make_unique<KvCacheQuantizer>(options.kv_cache, model->config_, *model->spec_,
                                               *model->checkpoint_, kv_scale_tensors);
  if (kv->active()) {
    log_info("KV cache: " + kv->describe());
    model->kv_quant_ = std::move(kv);
  }
  model->rope_ = std::make_unique<RotaryEmbedding>(model->config_);
  model->directory_ = dir;
  log_debug("loaded " + model->config_.architecture + " from " + dir);
  return model;
}

KvCache Model::new_cache(int64_t max_tokens) const {
  if (max_tokens < 0) {
    throw InvalidArgument("new_cache: max_tokens must be >= 0, got " + std::to_string(max_tokens));
  }
  return KvCache(static_cast<int>(config_.num_layers), config_.num_kv_heads * config_.head_dim,
                 max_tokens, max_tokens > 0);
}

bool Model::needs_reprefill(int64_t cached, int64_t total_length) const {
  if (!spec_->reprefill_past_original_max || config_.rope.type != RopeType::LONGROPE) return false;
  const int64_t original = config_.rope.original_max_position_embeddings;
  return cached > 0 && cached <= original && total_length >= original + 1;
}

Model::Summary Model::summary() const {
  Summary s;
  s.architecture = config_.architecture;
  for (const std::string& name : checkpoint_->names()) {
    const Tensor t = checkpoint_->get(name);
    s.parameters += t.numel();
    s.bytes_by_dtype[std::string(dtype_name(t.dtype()))] += static_cast<int64_t>(t.nbytes());
    s.tensors.push_back(TensorInfo{name, t.dtype(), t.shape()});
  }
  s.unused_tensors = unused_tensors_;
  return s;
}

}  // namespace lowbit::models
