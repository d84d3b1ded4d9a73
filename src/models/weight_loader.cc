#include "models/weight_loader.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/log.h"
#include "lowbit/error.h"

namespace lowbit::models {

namespace {

// Fetches tensors by name with the checks, and remembers which names were used. Linear layers go
// through the quantization config when there is one: its method declares the tensors, this loader
// fetches and checks them, the method repacks them for its kernel.
class TensorFetcher {
 public:
  TensorFetcher(const formats::Checkpoint& checkpoint, const ModelConfig& config,
                const quant::QuantizationConfig* quantization, std::string backend)
      : checkpoint_(checkpoint),
        config_(config),
        quantization_(quantization),
        backend_(std::move(backend)) {}

  // The dtype quantized layers compute in where they dequantize (the embedding's).
  DType model_dtype = DType::BF16;

  // A Linear's weight: stored as is, or loaded by its quantization method.
  Linear linear_weight(const std::string& base, int64_t out, int64_t in,
                       quant::LayerKind kind = quant::LayerKind::Linear) {
    if (quantization_ != nullptr) {
      quant::LayerInfo info;
      info.kind = kind;
      info.prefix = base;
      info.in_features = in;
      info.out_features = out;
      info.params_dtype = model_dtype;
      info.backend = backend_;
      std::unique_ptr<quant::LinearMethod> method = quantization_->get_quant_method(info);
      if (method) return load_with_method(std::move(method), info);
    }
    Linear l;
    l.weight = get(base + ".weight", {out, in});
    return l;
  }

  // Kernel name → modules it runs, for the summary log line.
  const std::map<std::string, int>& kernels_selected() const { return kernels_; }

  // Tensors the checkpoint carries for runtime methods that this loader does not use yet.
  bool is_quantization_extra(const std::string& name) const {
    if (quantization_ == nullptr) return false;
    for (const char* suffix : {".k_scale", ".v_scale", ".q_scale", ".k_zero_point", ".v_zero_point"}) {
      const std::string s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        return true;
      }
    }
    return false;
  }

  bool has(const std::string& name) const { return checkpoint_.has(name); }

  Tensor get(const std::string& name, const Shape& expected) {
    if (!checkpoint_.has(name)) {
      throw InvalidArgument(checkpoint_.path() + ": tensor '" + name + "' is missing (" +
                            config_.architecture + " with " + config_.source + " needs it)");
    }
    Tensor t = checkpoint_.get(name);
    const DType dtype = t.dtype();
    if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) {
      throw Unsupported(checkpoint_.file_of(name) + ": tensor '" + name + "' has dtype " +
                        std::string(dtype_name(dtype)) +
                        "; unquantized models need F32, F16 or BF16");
    }
    if (t.shape() != expected) {
      throw InvalidArgument(checkpoint_.file_of(name) + ": tensor '" + name + "' has shape " +
                            t.shape_string() + ", expected " + shape_to_string(expected) +
                            " from " + config_.source);
    }
    used_.insert(name);
    return t;
  }

  std::vector<float> vector_f32(const std::string& name, int64_t n, float offset = 0.0f) {
    Tensor t = get(name, {n}).to_f32();
    std::vector<float> out(t.data_as<const float>(), t.data_as<const float>() + n);
    // Gemma computes (1 + w) in fp32, which is exactly this addition.
    if (offset != 0.0f) {
      for (float& v : out) v += offset;
    }
    return out;
  }

  const std::set<std::string>& used() const { return used_; }

 private:
  Linear load_with_method(std::unique_ptr<quant::LinearMethod> method,
                          const quant::LayerInfo& info) {
    quant::LayerParams params(info);
    params.source = checkpoint_.path();
    method->create_weights(params);
    for (const quant::ParamSpec& spec : params.declared()) {
      const std::string name = info.prefix + "." + spec.name;
      if (!checkpoint_.has(name)) {
        if (!spec.required) continue;
        throw InvalidArgument(checkpoint_.path() + ": tensor '" + name + "' is missing (" +
                              quantization_->get_name() + " quantizes " + info.prefix + ")");
      }
      Tensor t = checkpoint_.get(name);
      check_declared(spec, name, t);
      used_.insert(name);
      params.set(spec.name, std::move(t));
    }
    method->process_weights_after_loading(params);
    log_debug("Selected " + method->kernel_name() + " for " + info.prefix);
    ++kernels_[method->kernel_name()];
    Linear l;
    l.method_in = info.in_features;
    l.method_out = info.out_features;
    l.method = std::move(method);
    return l;
  }

