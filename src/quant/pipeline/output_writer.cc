#include "quant/pipeline/output_writer.h"

#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lowbit/error.h"
#include "quant/pipeline/layer_state.h"
#include "quant/scheme/compressed_tensor.h"

namespace lowbit::quant {

namespace fs = std::filesystem;

namespace {

Tensor vector_tensor(const std::vector<float>& v, Shape shape, DType dtype) {
  return Tensor::from_f32(v.data(), std::move(shape), dtype);
}

// The model's fp32 norm vector back in the checkpoint's dtype (exact unless it was smoothed,
// in which case the pipeline already rounded it to that dtype).
Tensor norm_tensor(const std::vector<float>& v, float offset, DType dtype) {
  std::vector<float> stored(v);
  for (float& x : stored) x -= offset;
  return vector_tensor(stored, {static_cast<int64_t>(v.size())}, dtype);
}

// A static input's zero point in compressed-tensors' zp_dtype: int8 for int inputs (the value is
// an integer in range: qparams_from_minmax rounded and clamped it), the float dtype otherwise.
Tensor zero_point_tensor(float zero, const QuantArgs& args) {
  if (args.type == QuantType::Int) {
    Tensor t = Tensor::zeros(DType::I8, {1});
    *static_cast<int8_t*>(t.data()) = static_cast<int8_t>(zero);
    return t;
  }
  return vector_tensor({zero}, {1}, args.zp_dtype.value_or(DType::F8_E4M3));
}

CompressionFormat group_format(const QuantScheme& s) { return s.format.value_or(infer_format(s)); }

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw IoError(p.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw IoError(p.string() + ": cannot write");
}

// compress_module of every quantized Linear, side by side: each module's work (quantize, pack) is
// independent and reads only its own Linear and qparams, so the bytes are those of the serial
// loop. An 8B model is ~7e9 weights at ~15 ns each on one core (~100 s); on 16 cores ~8 s. The
// first failure in plan order is rethrown, as the serial loop would have.
std::map<int, std::vector<NamedTensor>> compress_all(const OutputRequest& r,
                                                     const std::vector<int>& indices) {
  std::vector<std::vector<NamedTensor>> done(indices.size());
  std::vector<std::exception_ptr> failed(indices.size());
  const auto n = static_cast<int64_t>(indices.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < n; ++k) {
    try {
      done[static_cast<size_t>(k)] = compress_module(r, indices[static_cast<size_t>(k)]);
    } catch (...) {
      failed[static_cast<size_t>(k)] = std::current_exception();
    }
  }
  std::map<int, std::vector<NamedTensor>> out;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (failed[k]) std::rethrow_exception(failed[k]);
    out[indices[k]] = std::move(done[k]);
  }
  return out;
}

void add_linear(const OutputRequest& r, int index,
                std::map<int, std::vector<NamedTensor>>& compressed,
                std::map<std::string, Tensor>& out) {
  auto it = compressed.find(index);
  std::vector<NamedTensor> tensors =
      it != compressed.end() ? std::move(it->second) : compress_module(r, index);
  for (NamedTensor& t : tensors) out[t.name] = std::move(t.tensor);
}

std::map<std::string, Tensor> collect_tensors(const OutputRequest& r) {
  const models::Model& model = *r.model;
  const formats::Checkpoint& ckpt = model.checkpoint();
  const models::ArchTensorNames& names = model.spec().names;
  const float offset = model.spec().norm_weight_offset;
  std::map<std::string, int> linear_of;  // "<module>.weight" / ".bias" → plan index
  for (size_t i = 0; i < r.plan->linears.size(); ++i) linear_of[r.plan->linears[i].name] = static_cast<int>(i);
  std::vector<int> quantized;  // the Linears whose checkpoint weight gets compressed, in order
  for (const std::string& name : ckpt.names()) {
    const size_t dot = name.rfind('.');
    const auto it = linear_of.find(name.substr(0, dot));
    if (it != linear_of.end() && name.substr(dot + 1) == "weight" &&
        r.plan->linears[static_cast<size_t>(it->second)].group >= 0)
      quantized.push_back(it->second);
  }
  // An untied lm_head has no tensor of its own in the tied checkpoint: its quantized form is added.
  const int untied_head = r.plan->untied_lm_head ? static_cast<int>(r.plan->linears.size()) - 1 : -1;
  if (untied_head >= 0) quantized.push_back(untied_head);
  std::map<int, std::vector<NamedTensor>> compressed = compress_all(r, quantized);
  std::map<std::string, Tensor> out;
  for (const std::string& name : ckpt.names()) {
    const size_t dot = name.rfind('.');
    const std::string module = name.substr(0, dot);
    const std::string leaf = name.substr(dot + 1);
    const auto it = linear_of.find(module);
    if (it != linear_of.end() && (leaf == "weight" || leaf == "bias")) {
      const PlannedLinear& p = r.plan->linears[static_cast<size_t>(it->second)];
      if (leaf == "bias") {
        out[name] = vector_tensor(p.linear->bias, {static_cast<int64_t>(p.linear->bias.size())},
                                  ckpt.get(name).dtype());
      } else if (p.group >= 0) {
        add_linear(r, it->second, compressed, out);
      } else {
        out[name] = p.linear->weight;  // unquantized, possibly smoothed
      }
      continue;
    }
    out[name] = ckpt.get(name);
  }
  if (untied_head >= 0) add_linear(r, untied_head, compressed, out);
  // Norms the smoothing steps may have changed.
  for (size_t l = 0; l < model.weights().layers.size(); ++l) {
    const std::string prefix = names.layer_prefix + std::to_string(l) + ".";
    const models::LayerWeights& layer = model.weights().layers[l];
    for (const auto& [leaf, v] : {std::pair{names.input_norm, &layer.input_norm},
                                  std::pair{names.post_attention_norm, &layer.post_attention_norm}}) {
      const std::string name = prefix + leaf;
      out[name] = norm_tensor(*v, offset, ckpt.get(name).dtype());
    }
  }
  for (const auto& [layer, kv] : r.outcome->kv) {
    const std::string attn = names.layer_prefix + std::to_string(layer) + ".self_attn.";
    const bool per_head = kv.k.size() > 1;
    const Shape shape = per_head ? Shape{static_cast<int64_t>(kv.k.size()), 1, 1} : Shape{1};
    out[attn + "k_scale"] = vector_tensor(kv.k, shape, r.compute);
    out[attn + "v_scale"] = vector_tensor(kv.v, shape, r.compute);
  }
  return out;
}

size_t largest_input_shard(const formats::Checkpoint& ckpt) {
  size_t largest = 0;
  for (const auto& f : ckpt.files()) largest = std::max<size_t>(largest, fs::file_size(f->path()));
  return largest;
}

bool is_weight_file(const std::string& name) {
  return name.size() > 12 && (name.rfind(".safetensors") == name.size() - 12 ||
                              name == "model.safetensors.index.json" ||
                              name.find(".safetensors.index.json") != std::string::npos);
}

}  // namespace

