// compressed-tensors 0.19.0's PRESET_SCHEMES (quantization/quant_scheme.py), field for field, plus
// lowbit's W4A8_CHANNEL. tests/unit/quant/data/ct_presets.json (dumped from the real library)
// checks every one of them.
#include <algorithm>
#include <cctype>
#include <functional>
#include <map>

#include "lowbit/error.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {
namespace {

// Builds args the way the Python constructors do: explicit fields, then the model validator
// (canonical zp_dtype for symmetric args: see parse_quant_args).
QuantArgs make(int bits, QuantType type, Strategy strategy, int64_t group_size = 0,
               DynamicMode dynamic = DynamicMode::Static, bool symmetric = true) {
  QuantArgs a;
  a.num_bits = bits;
  a.type = type;
  a.strategy = strategy;
  a.group_size = group_size;
  a.dynamic = dynamic;
  a.symmetric = symmetric;
  a.zp_dtype = type == QuantType::Float ? DType::F8_E4M3 : DType::I8;
  return a;
}

QuantArgs int_token(int bits) {
  return make(bits, QuantType::Int, Strategy::Token, 0, DynamicMode::Dynamic);
}

// _int_wnam: int weights group 128; int per-token dynamic inputs when act_bits < 16.
QuantScheme int_wnam(int weight_bits, int act_bits) {
  QuantScheme s;
  s.weights = make(weight_bits, QuantType::Int, Strategy::Group, 128);
  if (act_bits < 16) s.input_activations = int_token(act_bits);
  return s;
}

QuantArgs fp8(Strategy strategy, int64_t group = 0, DynamicMode dyn = DynamicMode::Static) {
  return make(8, QuantType::Float, strategy, group, dyn);
}

// NVFP4: fp4 tensor_group 16 with fp8 group scales (and, for inputs, static global scale).
QuantArgs nvfp4(DynamicMode dyn) {
  QuantArgs a = make(4, QuantType::Float, Strategy::TensorGroup, 16, dyn);
  a.scale_dtype = DType::F8_E4M3;
  if (dyn == DynamicMode::Local) a.observer = "static_minmax";
  return a;
}

// MX: group 32 with uint8 (E8M0) scales.
QuantArgs mx(int bits, DynamicMode dyn) {
  QuantArgs a = make(bits, QuantType::Float, Strategy::Group, 32, dyn);
  a.scale_dtype = DType::U8;
  return a;
}

QuantScheme scheme(std::optional<QuantArgs> w, std::optional<QuantArgs> in = std::nullopt) {
  QuantScheme s;
  s.weights = std::move(w);
  s.input_activations = std::move(in);
  return s;
}

const std::map<std::string, std::function<QuantScheme()>>& presets() {
  static const auto* table = [] {
    auto* m = new std::map<std::string, std::function<QuantScheme()>>;
    auto& t = *m;
    t["UNQUANTIZED"] = [] { return QuantScheme{}; };
    t["W4A16_ASYM"] = [] {
      QuantArgs w = make(4, QuantType::Int, Strategy::Group, 128);
      w.symmetric = false;
      return scheme(w);
    };
    const auto w8a8 = [] {
      return scheme(make(8, QuantType::Int, Strategy::Channel), int_token(8));
    };
    t["W8A8"] = w8a8;
    t["INT8"] = w8a8;
    t["W4AFP8"] = [] {
      return scheme(make(4, QuantType::Int, Strategy::Group, 128),
                    fp8(Strategy::Token, 0, DynamicMode::Dynamic));
    };
    t["FP8"] = [] {
      QuantArgs in = fp8(Strategy::Tensor);
      in.observer = "static_minmax";
      return scheme(fp8(Strategy::Tensor), in);
    };
    t["FP8_DYNAMIC"] = [] {
      return scheme(fp8(Strategy::Channel), fp8(Strategy::Token, 0, DynamicMode::Dynamic));
    };
    t["FP8_BLOCK"] = [] {
      QuantArgs w = fp8(Strategy::Block);
      w.block_rows = w.block_cols = 128;
      return scheme(w, fp8(Strategy::Group, 128, DynamicMode::Dynamic));
    };
    t["NVFP4A16"] = [] { return scheme(nvfp4(DynamicMode::Static)); };
    t["NVFP4"] = [] { return scheme(nvfp4(DynamicMode::Static), nvfp4(DynamicMode::Local)); };
    t["MXFP4A16"] = [] { return scheme(mx(4, DynamicMode::Static)); };
    t["MXFP4"] = [] { return scheme(mx(4, DynamicMode::Static), mx(4, DynamicMode::Dynamic)); };
    t["MXFP8A16"] = [] { return scheme(mx(8, DynamicMode::Static)); };
    t["MXFP8"] = [] { return scheme(mx(8, DynamicMode::Static), mx(8, DynamicMode::Dynamic)); };
    for (int w = 2; w <= 8; ++w)
      for (int act : {4, 8, 16})
        if (w <= act && !(w == 8 && act == 8))  // W8A8 is channel-wise, above
          t["W" + std::to_string(w) + "A" + std::to_string(act)] = [w, act] {
            return int_wnam(w, act);
          };
    // lowbit's own: int4 per-channel weights, int8 dynamic per-token inputs (not in CT).
    t["W4A8_CHANNEL"] = [] {
      return scheme(make(4, QuantType::Int, Strategy::Channel), int_token(8));
    };
    return m;
  }();
  return *table;
}

}  // namespace

QuantScheme preset_scheme(const std::string& name, std::vector<std::string> targets) {
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const auto& table = presets();
  auto it = table.find(upper);
  if (it == table.end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw InvalidArgument("unknown quantization preset '" + name + "'; known presets: " + known);
  }
  QuantScheme s = it->second();
  s.targets = std::move(targets);
  return s;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : presets()) names.push_back(name);
  return names;
}

}  // namespace lowbit::quant