  void check_declared(const quant::ParamSpec& spec, const std::string& name, const Tensor& t) {
    if (!spec.dtypes.empty() &&
        std::find(spec.dtypes.begin(), spec.dtypes.end(), t.dtype()) == spec.dtypes.end()) {
      std::string allowed;
      for (DType d : spec.dtypes) allowed += (allowed.empty() ? "" : "/") + std::string(dtype_name(d));
      throw InvalidArgument(checkpoint_.file_of(name) + ": tensor '" + name + "' has dtype " +
                            std::string(dtype_name(t.dtype())) + ", " + quantization_->get_name() +
                            " expects " + allowed);
    }
    bool shape_ok = spec.shape.empty() || spec.shape.size() == t.shape().size();
    for (size_t i = 0; shape_ok && i < spec.shape.size(); ++i) {
      shape_ok = spec.shape[i] < 0 || spec.shape[i] == t.shape()[i];
    }
    if (!shape_ok) {
      throw InvalidArgument(checkpoint_.file_of(name) + ": tensor '" + name + "' has shape " +
                            t.shape_string() + ", " + quantization_->get_name() + " expects " +
                            shape_to_string(spec.shape));
    }
  }

  const formats::Checkpoint& checkpoint_;
  const ModelConfig& config_;
  const quant::QuantizationConfig* quantization_;
  std::string backend_;
  std::map<std::string, int> kernels_;
  std::set<std::string> used_;
};

std::vector<float> slice(const std::vector<float>& v, int64_t begin, int64_t end) {
  return std::vector<float>(v.begin() + begin, v.begin() + end);
}

// Fused projections are split into row views of one dense matrix; a quantized one would need its
// method to split, which none does yet.
void reject_fused_method(const Linear& fused, const std::string& name) {
  if (fused.method) {
    throw Unsupported(name + ": quantized fused projections (qkv_proj / gate_up_proj) are not "
                      "supported yet");
  }
}

Linear linear(TensorFetcher& fetch, const std::string& base, int64_t out, int64_t in, bool bias) {
  Linear l = fetch.linear_weight(base, out, in);
  if (bias) l.bias = fetch.vector_f32(base + ".bias", out);
  return l;
}

AttentionWeights load_attention(TensorFetcher& fetch, const ModelConfig& c, const ArchSpec& spec,
                                const std::string& prefix) {
  const ArchTensorNames& names = spec.names;
  const int64_t q_out = c.num_heads * c.head_dim;
  const int64_t kv_out = c.num_kv_heads * c.head_dim;
  AttentionWeights a;
  if (!names.qkv_proj.empty()) {
    // One [q | k | v] matrix: the three projections are row ranges of it.
    Linear fused = linear(fetch, prefix + names.qkv_proj, q_out + 2 * kv_out, c.hidden_size,
                          c.attention_qkv_bias);
    reject_fused_method(fused, prefix + names.qkv_proj);
    a.q.weight = fused.weight.slice_rows(0, q_out);
    a.k.weight = fused.weight.slice_rows(q_out, q_out + kv_out);
    a.v.weight = fused.weight.slice_rows(q_out + kv_out, q_out + 2 * kv_out);
    for (Linear* part : {&a.q, &a.k, &a.v}) {
      part->input_quant = fused.input_quant;
    }
    if (!fused.bias.empty()) {
      a.q.bias = slice(fused.bias, 0, q_out);
      a.k.bias = slice(fused.bias, q_out, q_out + kv_out);
      a.v.bias = slice(fused.bias, q_out + kv_out, q_out + 2 * kv_out);
    }
  } else {
    a.q = linear(fetch, prefix + names.q_proj, q_out, c.hidden_size, c.attention_qkv_bias);
    a.k = linear(fetch, prefix + names.k_proj, kv_out, c.hidden_size, c.attention_qkv_bias);
    a.v = linear(fetch, prefix + names.v_proj, kv_out, c.hidden_size, c.attention_qkv_bias);
  }
  a.o = linear(fetch, prefix + names.o_proj, c.hidden_size, q_out, c.attention_out_bias);
  if (c.qk_norm) {
    a.q_norm = fetch.vector_f32(prefix + names.q_norm, c.head_dim, spec.norm_weight_offset);
    a.k_norm = fetch.vector_f32(prefix + names.k_norm, c.head_dim, spec.norm_weight_offset);
  }
  return a;
}

