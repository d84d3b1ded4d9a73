// The quantization-method interface, as vLLM's seed documents define it, and its registry.
//
// A checkpoint's quantization method (config.json quantization_config.quant_method, or a method's
// own file such as quantize_config.json) names a registered QuantizationConfig; its
// get_quant_method(layer) gives each layer a LinearMethod, which declares the tensors the layer
// holds (create_weights), turns them into the kernel's layout once they are loaded
// (process_weights_after_loading) and runs the layer (apply). Built-in methods and plugins register
// the same way (LOWBIT_REGISTER_QUANTIZATION_CONFIG), before a model is built; registering a name
// that exists replaces it, with a debug log. Plugins are shared libraries that include only this
// header and the ones it includes (docs/plugins.md, plugins/example/).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lowbit/dtype.h"
#include "lowbit/tensor.h"

namespace lowbit::quant {

// ---- hardware ------------------------------------------------------------------------------------

// Where a kernel can run. CUDA compute capabilities are major*10+minor (70 Volta, 75 Turing,
// 80 Ampere, 89 Ada, 90 Hopper, 100 Blackwell).
struct Platform {
  bool x86 = false;  // an x86-64 CPU (the features below apply)
  bool arm = false;  // an Arm CPU
  bool avx2 = false;  // AVX2 + FMA + F16C
  bool avx512 = false;  // AVX-512 F/BW/VL/DQ
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  int cuda_capability = -1;  // -1: no CUDA GPU
  bool rocm = false;         // an AMD GPU
  // Platform::current() in a CUDA build: the compute capability of this binary's compiled GPU code
  // that the GPU runs (CMAKE_CUDA_ARCHITECTURES), -1 when the binary holds none for it. 0 (any
  // other platform, e.g. a GPU generation in `lowbit methods`): not considered, only what the
  // kernels' code needs is.
  int cuda_binary_capability = 0;

  // This machine, detected once (CPU features; the first CUDA device when the CUDA backend is
  // built, a GPU is present and the CLI asked for it: `lowbit methods`).
  static const Platform& current();
  std::string describe() const;  // "x86-64 CPU (avx2 avx512 vnni bf16), no CUDA GPU"
};

// What one kernel needs. A CPU kernel runs where its ISA is present; a portable C++ one runs on
// every CPU. A CUDA kernel runs on GPUs with capability in [min_capability, max_capability].
struct KernelSpec {
  enum class Isa { Portable, Avx2, Avx512, Avx512Vnni, Avx512Bf16, Cuda, Rocm };
  std::string name;  // e.g. "wna16_avx512"
  Isa isa = Isa::Portable;
  int min_capability = -1;     // Cuda: required compute capability
  int max_capability = 10000;  // Cuda: e.g. 90 for a Hopper-only kernel
  std::string implements;      // one line: "int4/int8 weights, group/channel, zero points, g_idx"
  // Runs only when asked for by name (--linear-backend NAME), never as the default; so it also
  // derives no GPU kernel (add_gpu_kernels follows the default arithmetic).
  bool opt_in = false;

  bool runs_on(const Platform& platform) const;
  // Why it cannot run on `platform` ("needs AVX-512 VNNI"), or empty when it can.
  std::string missing_on(const Platform& platform) const;
};

// ---- layers --------------------------------------------------------------------------------------

enum class LayerKind {
  Linear,     // a projection inside a decoder layer
  LmHead,     // the output projection
  Embedding,  // the input embedding lookup
  Experts,    // one routed expert's projection of a MoE layer
  Attention,  // the KV cache of an attention layer (k_scale / v_scale)
};
const char* layer_kind_name(LayerKind kind);

struct LayerInfo {
  LayerKind kind = LayerKind::Linear;
  std::string prefix;         // the module's full name: "model.layers.0.self_attn.q_proj"
  int64_t in_features = 0;    // Linear-like layers
  int64_t out_features = 0;
  DType params_dtype = DType::BF16;  // the model's float dtype
  // Kernel choice: empty = the method's first kernel that can run here; otherwise that kernel or an
  // error (never a silent fallback). From --linear-backend / --moe-backend.
  std::string backend;
  const Platform* platform = nullptr;  // where it will run (Platform::current() when null)
};

// A tensor a method expects in the checkpoint, relative to the layer's prefix ("weight_packed").
struct ParamSpec {
  std::string name;
  std::vector<DType> dtypes;   // accepted dtypes
  Shape shape;                 // exact shape; a -1 entry accepts any size in that dimension
  bool required = true;
};

// A layer's parameters: declared by create_weights, filled by the loader (checked against the
// declaration: present, dtype, shape; errors name the tensor), consumed by
// process_weights_after_loading.
class LayerParams {
 public:
  explicit LayerParams(LayerInfo info) : info_(std::move(info)) {}
  const LayerInfo& info() const { return info_; }

