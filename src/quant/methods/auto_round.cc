// quant_method "auto-round" (aliases "intel/auto-round", "auto_round"): checkpoints Intel
// AutoRound saves in its own format (`quantize_and_save(format="auto_round")`, auto-round 0.15).
// The int codes are stored in the layout of an existing kernel, named by packing_format:
//   "auto_round:auto_gptq", "auto_round:gptq", "auto" (and absent)  GPTQ, v1 zeros (stored zero-1);
//                                                                   what symmetric schemes get
//   "auto_round", "auto_round:gptqmodel"                            GPTQ, v2 zeros (stored as is);
//                                                                   asymmetric schemes other than
//                                                                   uniform 4-bit
//   "auto_round:auto_awq", "auto_round:awq"                         AutoAWQ GEMM; asymmetric 4-bit
// so each layer is handed to the gptq or awq method (gptq.cc, awq.cc) with the settings that
// apply to it. Which layers: the Linear layers under block_name_to_quantize (a comma-separated
// string or a list; absent: every decoder Linear), plus extra_config entries, which also override
// bits / group_size / sym per layer (a key is an exact module name or, when it has regex syntax
// other than '.', a Python regular expression searched in the name, as auto-round's loader does;
// bits >= 16 = left in float; keys are tried in sorted order, not the file's). Exports to other tools' formats ("auto_gptq", "auto_awq") write plain gptq / awq
// checkpoints and load through those methods. fp8 / mx / nvfp / llm_compressor packings and
// quantized activations (act_bits < 16) are rejected naming the field.
#include <regex>

#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/methods/skip_list.h"