MlpWeights load_mlp(TensorFetcher& fetch, const ModelConfig& c, const ArchSpec& spec,
                    const std::string& prefix) {
  const ArchTensorNames& names = spec.names;
  const int64_t inter = c.intermediate_size;
  MlpWeights m;
  if (!names.gate_up_proj.empty()) {
    // One [gate | up] matrix: gate is the first half of the rows.
    Linear fused = linear(fetch, prefix + names.gate_up_proj, 2 * inter, c.hidden_size, c.mlp_bias);
    reject_fused_method(fused, prefix + names.gate_up_proj);
    m.gate.weight = fused.weight.slice_rows(0, inter);
    m.up.weight = fused.weight.slice_rows(inter, 2 * inter);
    for (Linear* part : {&m.gate, &m.up}) {
      part->input_quant = fused.input_quant;
    }
    if (!fused.bias.empty()) {
      m.gate.bias = slice(fused.bias, 0, inter);
      m.up.bias = slice(fused.bias, inter, 2 * inter);
    }
  } else {
    m.gate = linear(fetch, prefix + names.gate_proj, inter, c.hidden_size, c.mlp_bias);
    m.up = linear(fetch, prefix + names.up_proj, inter, c.hidden_size, c.mlp_bias);
  }
  m.down = linear(fetch, prefix + names.down_proj, c.hidden_size, inter, c.mlp_bias);
  return m;
}

MoeWeights load_moe(TensorFetcher& fetch, const ModelConfig& c, const ArchSpec& spec,
                    const std::string& prefix) {
  const ArchTensorNames& names = spec.names;
  const int64_t experts = c.num_experts;
  const int64_t inter = c.moe_intermediate_size;
  const int64_t hidden = c.hidden_size;
  MoeWeights moe;
  std::string router = prefix + names.router.front();
  for (const std::string& candidate : names.router) {
    if (fetch.has(prefix + candidate)) {
      router = prefix + candidate;
      break;
    }
  }
  moe.router.weight = fetch.get(router, {experts, hidden});
  moe.experts.resize(static_cast<size_t>(experts));
  if (fetch.has(prefix + names.experts_gate_up)) {
    // transformers 5's in-memory layout: [E, 2I, hidden] (gate rows, then up) and [E, hidden, I].
    Tensor gate_up = fetch.get(prefix + names.experts_gate_up, {experts, 2 * inter, hidden});
    Tensor down = fetch.get(prefix + names.experts_down, {experts, hidden, inter});
    for (int64_t e = 0; e < experts; ++e) {
      MlpWeights& m = moe.experts[static_cast<size_t>(e)];
      Tensor gu = gate_up.slice_rows(e, e + 1).reshaped({2 * inter, hidden});
      m.gate.weight = gu.slice_rows(0, inter);
      m.up.weight = gu.slice_rows(inter, 2 * inter);
      m.down.weight = down.slice_rows(e, e + 1).reshaped({hidden, inter});
    }
    return moe;
  }
  for (int64_t e = 0; e < experts; ++e) {
    const std::string base = prefix + names.experts + std::to_string(e) + ".";
    MlpWeights& m = moe.experts[static_cast<size_t>(e)];
    m.gate = fetch.linear_weight(base + names.expert_gate, inter, hidden, quant::LayerKind::Experts);
    m.up = fetch.linear_weight(base + names.expert_up, inter, hidden, quant::LayerKind::Experts);
    m.down = fetch.linear_weight(base + names.expert_down, hidden, inter, quant::LayerKind::Experts);
  }
  return moe;
}