  void declare(ParamSpec spec) { declared_.push_back(std::move(spec)); }
  const std::vector<ParamSpec>& declared() const { return declared_; }

  void set(const std::string& name, Tensor tensor) { tensors_[name] = std::move(tensor); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws InvalidArgument naming prefix.name when absent.
  const Tensor& get(const std::string& name) const;
  // Where a tensor came from, for messages: "DIR/model.safetensors: tensor 'x.weight_scale'".
  std::string describe(const std::string& name) const;
  std::string source;  // checkpoint path, set by the loader

 private:
  LayerInfo info_;
  std::vector<ParamSpec> declared_;
  std::map<std::string, Tensor> tensors_;
};

// One Linear layer's method (vLLM's LinearMethodBase). One instance per layer: it keeps the
// layer's kernel-ready weights after process_weights_after_loading.
class LinearMethod {
 public:
  virtual ~LinearMethod() = default;

  // Declares the layer's checkpoint tensors (without the bias, which the model loads).
  virtual void create_weights(LayerParams& layer) = 0;
  // Repacks the loaded tensors for the chosen kernel (validating their values); afterwards the
  // tensors may be released. Throws InvalidArgument naming the tensor on bad content, Unsupported
  // when no kernel can run the layer here (naming the requirement).
  virtual void process_weights_after_loading(LayerParams& layer) = 0;
  // x: [rows, in_features] fp32 → y: [rows, out_features] fp32 (+ bias when not null).
  virtual void apply(const float* x, int64_t rows, const float* bias, float* y) const = 0;

  // The kernel process_weights_after_loading selected ("wna16_avx512"), for the log line.
  virtual std::string kernel_name() const = 0;
  // The dequantized weight [out, in] as fp32: the reference every kernel is checked against.
  virtual Tensor dequantized_weight() const = 0;
  // Bytes of weight data the kernel reads per forward (for bandwidth figures).
  virtual size_t weight_bytes() const = 0;

  // process_weights_after_loading may run on already-processed weights (a no-op then).
  virtual bool supports_pre_processed_weights() const { return false; }
  // The weights are created unquantized and quantized at load (online methods): the loader hands
  // the checkpoint's float "weight" to process_weights_after_loading.
  virtual bool uses_meta_device() const { return false; }
  // Embedding lookup through this method (only methods that quantize embeddings).
  virtual bool implements_embedding() const { return false; }
  virtual void embedding(const int32_t* ids, int64_t n, float* out) const;
  // A tied LM head shares the embedding's parameters; methods that repack must repack a copy.
  virtual void tie_weights(LayerParams& lm_head, const LayerParams& embed_tokens);
};

// A routed-experts layer's method (vLLM's FusedMoEMethodBase).
struct FusedMoeQuantConfig {
  std::string weight_format;       // "int4 group 128", "fp8 block", ...
  std::string activation_format;   // "fp32", "int8 per token", ...
};
class MoeMethod {
 public:
  virtual ~MoeMethod() = default;
  virtual void create_weights(LayerParams& layer, int64_t num_experts, int64_t hidden,
                              int64_t intermediate, DType params_dtype) = 0;
  virtual void process_weights_after_loading(LayerParams& layer) = 0;
  // x: [rows, hidden]; router_logits: [rows, num_experts] (the router already applied); top_k and
  // renormalization as the model configures; y: [rows, hidden].
  virtual void apply(const float* x, int64_t rows, const float* router_logits, int top_k,
                     bool normalize_topk, float* y) const = 0;
  virtual FusedMoeQuantConfig get_fused_moe_quant_config() const = 0;
  virtual std::string kernel_name() const = 0;
};

// KV-cache quantization scales an attention layer gets from the checkpoint.
struct KvCacheScales {
  std::vector<float> k_scale;  // one value (per tensor) or kv_heads values (per head)
  std::vector<float> v_scale;
};

// ---- configs -------------------------------------------------------------------------------------

// What a method declares about itself, for `lowbit methods` and for the hardware check. The support
// matrix is derived from `kernels` (not written by hand).
struct MethodDescription {
  std::string name;
  std::string summary;                        // one line
  int min_capability = -1;                    // vLLM's get_min_capability (-1: none)
  std::vector<DType> act_dtypes;              // get_supported_act_dtypes
  std::vector<LayerKind> layers;              // the layer kinds it can quantize
  std::vector<std::string> config_filenames;  // get_config_filenames
  std::vector<KernelSpec> kernels;            // everything it can select, in preference order
  bool online = false;                        // quantizes unquantized weights at load
  bool moe_only = false;                      // online methods that only take routed experts
  // Non-empty: a method listed (vLLM has it) that lowbit cannot run anywhere, and why; it has no
  // kernels and loading it fails with this reason.
  std::string unsupported;
};

class QuantizationConfig {
 public:
  virtual ~QuantizationConfig() = default;

