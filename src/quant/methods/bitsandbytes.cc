// quant_method "bitsandbytes": checkpoints transformers saves from a model it loaded with
// BitsAndBytesConfig (bitsandbytes 0.50, transformers 5.17). config.json's quantization_config
// holds load_in_4bit / load_in_8bit, bnb_4bit_quant_type ("nf4" | "fp4"),
// bnb_4bit_use_double_quant, bnb_4bit_quant_storage, bnb_4bit_compute_dtype, llm_int8_threshold,
// llm_int8_skip_modules, llm_int8_has_fp16_weight. Per quantized Linear [out N, in K]:
//   4-bit: weight U8 [ceil(N·K/2), 1]: the row-major [N, K] codes two per byte, element 2j in the
//     HIGH nibble of byte j; weight.absmax F32 [ceil(N·K / blocksize)] (one per block of the
//     flattened weight, blocks may straddle rows); weight.quant_map F32 [16] (the codebook);
//     weight.quant_state.bitsandbytes__<nf4|fp4> U8: JSON {quant_type, blocksize, dtype, shape}.
//     w = codebook[code] · absmax[i / blocksize] in fp32. Double quantization
//     (bnb_4bit_use_double_quant): absmax is U8 codes too, with weight.nested_absmax F32
//     [ceil(blocks / nested_blocksize)], weight.nested_quant_map F32 [256] and the JSON's
//     nested_blocksize / nested_offset: absmax[b] = nested_quant_map[code] ·
//     nested_absmax[b / nested_blocksize] + nested_offset (fp32, in that order, as bitsandbytes'
//     dequantize_blockwise then `+= offset`). NF4 and FP4 codebooks are not integer grids, so the
//     weight is dequantized at load (the dequant kernel, as bitsandbytes' own CPU path does).
//   8-bit (LLM.int8()): weight I8 [N, K], SCB F32 [N] (row absmax), weight_format U8 [] (0 = row
//     major, the only layout bitsandbytes still loads): w = q · SCB / 127 → int8 per-channel
//     weights on the wna16 kernels. Inputs are quantized as LLM.int8() does (what vLLM runs, its
//     bnb.matmul with the config's threshold): cast to fp16, columns holding any |x| >= threshold
//     stay in floating point, every other value becomes round(x16 · 127 / row_absmax) with the row
//     absmax taken over the non-outlier values; the int8 product then equals the product of the
//     fake-quantized input with w (fp32 summation order aside), scaled by 1/127² as bitsandbytes'
//     CUDA kernels do (its CPU fallback's constant is 1.8e-5 off). The outlier columns are found
//     over all rows of a call, as in bitsandbytes: a batch's rows influence each other.
// --device cuda (src/gpu) takes the canonical weights and no input quantization: LLM.int8() layers
// run there weight-only (W8A16), 4-bit layers as dense bf16.
// The quant_state JSON of each tensor is authoritative (bitsandbytes reads it, not the config);
// its quant type must agree with bnb_4bit_quant_type. lm_head and embeddings are never quantized
// (transformers leaves the output embedding in float). Routed experts are not supported.
#include <algorithm>
#include <cmath>

#include "core/float_convert.h"
#include "lowbit/error.h"
#include "quant/methods/config_fields.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"