std::vector<NamedTensor> compress_module(const OutputRequest& r, int index) {
  const PlannedLinear& p = r.plan->linears[static_cast<size_t>(index)];
  const QuantScheme& scheme = r.step->groups[static_cast<size_t>(p.group)].second;
  const QuantizedModule& m = r.outcome->modules.at(index);
  if (!m.written.empty()) return m.written;
  const Tensor values = (m.original.data() != nullptr ? m.original : p.linear->weight).to_f32();
  WeightToCompress w;
  w.module = p.name;
  w.values = values.data_as<const float>();
  w.rows = p.linear->out_features();
  w.cols = p.linear->in_features();
  w.original_dtype = r.compute;
  w.qparams = &m.qparams;
  w.args = &*scheme.weights;
  if (!m.g_idx.empty()) w.g_idx = &m.g_idx;
  std::vector<NamedTensor> out = compress_weight(w, group_format(scheme));
  if (scheme.input_activations && !scheme.input_activations->is_dynamic()) {
    out.push_back({p.name + ".input_scale", vector_tensor({m.input_scale}, {1}, r.compute)});
    if (!scheme.input_activations->symmetric) {
      out.push_back({p.name + ".input_zero_point", zero_point_tensor(m.input_zero_point,
                                                                     *scheme.input_activations)});
    }
  } else if (scheme.input_activations &&
             scheme.input_activations->strategy == Strategy::TensorGroup) {
    // NVFP4 inputs: group scales computed at run time under this calibrated global scale
    // (compressed-tensors keeps it in float32 whatever the model dtype).
    out.push_back({p.name + ".input_global_scale", vector_tensor({m.input_global_scale}, {1}, DType::F32)});
  }
  return out;
}

