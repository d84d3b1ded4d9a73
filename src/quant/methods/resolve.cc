#include "quant/methods/resolve.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/log.h"
#include "lowbit/error.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(path.string() + ": cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

// A method's own config file (quantize_config.json, ...) when config.json has no
// quantization_config. GPTQ and AWQ writers both use quantize_config.json; its quant_method field
// (GPTQModel, recent AutoAWQ) decides, else AutoAWQ's "zero_point"/"version" keys.
struct FoundFile {
  std::string method;
  nlohmann::json config;
  std::string path;
};

std::optional<FoundFile> find_config_file(const std::string& dir) {
  std::vector<FoundFile> found;
  for (const std::string& name : registered_quantizations()) {
    const MethodDescription d = describe_quantization(name);
    if (d.name != name) continue;  // aliases share their canonical method's files
    for (const std::string& file : d.config_filenames) {
      const fs::path path = fs::path(dir) / file;
      if (!fs::exists(path)) continue;
      nlohmann::json j = read_json_file(path);
      std::string claimed = normalize_method_name(j.value("quant_method", std::string()));
      // ModelOpt's hf_quant_config.json names its producer instead of a quant_method.
      if (claimed.empty() && j.contains("producer") && j.at("producer").is_object() &&
          j.at("producer").value("name", std::string()) == "modelopt") {
        claimed = "modelopt";
      }
      if (claimed.empty()) claimed = (j.contains("zero_point") || j.contains("version")) ? "awq" : "gptq";
      if (claimed != name) continue;
      found.push_back(FoundFile{name, std::move(j), path.string()});
    }
  }
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {
    throw InvalidArgument(dir + ": several quantization config files (" + found[0].path + ", " +
                          found[1].path + ") and no quantization_config in config.json");
  }
  return found.front();
}

// The checkpoint's config on the layers it quantized, the online config on Linear and expert
// layers it left in float; an online request for a layer the checkpoint quantized is an error.
class LayeredConfig : public QuantizationConfig {
 public:
  LayeredConfig(std::unique_ptr<QuantizationConfig> checkpoint,
                std::unique_ptr<QuantizationConfig> online)
      : checkpoint_(std::move(checkpoint)), online_(std::move(online)) {}

  MethodDescription describe() const override { return checkpoint_->describe(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    std::unique_ptr<LinearMethod> stored = checkpoint_->get_quant_method(layer);
    const bool online_kind = layer.kind == LayerKind::Linear || layer.kind == LayerKind::Experts;
    if (!online_kind) return stored;
    if (stored) {
      throw InvalidArgument(layer.prefix + " is already quantized by the checkpoint (" +
                            checkpoint_->get_name() + "); online quantization '" +
                            online_->get_name() + "' cannot quantize it again (drop --quantization)");
    }
    return online_->get_quant_method(layer);
  }

  std::optional<KvCacheScales> kv_cache_scales(const std::string& prefix) const override {
    return checkpoint_->kv_cache_scales(prefix);
  }

 private:
  std::unique_ptr<QuantizationConfig> checkpoint_;
  std::unique_ptr<QuantizationConfig> online_;
};

}  // namespace

std::string normalize_method_name(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "compressed_tensors") s = "compressed-tensors";
  return s;
}

void require_supported(const MethodDescription& method, const Platform& platform) {
  if (!method.unsupported.empty()) {
    throw Unsupported("quantization method " + method.name + " is not supported by lowbit: " +
                      method.unsupported);
  }
  std::string needs;
  for (const KernelSpec& k : method.kernels) {
    const std::string missing = k.missing_on(platform);
    if (missing.empty()) return;
    needs += (needs.empty() ? "" : "; ") + k.name + " " + missing;
  }
  if (method.kernels.empty()) needs = "it declares no kernels";
  std::string cap;
  if (method.min_capability > 0) {
    cap = " (minimum compute capability " + std::to_string(method.min_capability / 10) + "." +
          std::to_string(method.min_capability % 10) + ")";
  }
  throw Unsupported("quantization method " + method.name + cap + " cannot run on this machine (" +
                    platform.describe() + "): " + needs);
}