namespace lowbit::quant {
namespace {

enum class Code4 { Nf4, Fp4 };

const char* code_name(Code4 c) { return c == Code4::Nf4 ? "nf4" : "fp4"; }

// bitsandbytes' codebooks (functional.get_4bit_type, already divided by their absmax), indexed
// by the 4-bit code. FP4 is sign + 2-bit exponent + 1-bit mantissa with bias 2, in bit order.
constexpr float kNf4[16] = {-1.0f,
                            -0.6961928009986877f,
                            -0.5250730514526367f,
                            -0.39491748809814453f,
                            -0.28444138169288635f,
                            -0.18477343022823334f,
                            -0.09105003625154495f,
                            0.0f,
                            0.07958029955625534f,
                            0.16093020141124725f,
                            0.24611230194568634f,
                            0.33791524171829224f,
                            0.44070982933044434f,
                            0.5626170039176941f,
                            0.7229568362236023f,
                            1.0f};
constexpr float kFp4[16] = {
    0.0f,  0.0625f / 12,  8.0f / 12,  1.0f,  4.0f / 12,  6.0f / 12,  2.0f / 12,  3.0f / 12,
    -0.0f, -0.0625f / 12, -8.0f / 12, -1.0f, -4.0f / 12, -6.0f / 12, -2.0f / 12, -3.0f / 12};

const float* codebook(Code4 c) { return c == Code4::Nf4 ? kNf4 : kFp4; }

std::string state_name(Code4 c) {
  return std::string("weight.quant_state.bitsandbytes__") + code_name(c);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::vector<float> f32_values(const LayerParams& layer, const std::string& name) {
  const Tensor t = layer.get(name).to_f32();
  std::vector<float> v(t.data_as<const float>(), t.data_as<const float>() + t.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw InvalidArgument(layer.describe(name) + " holds a non-finite value at [" +
                            std::to_string(i) + "]");
    }
  }
  return v;
}

// The quant_state tensor's JSON and the fields the decoder needs.
struct QuantState4 {
  Code4 code = Code4::Nf4;
  int64_t blocksize = 64;
  bool nested = false;
  int64_t nested_blocksize = 256;
  float nested_offset = 0.0f;
};

// A string field of the quant_state JSON, "" when absent or not a string (the callers say what
// they expected).
std::string text(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  if (!j.contains(key)) return fallback;
  return j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}

int64_t positive_int(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number_integer() || j.at(key).get<int64_t>() <= 0) {
    throw InvalidArgument(where + ": '" + key + "' is missing or not a positive integer");
  }
  return j.at(key).get<int64_t>();
}

QuantState4 parse_state(const LayerParams& layer, Code4 expected) {
  // Which of the two names the checkpoint used says the quant type too.
  const bool has_nf4 = layer.has(state_name(Code4::Nf4)),
             has_fp4 = layer.has(state_name(Code4::Fp4));
  if (has_nf4 == has_fp4) {
    throw InvalidArgument(layer.describe(state_name(expected)) +
                          (has_nf4
                               ? " and its fp4 twin are both present"
                               : " is missing (a bitsandbytes 4-bit layer needs its quant_state)"));
  }
  QuantState4 s;
  s.code = has_nf4 ? Code4::Nf4 : Code4::Fp4;
  const std::string name = state_name(s.code), where = layer.describe(name);
  if (s.code != expected) {
    throw InvalidArgument(where + ": the layer is " + code_name(s.code) +
                          " but quantization_config.bnb_4bit_quant_type is " + code_name(expected));
  }
  const Tensor& t = layer.get(name);
  const auto* bytes = t.data_as<const char>();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string(bytes, bytes + t.numel()));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(where + " is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw InvalidArgument(where + " must hold a JSON object");
  const std::string type = text(j, "quant_type");
  if (type != code_name(s.code)) {
    throw Unsupported(where + ": quant_type '" + type + "' is not " + code_name(s.code) +
                      " (bitsandbytes 4-bit types: nf4, fp4)");
  }
  s.blocksize = positive_int(j, "blocksize", where);
  const std::string dtype = text(j, "dtype");
  if (dtype != "bfloat16" && dtype != "float16" && dtype != "float32") {
    throw Unsupported(where + ": dtype '" + dtype + "' (expected bfloat16, float16 or float32)");
  }
  const LayerInfo& info = layer.info();
  const nlohmann::json expected_shape = {info.out_features, info.in_features};
  if (!j.contains("shape") || j.at("shape") != expected_shape) {
    throw InvalidArgument(where + ": shape " +
                          (j.contains("shape") ? j.at("shape").dump() : "missing") +
                          ", the layer is " + expected_shape.dump());
  }
  s.nested = j.contains("nested_offset") || j.contains("nested_blocksize");
  if (s.nested) {
    s.nested_blocksize = positive_int(j, "nested_blocksize", where);
    if (!j.contains("nested_offset") || !j.at("nested_offset").is_number()) {
      throw InvalidArgument(where + ": 'nested_offset' is missing or not a number");
    }
    // A Python float of an fp32 value: the cast is exact.
    s.nested_offset = static_cast<float>(j.at("nested_offset").get<double>());
    if (text(j, "nested_dtype", "float32") != "float32") {
      throw Unsupported(where + ": nested_dtype " + j.at("nested_dtype").dump() +
                        " (float32 only)");
    }
  }
  return s;
}

// absmax per block, fp32, double quantization undone.
std::vector<float> block_absmax(const LayerParams& layer, const QuantState4& s, int64_t blocks) {
  const Tensor& absmax = layer.get("weight.absmax");
  if (absmax.numel() != blocks) {
    throw InvalidArgument(layer.describe("weight.absmax") + " has " +
                          std::to_string(absmax.numel()) + " values, expected " +
                          std::to_string(blocks) + " (one per block of " +
                          std::to_string(s.blocksize) + ")");
  }
  if (!s.nested) {
    for (const char* extra : {"weight.nested_absmax", "weight.nested_quant_map"}) {
      if (layer.has(extra)) {
        throw InvalidArgument(layer.describe(extra) +
                              " is present but the quant_state has no nested_* fields");
      }
    }
    if (absmax.dtype() != DType::F32) {
      throw InvalidArgument(layer.describe("weight.absmax") +
                            " must be F32 without double quantization");
    }
    return f32_values(layer, "weight.absmax");
  }
  if (absmax.dtype() != DType::U8) {
    throw InvalidArgument(layer.describe("weight.absmax") +
                          " must be U8 codes with double quantization");
  }
  const std::vector<float> map = f32_values(layer, "weight.nested_quant_map");
  const std::vector<float> scales = f32_values(layer, "weight.nested_absmax");
  if (static_cast<int64_t>(scales.size()) != ceil_div(blocks, s.nested_blocksize)) {
    throw InvalidArgument(layer.describe("weight.nested_absmax") + " has " +
                          std::to_string(scales.size()) + " values, expected " +
                          std::to_string(ceil_div(blocks, s.nested_blocksize)));
  }
  const uint8_t* codes = absmax.data_as<const uint8_t>();
  std::vector<float> out(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const float product = map[codes[b]] * scales[static_cast<size_t>(b / s.nested_blocksize)];
    out[static_cast<size_t>(b)] = product + s.nested_offset;
  }
  return out;
}

class Bnb4bitLinear : public KernelLinear {
 public:
  explicit Bnb4bitLinear(Code4 code) : code_(code) {}