std::vector<std::string> report_unused(const formats::Checkpoint& checkpoint,
                                       const TensorFetcher& fetch, const ModelConfig& c,
                                       const ArchSpec& spec) {
  std::vector<std::string> unused;
  for (const std::string& name : checkpoint.names()) {
    if (fetch.used().count(name) != 0) continue;
    if (fetch.is_quantization_extra(name)) continue;
    // Buffers some exporters save, and a redundant lm_head in a tied checkpoint.
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (c.tie_word_embeddings && name == spec.names.lm_head) continue;
    unused.push_back(name);
  }
  if (!unused.empty()) {
    log_warn(checkpoint.path() + ": " + std::to_string(unused.size()) + " tensor(s) not used by " +
             c.architecture + ", e.g. '" + unused.front() + "'");
  }
  return unused;
}

}  // namespace

DecoderWeights load_decoder_weights(const formats::Checkpoint& checkpoint, const ModelConfig& c,
                                    const ArchSpec& spec, const quant::QuantizationConfig* quantization,
                                    const std::string& linear_backend,
                                    std::optional<DType> dequant_dtype,
                                    std::vector<std::string>* unused) {
  TensorFetcher fetch(checkpoint, c, quantization, linear_backend);
  const ArchTensorNames& names = spec.names;
  DecoderWeights w;
  w.embed = fetch.get(names.embed, {c.vocab_size, c.hidden_size});
  fetch.model_dtype = dequant_dtype.value_or(w.embed.dtype());
  w.embed_scale = spec.scale_embedding
                      ? static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)))
                      : 1.0f;
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string prefix = names.layer_prefix + std::to_string(l) + ".";
    LayerWeights& layer = w.layers[static_cast<size_t>(l)];
    layer.input_norm =
        fetch.vector_f32(prefix + names.input_norm, c.hidden_size, spec.norm_weight_offset);
    layer.post_attention_norm = fetch.vector_f32(prefix + names.post_attention_norm, c.hidden_size,
                                                 spec.norm_weight_offset);
    layer.attention = load_attention(fetch, c, spec, prefix);
    if (c.layer_is_moe[static_cast<size_t>(l)]) {
      layer.moe = load_moe(fetch, c, spec, prefix);
    } else {
      layer.mlp = load_mlp(fetch, c, spec, prefix);
    }
    layer.sliding_window = c.sliding_window[static_cast<size_t>(l)];
  }
  w.final_norm = fetch.vector_f32(names.final_norm, c.hidden_size, spec.norm_weight_offset);
  if (c.tie_word_embeddings) {
    w.lm_head.weight = w.embed;  // the unscaled embedding matrix
  } else {
    const std::string head = names.lm_head.substr(0, names.lm_head.rfind(".weight"));
    if (!checkpoint.has(names.lm_head) && !checkpoint.has(head + ".weight_packed") &&
        !checkpoint.has(head + ".weight_scale") && !checkpoint.has(head + ".qweight")) {
      throw InvalidArgument(checkpoint.path() + ": tensor '" + names.lm_head + "' is missing and " +
                            c.source + " has tie_word_embeddings false");
    }
    w.lm_head = fetch.linear_weight(head, c.vocab_size, c.hidden_size, quant::LayerKind::LmHead);
  }
  for (const auto& [kernel, modules] : fetch.kernels_selected()) {
    log_info("Selected " + kernel + " for " + std::to_string(modules) + " module(s) (LOWBIT_LOG=debug "
             "names each)");
  }
  std::vector<std::string> not_used = report_unused(checkpoint, fetch, c, spec);
  if (unused != nullptr) *unused = std::move(not_used);
  return w;
}

}  // namespace lowbit::models
