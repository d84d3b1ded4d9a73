// An out-of-tree quantization method for lowbit, built as a shared library and loaded with
// `--plugin PATH` (or LOWBIT_PLUGINS). It uses only lowbit's public headers.
//
// "my_quant" is an online method: it quantizes every decoder Linear layer of an unquantized
// checkpoint to int8 with one scale per output channel (absmax / 127, round half to even) when the
// model loads, and runs it with a plain C++ loop. Set MY_QUANT_OVERRIDE=NAME to also register it
// under NAME, replacing a built-in method of that name (lowbit logs the override at debug level).
#include <cmath>
#include <cstdlib>
#include <lowbit/error.h>
#include <lowbit/quant_method.h>
#include <vector>

namespace my_quant {

using lowbit::DType;
using lowbit::Tensor;
namespace q = lowbit::quant;

class MyQuantLinear : public q::LinearMethod {
 public:
  void create_weights(q::LayerParams& layer) override {
    const q::LayerInfo& info = layer.info();
    layer.declare(q::ParamSpec{"weight", {DType::F32, DType::F16, DType::BF16},
                               {info.out_features, info.in_features}, true});
  }

  void process_weights_after_loading(q::LayerParams& layer) override {
    rows_ = layer.info().out_features;
    cols_ = layer.info().in_features;
    const Tensor w = layer.get("weight").to_f32();
    const float* v = w.data_as<const float>();
    codes_.resize(static_cast<size_t>(rows_ * cols_));
    scales_.resize(static_cast<size_t>(rows_));
    for (int64_t r = 0; r < rows_; ++r) {
      float absmax = 0.0f;
      for (int64_t c = 0; c < cols_; ++c) absmax = std::fmax(absmax, std::fabs(v[r * cols_ + c]));
      const float scale = absmax > 0.0f ? absmax / 127.0f : 1.0f;
      scales_[static_cast<size_t>(r)] = scale;
      for (int64_t c = 0; c < cols_; ++c) {
        const float code = std::nearbyint(v[r * cols_ + c] / scale);  // half to even
        codes_[static_cast<size_t>(r * cols_ + c)] =
            static_cast<int8_t>(std::fmax(-127.0f, std::fmin(127.0f, code)));
      }
    }
  }

  void apply(const float* x, int64_t rows, const float* bias, float* y) const override {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t r = 0; r < rows_; ++r) {
        const int8_t* w = codes_.data() + r * cols_;
        float sum = 0.0f;
        for (int64_t c = 0; c < cols_; ++c) sum += x[i * cols_ + c] * static_cast<float>(w[c]);
        y[i * rows_ + r] = sum * scales_[static_cast<size_t>(r)] + (bias ? bias[r] : 0.0f);
      }
    }
  }

  std::string kernel_name() const override { return "my_quant_naive"; }

  Tensor dequantized_weight() const override {
    std::vector<float> w(codes_.size());
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t c = 0; c < cols_; ++c) {
        const size_t i = static_cast<size_t>(r * cols_ + c);
        w[i] = static_cast<float>(codes_[i]) * scales_[static_cast<size_t>(r)];
      }
    }
    return Tensor::from_f32(w.data(), {rows_, cols_}, DType::F32);
  }

  size_t weight_bytes() const override { return codes_.size() + scales_.size() * sizeof(float); }
  bool uses_meta_device() const override { return true; }

 private:
  int64_t rows_ = 0, cols_ = 0;
  std::vector<int8_t> codes_;
  std::vector<float> scales_;
};

class MyQuantConfig : public q::QuantizationConfig {
 public:
  static std::unique_ptr<q::QuantizationConfig> from_config(const nlohmann::json& config,
                                                            const std::string& where) {
    if (!config.is_object()) throw lowbit::InvalidArgument(where + " must be a JSON object");
    return std::make_unique<MyQuantConfig>();
  }

  static q::MethodDescription description() {
    q::MethodDescription d;
    d.name = "my_quant";
    d.summary = "example plugin: online int8 per-channel weight-only, naive C++ loop";
    d.min_capability = -1;
    d.act_dtypes = {DType::F32, DType::BF16};
    d.layers = {q::LayerKind::Linear};
    q::KernelSpec kernel;
    kernel.name = "my_quant_naive";
    kernel.isa = q::KernelSpec::Isa::Portable;
    kernel.implements = "int8 per-channel weights, fp32 inputs";
    d.kernels = {kernel};
    d.online = true;
    return d;
  }

  q::MethodDescription describe() const override { return description(); }

  std::unique_ptr<q::LinearMethod> get_quant_method(const q::LayerInfo& layer) const override {
    if (layer.kind != q::LayerKind::Linear) return nullptr;  // embeddings, LM head stay as stored
    return std::make_unique<MyQuantLinear>();
  }
};

LOWBIT_REGISTER_QUANTIZATION_CONFIG(MyQuantConfig, "my_quant");

// Optional second registration under a built-in's name, to show how a plugin replaces one.
const bool override_registered = [] {
  if (const char* name = std::getenv("MY_QUANT_OVERRIDE")) {
    q::register_quantization_config(name, &MyQuantConfig::from_config, &MyQuantConfig::description);
  }
  return true;
}();

}  // namespace my_quant