void load_written_weights(const OutputRequest& r) {
  for (auto& [index, m] : r.outcome->modules) {
    const PlannedLinear& p = r.plan->linears[static_cast<size_t>(index)];
    const QuantScheme& scheme = r.step->groups[static_cast<size_t>(p.group)].second;
    m.written = compress_module(r, index);
    std::map<std::string, Tensor> tensors;
    for (const NamedTensor& t : m.written) tensors[t.name] = t.tensor;
    TensorSource source;
    source.has = [&](const std::string& name) { return tensors.count(name) != 0; };
    source.get = [&](const std::string& name) { return tensors.at(name); };
    source.description = "the quantized model in memory";
    const std::vector<float> values =
        decompress_weight(source, p.name, *scheme.weights, group_format(scheme),
                          p.linear->out_features(), p.linear->in_features());
    set_weight(*p.linear, values, r.compute);
  }
}

CompressedTensorsConfig output_quantization_config(const OutputRequest& r) {
  CompressedTensorsConfig c;
  c.config_groups = r.step->groups;
  // compressed-tensors records each group's (inferred) format, even when all groups share one.
  for (auto& [name, scheme] : c.config_groups) scheme.format = group_format(scheme);
  c.kv_cache_scheme = r.step->kv_cache_scheme;
  c.version = kCompressedTensorsVersion;
  std::set<CompressionFormat> formats;
  for (const auto& [name, scheme] : c.config_groups) formats.insert(group_format(scheme));
  c.format = formats.size() == 1 ? *formats.begin() : CompressionFormat::MixedPrecision;
  // compressed-tensors lists the unquantized modules of a targeted class by exact name.
  for (const PlannedLinear& p : r.plan->linears) {
    if (p.group < 0) c.ignore.push_back(p.name);
  }
  if (r.model->config().tie_word_embeddings && !r.plan->untied_lm_head) c.ignore.push_back("lm_head");
  return c;
}

void write_quantized_checkpoint(const OutputRequest& r, const std::string& dir) {
  const models::Model& model = *r.model;
  const fs::path in_dir(model.directory());
  fs::create_directories(dir);
  const std::map<std::string, Tensor> tensors = collect_tensors(r);
  formats::write_sharded_safetensors(dir, tensors, largest_input_shard(model.checkpoint()),
                                     {{"format", "pt"}});
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(read_text(in_dir / "config.json"));
  config.erase("compression_config");
  config["quantization_config"] = quantization_config_to_json(output_quantization_config(r));
  if (r.plan->untied_lm_head) config["tie_word_embeddings"] = false;
  write_text(fs::path(dir) / "config.json", config.dump(2) + "\n");
  for (const fs::directory_entry& e : fs::directory_iterator(in_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == "config.json" || is_weight_file(name)) continue;
    if (name == "recipe.yaml") continue;
    fs::copy_file(e.path(), fs::path(dir) / name, fs::copy_options::overwrite_existing);
  }
  if (!r.recipe_yaml.empty()) write_text(fs::path(dir) / "recipe.yaml", r.recipe_yaml);
}

}  // namespace lowbit::quant