std::string ResolvedQuantization::describe() const {
  if (checkpoint_method.empty() && online_method.empty()) return "none (unquantized)";
  if (online_method.empty()) return checkpoint_method + " (checkpoint)";
  if (checkpoint_method.empty()) return online_method + " (online)";
  return checkpoint_method + " (checkpoint) + " + online_method + " (online, float layers)";
}

ResolvedQuantization resolve_quantization(const std::string& model_dir,
                                          const std::string& quantization_config_json,
                                          const std::string& where,
                                          const QuantizationRequest& request) {
  ResolvedQuantization r;
  std::unique_ptr<QuantizationConfig> stored;
  if (!quantization_config_json.empty()) {
    const nlohmann::json j = nlohmann::json::parse(quantization_config_json);
    const std::string field = where + ": quantization_config";
    if (!j.is_object() || !j.contains("quant_method") || !j.at("quant_method").is_string()) {
      throw InvalidArgument(field + ".quant_method is missing or not a string");
    }
    const std::string method = normalize_method_name(j.at("quant_method").get<std::string>());
    if (!is_registered_quantization(method)) {
      throw Unsupported(field + ".quant_method '" + j.at("quant_method").get<std::string>() +
                        "' is not a known quantization method (`lowbit methods` lists them; a "
                        "plugin can add it with --plugin)");
    }
    stored = make_quantization_config(method, j, field);
  } else if (std::optional<FoundFile> file = find_config_file(model_dir)) {
    stored = make_quantization_config(file->method, file->config, file->path);
  }
  if (stored) {
    r.checkpoint_method = stored->get_name();
    require_supported(stored->describe(), Platform::current());
  }

  const std::string wanted = normalize_method_name(request.quantization);
  if (wanted.empty()) {
    r.config = std::move(stored);
    return r;
  }
  if (!is_registered_quantization(wanted)) {
    throw Unsupported("--quantization '" + request.quantization +
                      "' is not a known quantization method (`lowbit methods` lists them)");
  }
  const MethodDescription asked = describe_quantization(wanted);
  if (!asked.unsupported.empty()) require_supported(asked, Platform::current());
  if (stored && asked.name == r.checkpoint_method) {
    r.config = std::move(stored);  // the checkpoint's own method, named explicitly
    return r;
  }
  if (!asked.online) {
    if (stored) {
      throw InvalidArgument("--quantization " + request.quantization + " contradicts " + where +
                            ", which is quantized with " + r.checkpoint_method);
    }
    throw InvalidArgument("--quantization " + request.quantization + ": " + model_dir +
                          " is not quantized and " + asked.name +
                          " only loads checkpoints it wrote (online methods: `lowbit methods`)");
  }
  // As vLLM's get_quant_config: a method asked for by name reads its own config file when the
  // checkpoint has none, here one that no method claimed (no quant_method; deepspeedfp's
  // quant_config.json {bits, group_size}).
  nlohmann::json asked_config = nlohmann::json::object();
  std::string asked_where = "--quantization " + wanted;
  for (const std::string& file : stored ? std::vector<std::string>{} : asked.config_filenames) {
    const fs::path path = fs::path(model_dir) / file;
    if (!fs::exists(path)) continue;
    nlohmann::json j = read_json_file(path);
    if (!j.is_object() || j.contains("quant_method")) continue;
    asked_config = std::move(j);
    asked_where = path.string();
    break;
  }
  std::unique_ptr<QuantizationConfig> online =
      make_quantization_config(wanted, asked_config, asked_where);
  r.online_method = online->get_name();
  require_supported(online->describe(), Platform::current());
  if (stored) {
    log_info("online " + r.online_method + " quantizes the layers " + r.checkpoint_method +
             " left unquantized");
    r.config = std::make_unique<LayeredConfig>(std::move(stored), std::move(online));
  } else {
    r.config = std::move(online);
  }
  return r;
}

}  // namespace lowbit::quant
