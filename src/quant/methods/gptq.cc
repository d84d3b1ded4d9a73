// quant_method "gptq" (aliases auto_gptq, gptq_marlin): AutoGPTQ / GPTQModel checkpoints.
// Per Linear [out N, in K], with b bits and G groups:
//   qweight I32 [K*b/32, N]  codes packed along the input dimension, first code in the low bits
//   qzeros  I32 [G, N*b/32]  zero points packed along the output dimension
//   scales  F16/BF16 [G, N]
//   g_idx   I32 [K]          group of each input row (desc_act reorders it), optional
//   w[n][k] = scales[g][n] * (q[k][n] - zero[g][n]),  g = g_idx[k]
// Format v1 ("gptq", the default of both writers) stores zero - 1 (AutoGPTQ's historical
// off-by-one); v2 ("gptq_v2", checkpoint_format / format) stores the zero itself.
#include <algorithm>

#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/methods/packed_int.h"
#include "quant/methods/skip_list.h"

namespace lowbit::quant {
namespace {

struct GptqSettings {
  int bits = 4;
  int64_t group_size = 128;  // -1: one group (per channel)
  bool desc_act = false;
  bool sym = true;
  bool v2 = false;
  bool lm_head = false;
  std::vector<std::string> skip;  // modules_to_not_convert
};

class GptqLinear : public KernelLinear {
 public:
  explicit GptqLinear(const GptqSettings& s) : s_(s) {}

  int64_t groups(const LayerInfo& info) const {
    return s_.group_size > 0 ? (info.in_features + s_.group_size - 1) / s_.group_size : 1;
  }

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    const int per_word = 32 / s_.bits;
    if (info.in_features % per_word != 0 || info.out_features % per_word != 0) {
      throw Unsupported(info.prefix + ": gptq with " + std::to_string(s_.bits) +
                        " bits needs in and out features divisible by " + std::to_string(per_word));
    }
    const int64_t g = groups(info);
    layer.declare(ParamSpec{"qweight", {DType::I32}, {info.in_features / per_word, info.out_features}});
    layer.declare(ParamSpec{"qzeros", {DType::I32}, {g, info.out_features / per_word}});
    layer.declare(ParamSpec{"scales", {DType::F16, DType::BF16, DType::F32}, {g, info.out_features}});
    layer.declare(ParamSpec{"g_idx", {DType::I32, DType::I64}, {info.in_features}, false});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    const int64_t n = info.out_features, k = info.in_features, g = groups(info);
    const std::vector<uint8_t> q =
        unpack_along_rows(layer.get("qweight").data_as<const int32_t>(), k, n, s_.bits);
    const std::vector<uint8_t> z =
        unpack_along_cols(layer.get("qzeros").data_as<const int32_t>(), g, n, s_.bits);
    const Tensor scales = layer.get("scales").to_f32();
    kernels::IntWeights w;
    w.bits = s_.bits;
    w.rows = n;
    w.cols = k;
    w.group_size = s_.group_size > 0 ? s_.group_size : k;
    w.codes = transposed(q.data(), k, n);
    w.scales = transposed(scales.data_as<const float>(), g, n);
    w.zeros.resize(static_cast<size_t>(n * g));
    const int max_code = (1 << s_.bits) - 1;
    bool all_symmetric = true;
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t c = 0; c < n; ++c) {
        const size_t dst = static_cast<size_t>(c * g + gi);
        const int zero = z[static_cast<size_t>(gi * n + c)] + (s_.v2 ? 0 : 1);
        if (zero > max_code) {
          throw InvalidArgument(layer.describe("qzeros") + " holds a zero point of " +
                                std::to_string(zero) + " after the v1 +1 correction (> " +
                                std::to_string(max_code) + "); is checkpoint_format gptq_v2?");
        }
        w.zeros[dst] = static_cast<uint8_t>(zero);
        all_symmetric = all_symmetric && zero == (1 << (s_.bits - 1));
      }
    }
    if (all_symmetric) w.zeros.clear();  // the kernels' implicit symmetric zero
    if (layer.has("g_idx")) {
      const Tensor gi = layer.get("g_idx").to_f32();  // small integers: exact
      bool trivial = true;
      w.g_idx.resize(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) {
        const float v = gi.data_as<const float>()[i];
        if (v < 0 || v >= static_cast<float>(g)) {
          throw InvalidArgument(layer.describe("g_idx") + " holds group " + std::to_string(v) +
                                " outside [0, " + std::to_string(g) + ")");
        }
        w.g_idx[static_cast<size_t>(i)] = static_cast<int32_t>(v);
        trivial = trivial && w.g_idx[static_cast<size_t>(i)] == i / w.group_size;
      }
      if (trivial) w.g_idx.clear();
    }
    finish_int(layer, std::move(w), std::nullopt);
  }

 private:
  GptqSettings s_;
};

class GptqConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<GptqConfig>();
    GptqSettings& s = c->s_;
    s.bits = static_cast<int>(int_field(j, {"bits", "w_bit"}, where));
    if (s.bits != 2 && s.bits != 4 && s.bits != 8) {
      throw Unsupported(where + ".bits must be 2, 4 or 8 (got " + std::to_string(s.bits) + ")");
    }
    s.group_size = int_field(j, {"group_size", "q_group_size"}, where);
    if (s.group_size <= 0 && s.group_size != -1) {
      throw InvalidArgument(where + ".group_size must be a positive integer or -1");
    }
    s.desc_act = bool_field(j, {"desc_act"}, false, where);
    s.sym = bool_field(j, {"sym"}, true, where);
    s.lm_head = bool_field(j, {"lm_head"}, false, where);
    const std::string format = string_field(j, {"checkpoint_format", "format"}, "gptq", where);
    if (format != "gptq" && format != "gptq_v2") {
      throw Unsupported(where + ".checkpoint_format '" + format +
                        "' is not gptq or gptq_v2 (marlin / bitblas repacked checkpoints are not "
                        "supported)");
    }
    s.v2 = format == "gptq_v2";
    const nlohmann::json dynamic = get_from_keys_or(j, {"dynamic"}, nullptr);
    if (!dynamic.is_null() && !(dynamic.is_object() && dynamic.empty())) {
      throw Unsupported(where + ".dynamic: per-module GPTQ overrides are not supported yet");
    }
    s.skip = string_list_field(j, {"modules_to_not_convert"}, where);
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "gptq";
    d.summary = "AutoGPTQ / GPTQModel checkpoints: 2/4/8-bit, groups, desc_act (g_idx), v1 and v2";
    d.min_capability = 60;
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear, LayerKind::LmHead};
    d.config_filenames = {"quantize_config.json"};
    d.kernels = int_weight_kernels();
    d.kernels.erase(d.kernels.begin() + 1);  // no w8a8: activations stay in float
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind == LayerKind::Embedding || layer.kind == LayerKind::Attention) return nullptr;
    if (layer.kind == LayerKind::LmHead && !s_.lm_head) return nullptr;
    if (is_skipped_module(layer.prefix, s_.skip)) return nullptr;
    return std::make_unique<GptqLinear>(s_);
  }

 private:
  GptqSettings s_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(GptqConfig, "gptq");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(GptqConfig, "auto_gptq");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(GptqConfig, "gptq_marlin");

}  // namespace lowbit::quant