  virtual MethodDescription describe() const = 0;
  std::string get_name() const { return describe().name; }
  std::vector<DType> get_supported_act_dtypes() const { return describe().act_dtypes; }
  int get_min_capability() const { return describe().min_capability; }
  std::vector<std::string> get_config_filenames() const { return describe().config_filenames; }

  // The method for a Linear-like layer (Linear, LmHead, Experts), or null to leave it unquantized.
  virtual std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const = 0;
  // The checkpoint's KV-cache scales for an attention layer (prefix "model.layers.3.self_attn"),
  // or nullopt when this method quantizes no KV cache.
  virtual std::optional<KvCacheScales> kv_cache_scales(const std::string& /*attention_prefix*/)
      const {
    return std::nullopt;
  }
};

// from_config: builds the config from the checkpoint's quantization_config JSON (or the contents
// of its config file; {} for an online method asked for by name). Throws InvalidArgument naming
// the field it cannot parse (`where` says which file: "DIR/config.json: quantization_config").
using ConfigFactory =
    std::function<std::unique_ptr<QuantizationConfig>(const nlohmann::json& config,
                                                      const std::string& where)>;
using DescriptionFactory = std::function<MethodDescription()>;

// Adds or replaces (debug log) a method. Aliases (vLLM's "auto_gptq", "gptq_marlin") are
// separate registrations of the same factory.
void register_quantization_config(const std::string& name, ConfigFactory factory,
                                  DescriptionFactory describe);
bool is_registered_quantization(const std::string& name);
std::vector<std::string> registered_quantizations();  // sorted
MethodDescription describe_quantization(const std::string& name);  // Unsupported when unknown
std::unique_ptr<QuantizationConfig> make_quantization_config(const std::string& name,
                                                             const nlohmann::json& config,
                                                             const std::string& where);

// Reads JSON helpers as vLLM's get_from_keys / get_from_keys_or: the first of `keys` present.
// get_from_keys throws InvalidArgument (naming `where` and the keys) when none is.
nlohmann::json get_from_keys(const nlohmann::json& config, const std::vector<std::string>& keys,
                             const std::string& where);
nlohmann::json get_from_keys_or(const nlohmann::json& config, const std::vector<std::string>& keys,
                                const nlohmann::json& fallback);

}  // namespace lowbit::quant

// Registers `Class` under `name` when the library or plugin holding this line is loaded. Class has
//   static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json&, const std::string&);
//   static MethodDescription description();
// and may be registered under several names (aliases).
#define LOWBIT_QUANT_CONCAT_INNER(a, b) a##b
#define LOWBIT_QUANT_CONCAT(a, b) LOWBIT_QUANT_CONCAT_INNER(a, b)
#define LOWBIT_REGISTER_QUANTIZATION_CONFIG(Class, name)                                   \
  static const bool LOWBIT_QUANT_CONCAT(lowbit_quantization_registered_, __COUNTER__) = [] { \
    ::lowbit::quant::register_quantization_config(name, &Class::from_config,               \
                                                  &Class::description);                    \
    return true;                                                                           \
  }()
