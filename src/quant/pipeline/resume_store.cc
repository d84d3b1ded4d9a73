#include "quant/pipeline/resume_store.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "lowbit/error.h"

namespace lowbit::quant {

namespace fs = std::filesystem;

namespace {

Tensor f32_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::zeros(DType::F32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.data_as<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> f32_values(const Tensor& t) {
  const Tensor f = t.to_f32();
  return std::vector<float>(f.data_as<const float>(), f.data_as<const float>() + f.numel());
}

Tensor f64_tensor(const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::F64, {static_cast<int64_t>(v.size())});
  std::memcpy(t.data(), v.data(), v.size() * sizeof(double));
  return t;
}

}  // namespace

std::string fingerprint_of(const std::string& data) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

ResumeStore::ResumeStore(std::string dir, std::string fingerprint)
    : dir_(std::move(dir)), fingerprint_(std::move(fingerprint)) {
  fs::create_directories(dir_);
}

std::string ResumeStore::layer_file(int layer) const {
  char name[32];
  std::snprintf(name, sizeof name, "layer-%05d.safetensors", layer);
  return (fs::path(dir_) / name).string();
}

int ResumeStore::completed_layers() const {
  const fs::path progress = fs::path(dir_) / "progress.json";
  if (!fs::exists(progress)) return 0;
  std::ifstream in(progress);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception&) {
    throw InvalidArgument(progress.string() + ": unreadable; delete the .tmp directory to start over");
  }
  if (j.value("fingerprint", std::string()) != fingerprint_) {
    throw InvalidArgument(progress.string() +
                          ": this unfinished run used a different model, recipe or calibration "
                          "set; use --overwrite to start over");
  }
  return j.value("layers_done", 0);
}

void ResumeStore::mark_done(int layers) const {
  const fs::path path = fs::path(dir_) / "progress.json";
  const fs::path tmp = fs::path(dir_) / "progress.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"fingerprint", fingerprint_}, {"layers_done", layers}}.dump() << "\n";
    if (!out) throw IoError(tmp.string() + ": cannot write");
  }
  fs::rename(tmp, path);
}

void ResumeStore::save_layer(int layer, const ModulePlan& plan, const QuantizeOutcome& outcome) const {
  std::map<std::string, Tensor> tensors;
  for (int index : plan.of_layer(layer)) {
    const auto it = outcome.modules.find(index);
    if (it == outcome.modules.end()) continue;
    const PlannedLinear& p = plan.linears[static_cast<size_t>(index)];
    const QuantizedModule& m = it->second;
    tensors[p.name + ".weight"] = p.linear->weight;
    if (m.original.data() != nullptr) tensors[p.name + ".original"] = m.original;
    tensors[p.name + ".qp.scale"] = f32_tensor(m.qparams.scale);
    if (!m.qparams.zero_point.empty()) tensors[p.name + ".qp.zero_point"] = f32_tensor(m.qparams.zero_point);
    tensors[p.name + ".qp.meta"] = f64_tensor(
        {static_cast<double>(m.qparams.grid_rows), static_cast<double>(m.qparams.grid_cols),
         static_cast<double>(m.qparams.global_scale),
         static_cast<double>(static_cast<int>(m.qparams.scale_dtype)), m.loss, m.seconds,
         static_cast<double>(m.damping_retries), static_cast<double>(m.input_scale),
         static_cast<double>(m.input_zero_point), static_cast<double>(m.input_global_scale)});
    if (!m.g_idx.empty()) {
      Tensor g = Tensor::zeros(DType::I32, {static_cast<int64_t>(m.g_idx.size())});
      std::memcpy(g.data(), m.g_idx.data(), m.g_idx.size() * sizeof(int32_t));
      tensors[p.name + ".g_idx"] = g;
    }
  }
  if (const auto kv = outcome.kv.find(layer); kv != outcome.kv.end()) {
    tensors["kv.k"] = f32_tensor(kv->second.k);
    tensors["kv.v"] = f32_tensor(kv->second.v);
  }
  formats::write_safetensors(layer_file(layer), tensors);
}

void ResumeStore::load_layer(int layer, ModulePlan& plan, QuantizeOutcome& outcome) const {
  const std::shared_ptr<formats::SafetensorsFile> opened = formats::SafetensorsFile::open(layer_file(layer));
  const formats::SafetensorsFile& file = *opened;
  for (int index : plan.of_layer(layer)) {
    PlannedLinear& p = plan.linears[static_cast<size_t>(index)];
    if (!file.has(p.name + ".weight")) continue;
    Tensor w = file.get(p.name + ".weight");
    // Own the data: the mapped file goes away with `file`.
    Tensor owned = Tensor::zeros(w.dtype(), w.shape());
    std::memcpy(owned.data(), w.data(), w.nbytes());
    p.linear->weight = owned;
    QuantizedModule m;
    if (file.has(p.name + ".original")) {
      const Tensor o = file.get(p.name + ".original");
      m.original = Tensor::zeros(o.dtype(), o.shape());
      std::memcpy(m.original.data(), o.data(), o.nbytes());
    }
    m.qparams.scale = f32_values(file.get(p.name + ".qp.scale"));
    if (file.has(p.name + ".qp.zero_point")) m.qparams.zero_point = f32_values(file.get(p.name + ".qp.zero_point"));
    const Tensor meta = file.get(p.name + ".qp.meta");
    const double* v = static_cast<const double*>(meta.data());
    m.qparams.grid_rows = static_cast<int64_t>(v[0]);
    m.qparams.grid_cols = static_cast<int64_t>(v[1]);
    m.qparams.global_scale = static_cast<float>(v[2]);
    m.qparams.scale_dtype = static_cast<DType>(static_cast<int>(v[3]));
    m.loss = v[4];
    m.seconds = v[5];
    m.damping_retries = static_cast<int>(v[6]);
    m.input_scale = static_cast<float>(v[7]);
    m.input_zero_point = static_cast<float>(v[8]);
    m.input_global_scale = static_cast<float>(v[9]);
    if (file.has(p.name + ".g_idx")) {
      const Tensor g = file.get(p.name + ".g_idx");
      const int32_t* gi = static_cast<const int32_t*>(g.data());
      m.g_idx.assign(gi, gi + g.numel());
    }
    outcome.modules[index] = std::move(m);
  }
  if (file.has("kv.k")) outcome.kv[layer] = KvScales{f32_values(file.get("kv.k")), f32_values(file.get("kv.v"))};
}

}  // namespace lowbit::quant