namespace lowbit::quant {
namespace {

enum class Packing { GptqV1, GptqV2, Awq };

struct LayerScheme {
  int64_t bits = 4;
  int64_t group_size = 128;
  bool sym = true;
  std::string data_type = "int";
  int64_t act_bits = 16;
};

Packing parse_packing(const std::string& packing, const std::string& where) {
  if (packing == "auto_round:auto_gptq" || packing == "auto_round:gptq" || packing == "auto") {
    return Packing::GptqV1;
  }
  if (packing == "auto_round" || packing == "auto_round:gptqmodel") return Packing::GptqV2;
  if (packing == "auto_round:auto_awq" || packing == "auto_round:awq") return Packing::Awq;
  throw Unsupported(where + ".packing_format '" + packing +
                    "' is not supported (supported: auto_round:auto_gptq, auto_round:gptq, "
                    "auto_round, auto_round:gptqmodel, auto_round:auto_awq; fp8 / mxfp / nvfp / "
                    "llm_compressor packings are not)");
}

// bits / group_size / sym / data_type / act_bits of one scheme object, over `base`.
LayerScheme read_scheme(const nlohmann::json& j, const LayerScheme& base, const std::string& where) {
  LayerScheme s = base;
  auto integer = [&](const char* key, int64_t& out) {
    if (!j.contains(key) || j.at(key).is_null()) return;
    if (!j.at(key).is_number_integer()) {
      throw InvalidArgument(where + "." + key + " must be an integer, not " + j.at(key).dump());
    }
    out = j.at(key).get<int64_t>();
  };
  integer("bits", s.bits);
  integer("group_size", s.group_size);
  integer("act_bits", s.act_bits);
  if (j.contains("sym") && !j.at("sym").is_null()) s.sym = bool_field(j, {"sym"}, true, where);
  if (j.contains("data_type") && !j.at("data_type").is_null()) {
    s.data_type = string_field(j, {"data_type"}, "int", where);
  }
  return s;
}

// block_name_to_quantize: "model.layers", "a,b", ["a", "b"] or [["a.0", "a.1"], ...] (a list of
// a block's layers stands for their common prefix, as auto-round reads it).
std::vector<std::string> block_names(const nlohmann::json& v, const std::string& where) {
  std::vector<std::string> out;
  auto add_csv = [&](const std::string& s) {
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      std::string name = s.substr(start, end - start);
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      if (!name.empty()) out.push_back(name);
      start = end + 1;
    }
  };
  if (v.is_string()) {
    add_csv(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (e.is_string()) {
        out.push_back(e.get<std::string>());
      } else if (e.is_array() && !e.empty() && e[0].is_string()) {
        std::string common = e[0].get<std::string>();
        for (const auto& n : e) {
          if (!n.is_string()) throw InvalidArgument(where + ".block_name_to_quantize holds " + n.dump());
          const std::string s = n.get<std::string>();
          size_t i = 0;
          while (i < common.size() && i < s.size() && common[i] == s[i]) ++i;
          common.resize(i);
        }
        while (!common.empty() && common.back() == '.') common.pop_back();
        out.push_back(common);
      } else {
        throw InvalidArgument(where + ".block_name_to_quantize holds " + e.dump() +
                              ", not a block name");
      }
    }
  } else if (!v.is_null()) {
    throw InvalidArgument(where + ".block_name_to_quantize must be a string or a list of names");
  }
  return out;
}

class AutoRoundConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<AutoRoundConfig>();
    c->where_ = where;
    if (!j.contains("bits") || !j.contains("group_size")) {
      throw InvalidArgument(where + ": auto-round config needs bits and group_size");
    }
    c->base_ = read_scheme(j, LayerScheme{}, where);
    const std::string packing = string_field(j, {"packing_format"}, "auto_round:auto_gptq", where);
    c->packing_name_ = packing;
    c->packing_ = parse_packing(packing, where);
    c->blocks_ = block_names(get_from_keys_or(j, {"block_name_to_quantize", "to_quant_block_names"},
                                              nullptr),
                             where);
    c->skip_ = string_list_field(j, {"modules_to_not_convert"}, where);
    const nlohmann::json extra = get_from_keys_or(j, {"extra_config"}, nullptr);
    if (!extra.is_null() && !extra.is_object()) {
      throw InvalidArgument(where + ".extra_config must be an object of per-layer settings");
    }
    if (extra.is_object()) {
      for (const auto& [name, cfg] : extra.items()) {
        const std::string field = where + ".extra_config." + name;
        if (!cfg.is_object()) throw InvalidArgument(field + " must be an object");
        c->extra_.emplace_back(name, read_scheme(cfg, c->base_, field));
      }
    }
    // Fail at load, not at the first layer, when the default scheme cannot run.
    c->check_scheme(c->base_, where);
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "auto-round";
    d.summary = "Intel AutoRound's own format: int 2/4/8-bit in GPTQ (v1/v2) or AWQ packing";
    d.min_capability = 60;  // vLLM's INCConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear, LayerKind::LmHead, LayerKind::Experts};
    d.config_filenames = {"quantization_config.json"};  // what auto-round writes beside config.json
    d.kernels = int_weight_kernels();
    d.kernels.erase(d.kernels.begin() + 1);  // no w8a8: activations stay in float
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind == LayerKind::Embedding || layer.kind == LayerKind::Attention) return nullptr;
    if (is_skipped_module(layer.prefix, skip_)) return nullptr;
    const std::optional<LayerScheme> s = scheme_of(layer);
    if (!s || s->bits >= 16) return nullptr;
    const std::string field = where_ + " (layer " + layer.prefix + ")";
    check_scheme(*s, field);
    nlohmann::json inner = {{"bits", s->bits}, {"group_size", s->group_size}};
    std::string method = "gptq";
    if (packing_ == Packing::Awq) {
      method = "awq";
      inner["zero_point"] = true;  // AutoAWQ's qzeros are always stored
      inner["version"] = "gemm";
      if (layer.kind == LayerKind::LmHead) {
        throw Unsupported(layer.prefix + ": an AWQ-packed LM head (" + field +
                          ") is not supported");
      }
    } else {
      inner["sym"] = s->sym;
      inner["desc_act"] = false;
      inner["lm_head"] = true;  // reached only when the checkpoint quantized it
      inner["checkpoint_format"] = packing_ == Packing::GptqV1 ? "gptq" : "gptq_v2";
    }
    const std::string inner_where = field + " as " + method + " (packing_format " + packing_name_ + ")";
    return make_quantization_config(method, inner, inner_where)->get_quant_method(layer);
  }

 private:
  void check_scheme(const LayerScheme& s, const std::string& field) const {
    if (s.bits >= 16) return;
    if (s.data_type.rfind("int", 0) != 0) {
      throw Unsupported(field + ".data_type '" + s.data_type +
                        "': only int weights are supported in the auto_round format");
    }
    if (s.act_bits < 16) {
      throw Unsupported(field + ".act_bits " + std::to_string(s.act_bits) +
                        ": quantized activations are not supported in the auto_round format");
    }
    if (s.bits != 2 && s.bits != 4 && s.bits != 8) {
      throw Unsupported(field + ".bits " + std::to_string(s.bits) + ": supported are 2, 4 and 8 (" +
                        "3-bit packs across words)");
    }
  }

  // The layer's scheme: extra_config (exact name, then regex), else the default for layers in
  // the quantized blocks, else none.
  std::optional<LayerScheme> scheme_of(const LayerInfo& layer) const {
    for (const auto& [name, s] : extra_) {
      if (name == layer.prefix) return s;
    }
    for (const auto& [name, s] : extra_) {
      // A key without regex syntax (besides '.') is a module name: auto-round searches only keys
      // that name no layer of the model, and "model.layers.1.mlp" must not match layer 11.
      if (name.find_first_of("*+?[](){}^$|\\") == std::string::npos) continue;
      try {
        if (std::regex_search(layer.prefix, std::regex(name))) return s;
      } catch (const std::regex_error&) {
        // auto-round skips keys that are not valid regular expressions, too
      }
    }
    if (layer.kind == LayerKind::LmHead) return std::nullopt;  // only through extra_config
    if (blocks_.empty()) return base_;
    for (const std::string& b : blocks_) {
      if (layer.prefix.rfind(b, 0) == 0) return base_;
    }
    return std::nullopt;
  }

  std::string where_;
  LayerScheme base_;
  Packing packing_ = Packing::GptqV1;
  std::string packing_name_;
  std::vector<std::string> blocks_;
  std::vector<std::string> skip_;
  std::vector<std::pair<std::string, LayerScheme>> extra_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(AutoRoundConfig, "auto-round");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(AutoRoundConfig, "intel/auto-round");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(AutoRoundConfig, "auto_round");

}  // namespace lowbit::quant