  void create_weights(LayerParams& layer) override {
    // Shapes are checked in process_weights_after_loading, where the messages can say why.
    layer.declare(ParamSpec{"weight", {DType::U8}, {}});
    layer.declare(ParamSpec{"weight.absmax", {DType::F32, DType::U8}, {-1}});
    layer.declare(ParamSpec{"weight.quant_map", {DType::F32}, {16}});
    layer.declare(ParamSpec{"weight.nested_absmax", {DType::F32}, {-1}, false});
    layer.declare(ParamSpec{"weight.nested_quant_map", {DType::F32}, {256}, false});
    layer.declare(ParamSpec{state_name(Code4::Nf4), {DType::U8}, {-1}, false});
    layer.declare(ParamSpec{state_name(Code4::Fp4), {DType::U8}, {-1}, false});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const QuantState4 s = parse_state(layer, code_);
    const int64_t n = layer.info().out_features * layer.info().in_features;
    const Tensor& packed = layer.get("weight");
    if (packed.numel() != ceil_div(n, 2)) {
      throw InvalidArgument(
          layer.describe("weight") + " has shape " + packed.shape_string() + ", " +
          std::to_string(packed.numel()) + " bytes; two codes per byte of [" +
          std::to_string(layer.info().out_features) + ", " +
          std::to_string(layer.info().in_features) + "] need " + std::to_string(ceil_div(n, 2)));
    }
    check_codebook(layer, s.code);
    const std::vector<float> absmax = block_absmax(layer, s, ceil_div(n, s.blocksize));
    const float* book = codebook(s.code);
    const uint8_t* bytes = packed.data_as<const uint8_t>();
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t byte = bytes[i / 2];
      const int code = (i % 2 == 0) ? byte >> 4 : byte & 0xF;
      values[static_cast<size_t>(i)] = book[code] * absmax[static_cast<size_t>(i / s.blocksize)];
    }
    finish_dequant(layer, values, std::nullopt);
  }

 private:
  // bitsandbytes' kernels decode with their built-in table, not with the stored quant_map: a
  // quant_map that differs would be silently ignored there, so it is refused here.
  static void check_codebook(const LayerParams& layer, Code4 code) {
    const std::vector<float> stored = f32_values(layer, "weight.quant_map");
    for (int i = 0; i < 16; ++i) {
      if (std::fabs(stored[static_cast<size_t>(i)] - codebook(code)[i]) > 1e-6f) {
        throw InvalidArgument(layer.describe("weight.quant_map") + " is not bitsandbytes' " +
                              code_name(code) + " codebook (entry " + std::to_string(i) + " is " +
                              std::to_string(stored[static_cast<size_t>(i)]) + ")");
      }
    }
  }

  Code4 code_;
};

