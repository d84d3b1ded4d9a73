// quant_method "awq" (aliases auto_awq, awq_marlin): AutoAWQ GEMM checkpoints.
// Per Linear [out N, in K], 4 bits, G = K / group_size groups:
//   qweight I32 [K, N/8]  codes packed along the output dimension, eight per word in the
//                         interleaved order of AutoAWQ's GEMM kernel: the i-th nibble (from the low
//                         bits) holds column 8*w + {0,2,4,6,1,3,5,7}[i]
//   qzeros  I32 [G, N/8]  zero points, same packing (stored as is; no GPTQ-style -1)
//   scales  F16 [G, N]
//   w[n][k] = (q[k][n] - zero[k/group][n]) * scales[k/group][n]
// AWQ's smoothing scales are already folded into the preceding norms / projections.
#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/methods/packed_int.h"
#include "quant/methods/skip_list.h"

namespace lowbit::quant {
namespace {

const std::vector<int> kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};

struct AwqSettings {
  int bits = 4;
  int64_t group_size = 128;
  bool zero_point = true;
  std::vector<std::string> skip;
};

class AwqLinear : public KernelLinear {
 public:
  explicit AwqLinear(const AwqSettings& s) : s_(s) {}

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    if (info.out_features % 8 != 0 || info.in_features % s_.group_size != 0) {
      throw Unsupported(info.prefix + ": awq needs out features divisible by 8 and in features by "
                        "the group size " + std::to_string(s_.group_size));
    }
    const int64_t g = info.in_features / s_.group_size;
    layer.declare(ParamSpec{"qweight", {DType::I32}, {info.in_features, info.out_features / 8}});
    layer.declare(ParamSpec{"qzeros", {DType::I32}, {g, info.out_features / 8}, s_.zero_point});
    layer.declare(ParamSpec{"scales", {DType::F16, DType::BF16, DType::F32}, {g, info.out_features}});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    const int64_t n = info.out_features, k = info.in_features, g = k / s_.group_size;
    const std::vector<uint8_t> q =
        unpack_along_cols(layer.get("qweight").data_as<const int32_t>(), k, n, 4, kAwqOrder);
    const Tensor scales = layer.get("scales").to_f32();
    kernels::IntWeights w;
    w.bits = 4;
    w.rows = n;
    w.cols = k;
    w.group_size = s_.group_size;
    w.codes = transposed(q.data(), k, n);
    w.scales = transposed(scales.data_as<const float>(), g, n);
    if (layer.has("qzeros")) {
      const std::vector<uint8_t> z =
          unpack_along_cols(layer.get("qzeros").data_as<const int32_t>(), g, n, 4, kAwqOrder);
      w.zeros = transposed(z.data(), g, n);
    }
    finish_int(layer, std::move(w), std::nullopt);
  }

 private:
  AwqSettings s_;
};

class AwqConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<AwqConfig>();
    AwqSettings& s = c->s_;
    const int64_t bits = int_field(j, {"bits", "w_bit"}, where);
    if (bits != 4) {
      throw Unsupported(where + ".bits: awq checkpoints are 4-bit (got " + std::to_string(bits) + ")");
    }
    s.group_size = int_field(j, {"group_size", "q_group_size"}, where);
    if (s.group_size <= 0) throw InvalidArgument(where + ".group_size must be a positive integer");
    s.zero_point = bool_field(j, {"zero_point"}, true, where);
    const std::string version = string_field(j, {"version"}, "gemm", where);
    std::string lower = version;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower != "gemm") {
      throw Unsupported(where + ".version '" + version + "': only AutoAWQ's GEMM layout is supported "
                        "(GEMV / Marlin / exllama layouts pack differently)");
    }
    s.skip = string_list_field(j, {"modules_to_not_convert"}, where);
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "awq";
    d.summary = "AutoAWQ GEMM checkpoints: 4-bit, groups, zero points";
    d.min_capability = 75;
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear};
    d.config_filenames = {"quant_config.json", "quantize_config.json"};
    d.kernels = int_weight_kernels();
    d.kernels.erase(d.kernels.begin() + 1);  // no w8a8: activations stay in float
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind != LayerKind::Linear && layer.kind != LayerKind::Experts) return nullptr;
    if (is_skipped_module(layer.prefix, s_.skip)) return nullptr;
    return std::make_unique<AwqLinear>(s_);
  }

 private:
  AwqSettings s_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(AwqConfig, "awq");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(AwqConfig, "auto_awq");
LOWBIT_REGISTER_QUANTIZATION_CONFIG(AwqConfig, "awq_marlin");

}  // namespace lowbit::quant