// LLM.int8()'s input decomposition, fake-quantized in fp32 (see the file comment).
void llm_int8_inputs(const float* x, int64_t rows, int64_t cols, float threshold, float* out) {
  std::vector<float> x16(static_cast<size_t>(rows * cols));
  std::vector<char> outlier_col(static_cast<size_t>(cols), 0);
  for (int64_t i = 0; i < rows * cols; ++i) {
    x16[static_cast<size_t>(i)] = f16_to_f32(f32_to_f16(x[i]));
    if (threshold > 0.0f && std::fabs(x16[static_cast<size_t>(i)]) >= threshold) {
      outlier_col[static_cast<size_t>(i % cols)] = 1;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x16.data() + r * cols;
    // bitsandbytes zeroes the outlier values (not whole columns) before taking the row absmax.
    float absmax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      if (threshold > 0.0f && std::fabs(row[c]) >= threshold) continue;
      absmax = std::max(absmax, std::fabs(row[c]));
    }
    // bitsandbytes computes x · (127.0 / row_stats) in torch, whose scalar / tensor is a
    // reciprocal times the scalar: two roundings, which decide codes that land near k + 0.5.
    const float inv = (1.0f / absmax) * 127.0f;
    const float step = absmax / 127.0f;
    for (int64_t c = 0; c < cols; ++c) {
      float v = 0.0f;
      if (outlier_col[static_cast<size_t>(c)]) {
        v = x[r * cols + c];  // the outlier columns' product runs in floating point
      } else if (absmax > 0.0f) {
        v = std::nearbyint(row[c] * inv) * step;
      }
      out[r * cols + c] = v;
    }
  }
}

class BnbInt8Linear : public KernelLinear {
 public:
  explicit BnbInt8Linear(float threshold) : threshold_(threshold) {}

  void create_weights(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    layer.declare(ParamSpec{"weight", {DType::I8}, {info.out_features, info.in_features}});
    layer.declare(ParamSpec{"SCB", {DType::F32, DType::F16, DType::BF16}, {info.out_features}});
    layer.declare(
        ParamSpec{"weight_format", {DType::U8, DType::I8, DType::I32, DType::I64}, {}, false});
  }

  void process_weights_after_loading(LayerParams& layer) override {
    const LayerInfo& info = layer.info();
    cols_ = info.in_features;
    if (layer.has("weight_format")) check_row_major(layer);
    const std::vector<float> scb = f32_values(layer, "SCB");
    if (static_cast<int64_t>(scb.size()) != info.out_features) {
      throw InvalidArgument(layer.describe("SCB") + " has " + std::to_string(scb.size()) +
                            " values, expected one per output row (" +
                            std::to_string(info.out_features) + ")");
    }
    kernels::IntWeights w;
    w.bits = 8;
    w.rows = info.out_features;
    w.cols = info.in_features;
    w.group_size = info.in_features;
    w.scales.resize(scb.size());
    for (size_t r = 0; r < scb.size(); ++r) {
      if (scb[r] < 0) {
        throw InvalidArgument(layer.describe("SCB") + " holds a negative row absmax at [" +
                              std::to_string(r) + "]");
      }
      w.scales[r] = scb[r] / 127.0f;
    }
    const int8_t* q = layer.get("weight").data_as<const int8_t>();
    w.codes.resize(static_cast<size_t>(w.rows * w.cols));
    for (size_t i = 0; i < w.codes.size(); ++i) {
      if (q[i] == -128) {
        throw InvalidArgument(layer.describe("weight") + " holds -128 at [" + std::to_string(i) +
                              "]; LLM.int8() codes are in [-127, 127]");
      }
      w.codes[i] = static_cast<uint8_t>(q[i] + 128);  // symmetric: implicit zero 128
    }
    finish_int(layer, std::move(w), std::nullopt, /*fake_quantized_inputs=*/true);
  }

  void apply(const float* x, int64_t rows, const float* bias, float* y) const override {
    thread_local std::vector<float> quantized;
    quantized.resize(static_cast<size_t>(rows * cols_));
    llm_int8_inputs(x, rows, cols_, threshold_, quantized.data());
    KernelLinear::apply(quantized.data(), rows, bias, y);
  }

 private:
  static void check_row_major(const LayerParams& layer) {
    const Tensor t = layer.get("weight_format");
    if (t.numel() != 1) {
      throw InvalidArgument(layer.describe("weight_format") + " must hold one value, it has " +
                            t.shape_string());
    }
    const float v = t.to_f32().data_as<const float>()[0];
    if (v != 0.0f) {
      throw Unsupported(
          layer.describe("weight_format") + " is " + std::to_string(static_cast<int>(v)) +
          " (col32 / col_turing / col_ampere); only 0 (row major) is supported, as in "
          "bitsandbytes >= 0.45");
    }
  }

  float threshold_;
  int64_t cols_ = 0;
};

// llm_int8_skip_modules entries: a module name component ("lm_head", "mlp") or a dotted prefix
// (vLLM's is_layer_skipped_bnb), or a suffix of the name (transformers' should_convert_module).
bool is_skipped(const std::string& prefix, const std::vector<std::string>& entries) {
  for (const std::string& e : entries) {
    if (e.empty()) continue;
    if (prefix == e || prefix.rfind(e + ".", 0) == 0) return true;
    if (prefix.size() > e.size() && prefix.compare(prefix.size() - e.size(), e.size(), e) == 0) {
      return true;
    }
    size_t start = 0;
    while (start <= prefix.size()) {
      const size_t dot = prefix.find('.', start);
      const size_t end = dot == std::string::npos ? prefix.size() : dot;
      if (prefix.compare(start, end - start, e) == 0) return true;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }
  return false;
}

class BitsAndBytesConfig : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json& j,
                                                         const std::string& where) {
    if (!j.is_object()) throw InvalidArgument(where + " must be a JSON object");
    auto c = std::make_unique<BitsAndBytesConfig>();
    // transformers writes both spellings (load_in_4bit and its private _load_in_4bit).
    c->int8_ = bool_field(j, {"load_in_8bit", "_load_in_8bit"}, false, where);
    const bool four = bool_field(j, {"load_in_4bit", "_load_in_4bit"}, !c->int8_, where);
    if (c->int8_ == four) {
      throw InvalidArgument(where + ": exactly one of load_in_4bit and load_in_8bit must be true");
    }
    const std::string type = string_field(j, {"bnb_4bit_quant_type"}, "fp4", where);
    if (type != "nf4" && type != "fp4") {
      throw Unsupported(where + ".bnb_4bit_quant_type '" + type + "' is not supported (nf4, fp4)");
    }
    c->code_ = type == "nf4" ? Code4::Nf4 : Code4::Fp4;
    const nlohmann::json storage = get_from_keys_or(j, {"bnb_4bit_quant_storage"}, "uint8");
    if (!c->int8_ && !storage.is_null() && storage != "uint8") {
      throw Unsupported(where + ".bnb_4bit_quant_storage " + storage.dump() + ": only uint8");
    }
    if (bool_field(j, {"llm_int8_has_fp16_weight"}, false, where) && c->int8_) {
      throw Unsupported(where +
                        ".llm_int8_has_fp16_weight: checkpoints holding fp16 weights "
                        "beside int8 ones are not supported");
    }
    const nlohmann::json threshold = get_from_keys_or(j, {"llm_int8_threshold"}, 6.0);
    if (!threshold.is_null()) {
      if (!threshold.is_number() || threshold.get<double>() < 0) {
        throw InvalidArgument(where + ".llm_int8_threshold must be a number >= 0, not " +
                              threshold.dump());
      }
      c->threshold_ = threshold.get<float>();
    }
    c->skip_ = string_list_field(j, {"llm_int8_skip_modules"}, where);
    return c;
  }

  static MethodDescription description() {
    MethodDescription d;
    d.name = "bitsandbytes";
    d.summary =
        "bitsandbytes via transformers: NF4 / FP4 4-bit (double quant too; dequantized at "
        "load), LLM.int8() (int8 weights, int8 inputs with fp outlier columns emulated)";
    d.min_capability = 70;  // vLLM's BitsAndBytesConfig
    d.act_dtypes = {DType::F32, DType::F16, DType::BF16};
    d.layers = {LayerKind::Linear};
    d.kernels = int_weight_kernels();
    d.kernels.erase(d.kernels.begin() + 1);  // wna16 (LLM.int8()), dequant (4-bit); no w8a8
    // On the GPU LLM.int8() runs weight-only (wna16_cuda, W8A16: its input decomposition is
    // CPU-only), the 4-bit codes dequantized in bf16.
    add_gpu_kernels(d);
    return d;
  }
  MethodDescription describe() const override { return description(); }

  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo& layer) const override {
    if (layer.kind != LayerKind::Linear || is_skipped(layer.prefix, skip_)) return nullptr;
    if (int8_) return std::make_unique<BnbInt8Linear>(threshold_);
    return std::make_unique<Bnb4bitLinear>(code_);
  }

 private:
  bool int8_ = false;
  Code4 code_ = Code4::Fp4;
  float threshold_ = 6.0f;
  std::vector<std::string> skip_;
};

}  // namespace

LOWBIT_REGISTER_QUANTIZATION_CONFIG(BitsAndBytesConfig, "bitsandbytes");

}  // namespace lowbit::quant
