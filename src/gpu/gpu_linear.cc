#include "gpu/gpu_linear.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "core/float_convert.h"
#include "gpu/gpu_kernels.h"
#include "lowbit/error.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"

namespace lowbit::gpu {

namespace kc = kernels::cuda;

namespace {

std::vector<uint16_t> bias_bits(const std::vector<float>& bias, int64_t n) {
  std::vector<uint16_t> out(static_cast<size_t>(n), 0);
  for (size_t i = 0; i < bias.size(); ++i) out[i] = f32_to_bf16(bias[i]);
  return out;
}

// (code - zero) · scale in fp32, rounded to bf16 once: what the CPU's dequant kernel computes
// before rounding to the model dtype.
std::vector<uint16_t> dequantize_bits(const kernels::IntWeights& w) {
  std::vector<uint16_t> out(static_cast<size_t>(w.rows * w.cols));
  const int64_t groups = w.groups();
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const int64_t g = w.group_of(c);
      const size_t i = static_cast<size_t>(r * w.cols + c);
      out[i] = f32_to_bf16((static_cast<float>(w.codes[i]) - w.zero(r, g)) *
                           w.scales[static_cast<size_t>(r * groups + g)]);
    }
  }
  return out;
}

std::vector<uint16_t> dequantize_bits(const kernels::Fp8Weights& w) {
  std::vector<uint16_t> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const size_t i = static_cast<size_t>(r * w.cols + c);
      out[i] = f32_to_bf16(fp8_e4m3_to_f32(w.codes[i]) * w.scale(r, c));
    }
  }
  return out;
}

// The CPU's fp8 input quantization schemes that act_quant.h implements.
bool fp8_activations(const quant::InputQuant& in, int64_t cols, kc::Fp8Activations& act) {
  const quant::QuantArgs& a = in.args;
  if (a.type != quant::QuantType::Float || a.num_bits != 8 || !a.symmetric) return false;
  if (!a.is_dynamic()) {
    if (a.strategy != quant::Strategy::Tensor) return false;
    act.scheme = kc::Fp8ActScheme::PER_TENSOR_STATIC;
    act.static_scale = in.static_scale;
    return true;
  }
  switch (a.strategy) {
    case quant::Strategy::Token: act.scheme = kc::Fp8ActScheme::PER_TOKEN; return true;
    case quant::Strategy::Tensor: act.scheme = kc::Fp8ActScheme::PER_TENSOR_DYNAMIC; return true;
    case quant::Strategy::Group:
      if (a.group_size <= 0 || cols % a.group_size != 0) return false;
      act.scheme = kc::Fp8ActScheme::PER_GROUP;
      act.group_size = a.group_size;
      return true;
    default: return false;
  }
}

// As the CPU's w8a8 family reads the scheme (kernel_linear.cc).
bool int8_activations(const quant::InputQuant& in, kernels::Int8Activations& act) {
  const quant::QuantArgs& a = in.args;
  if (a.type != quant::QuantType::Int || a.num_bits != 8) return false;
  if (a.is_dynamic()) {
    if (a.strategy != quant::Strategy::Token || !a.symmetric) return false;
    act.dynamic = true;
    return true;
  }
  if (a.strategy != quant::Strategy::Tensor) return false;
  act.dynamic = false;
  act.static_scale = in.static_scale;
  act.static_zero = static_cast<int32_t>(in.static_zero);
  return true;
}

[[noreturn]] void unsupported(const std::string& name, const std::string& method,
                              const std::string& kernel, const std::string& why) {
  throw Unsupported("--device cuda: " + name + " (" + method + ", CPU kernel " + kernel +
                    "): " + why);
}

// The bias of row-wise concatenated parts, each cut to its (row) split, in bf16; an empty buffer
// when no part has one (a part without one adds zeros).
kc::DeviceBuffer<uint16_t> fused_bias(const std::vector<const models::Linear*>& parts,
                                      const std::vector<Split>& splits, int rank) {
  std::vector<uint16_t> bias;
  bool any = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const models::Linear& p = *parts[i];
    const int64_t rows = splits[i].is_whole() ? p.out_features() : splits[i].end - splits[i].begin;
    const std::vector<float> b = slice_bias(p.bias, splits[i], rank);
    any = any || !b.empty();
    const std::vector<uint16_t> bits = bias_bits(b, rows);
    bias.insert(bias.end(), bits.begin(), bits.end());
  }
  if (!any) return {};
  return kc::DeviceBuffer<uint16_t>(std::span<const uint16_t>(bias));
}

// The part's method when the dispatch table (quant/methods/gpu_linear_kernels.h, as
// GpuLinear::from reads it) runs it on `kernel`; null otherwise.
const quant::KernelLinear* method_on(const models::Linear& part, int64_t cols,
                                     quant::GpuLinearKernel kernel) {
  const auto* method = dynamic_cast<const quant::KernelLinear*>(part.method.get());
  if (method == nullptr) return nullptr;
  return quant::choose_gpu_linear(quant::gpu_linear_case(*method, cols)).kernel == kernel ? method
                                                                                          : nullptr;
}

}  // namespace

bool gemv_kernels_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("LOWBIT_GPU_GEMV");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

std::vector<uint16_t> to_bf16_bits(const Tensor& weight) {
  std::vector<uint16_t> out(static_cast<size_t>(weight.numel()));
  if (weight.dtype() == DType::BF16) {
    std::memcpy(out.data(), weight.data(), out.size() * sizeof(uint16_t));
    return out;
  }
  const Tensor f = weight.to_f32();
  const float* v = f.data_as<const float>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

GpuLinear GpuLinear::fused_dense(const std::vector<const models::Linear*>& parts,
                                 const std::vector<Split>& splits, const std::string& name) {
  LOWBIT_CHECK_AS(Internal, parts.size() == splits.size(), "fused_dense: one split per part");
  GpuLinear g;
  g.k_ = parts.front()->in_features();
  for (size_t i = 0; i < parts.size(); ++i) {
    const models::Linear* p = parts[i];
    LOWBIT_CHECK_AS(Internal, !p->method && !p->input_quant && p->in_features() == g.k_ &&
                                  splits[i].dim != Split::Dim::COLS,
                    "fused_dense: " + name + " has a part that is not dense or is column-split");
    g.n_ += splits[i].is_whole() ? p->out_features() : splits[i].end - splits[i].begin;
  }
  std::vector<uint16_t> weight;
  weight.reserve(static_cast<size_t>(g.n_ * g.k_));
  for (size_t i = 0; i < parts.size(); ++i) {
    const models::Linear* p = parts[i];
    const std::vector<uint16_t> w =
        slice_matrix(to_bf16_bits(p->weight), p->out_features(), g.k_, splits[i]);
    weight.insert(weight.end(), w.begin(), w.end());
  }
  g.weight_ = kc::DeviceBuffer<uint16_t>(std::span<const uint16_t>(weight));
  g.weight_ptr_ = g.weight_.data();
  g.bias_ = fused_bias(parts, splits, 0);
  return g;
}

std::optional<GpuLinear> GpuLinear::fused_fp8(const std::vector<const models::Linear*>& parts,
                                              const std::vector<Split>& splits, int rank,
                                              const std::string& name) {
  LOWBIT_CHECK_AS(Internal, parts.size() == splits.size(), "fused_fp8: one split per part");
  const int64_t k = parts.front()->in_features();
  std::optional<kc::Fp8Activations> act;
  kernels::Fp8Weights fused;
  fused.cols = k;
  fused.block_rows = 1;
  fused.block_cols = k;
  for (size_t i = 0; i < parts.size(); ++i) {
    const models::Linear& p = *parts[i];
    const quant::KernelLinear* method = method_on(p, k, quant::GpuLinearKernel::W8a8Fp8);
    if (method == nullptr || p.in_features() != k || splits[i].dim == Split::Dim::COLS) {
      return std::nullopt;
    }
    kc::Fp8Activations a;
    if (!fp8_activations(*method->input_quant(), k, a) || a.scheme == kc::Fp8ActScheme::PER_GROUP) {
      return std::nullopt;
    }
    const bool same = !act || (act->scheme == a.scheme &&
                               (a.scheme != kc::Fp8ActScheme::PER_TENSOR_STATIC ||
                                act->static_scale == a.static_scale));
    if (!same) return std::nullopt;
    act = a;
    const kernels::Fp8Weights& whole = *method->fp8_weights();
    if (whole.block_cols < whole.cols) return std::nullopt;  // scales vary along k
    const kernels::Fp8Weights part = slice_fp8_weights(whole, splits[i], name);
    fused.codes.insert(fused.codes.end(), part.codes.begin(), part.codes.end());
    for (int64_t r = 0; r < part.rows; ++r) fused.scales.push_back(part.scale(r, 0));
    fused.rows += part.rows;
  }
  GpuLinear g;
  g.kind_ = Kind::W8A8_FP8;
  g.n_ = fused.rows;
  g.k_ = k;
  g.fp8_act_ = *act;
  g.w8a8_ = std::make_unique<kc::W8a8GpuWeights>(kc::pack_fp8_for_gpu(fused));
  g.bias_ = fused_bias(parts, splits, rank);
  return g;
}

std::optional<GpuLinear> GpuLinear::fused_wna16(const std::vector<const models::Linear*>& parts,
                                                const std::vector<Split>& splits, int rank,
                                                const std::string& name) {
  LOWBIT_CHECK_AS(Internal, parts.size() == splits.size(), "fused_wna16: one split per part");
  kernels::IntWeights fused;
  std::vector<kernels::IntWeights> cut(parts.size());
  const kernels::IntWeights* first = nullptr;
  for (size_t i = 0; i < parts.size(); ++i) {
    const quant::KernelLinear* method =
        method_on(*parts[i], parts[i]->in_features(), quant::GpuLinearKernel::Wna16);
    if (method == nullptr || splits[i].dim == Split::Dim::COLS) return std::nullopt;
    const kernels::IntWeights& whole = *method->int_weights();
    if (first == nullptr) first = &whole;
    // One packed layout for all parts: the same width, columns, groups and column order.
    if (whole.bits != first->bits || whole.cols != first->cols ||
        whole.group_size != first->group_size || whole.g_idx != first->g_idx) {
      return std::nullopt;
    }
    cut[i] = slice_int_weights(whole, splits[i], name);
  }
  const bool any_zeros = std::any_of(cut.begin(), cut.end(), [](const kernels::IntWeights& w) {
    return !w.zeros.empty();
  });
  fused.bits = cut[0].bits;
  fused.cols = cut[0].cols;
  fused.group_size = cut[0].group_size;
  fused.g_idx = cut[0].g_idx;
  for (size_t i = 0; i < parts.size(); ++i) {
    kernels::IntWeights& part = cut[i];
    fused.codes.insert(fused.codes.end(), part.codes.begin(), part.codes.end());
    fused.scales.insert(fused.scales.end(), part.scales.begin(), part.scales.end());
    if (any_zeros) {  // a symmetric part's implicit zero point 2^(bits-1), written out
      if (part.zeros.empty()) {
        fused.zeros.insert(fused.zeros.end(), static_cast<size_t>(part.rows * part.groups()),
                           static_cast<uint8_t>(1 << (part.bits - 1)));
      } else {
        fused.zeros.insert(fused.zeros.end(), part.zeros.begin(), part.zeros.end());
      }
    }
    fused.rows += part.rows;
  }
  GpuLinear g;
  g.kind_ = Kind::WNA16;
  g.n_ = fused.rows;
  g.k_ = fused.cols;
  g.wna16_ = std::make_unique<kc::Wna16GpuWeights>(kc::pack_wna16_for_gpu(fused));
  g.bias_ = fused_bias(parts, splits, rank);
  return g;
}

GpuLinear GpuLinear::random_dense(int64_t n, int64_t k, uint64_t seed) {
  GpuLinear g;
  g.n_ = n;
  g.k_ = k;
  g.weight_ = kc::DeviceBuffer<uint16_t>(static_cast<size_t>(n * k));
  fill_random_bf16(g.weight_.data(), n * k, seed);
  g.weight_ptr_ = g.weight_.data();
  return g;
}

GpuLinear GpuLinear::dense_view(const uint16_t* weight, int64_t n, int64_t k) {
  GpuLinear g;
  g.n_ = n;
  g.k_ = k;
  g.weight_ptr_ = weight;
  return g;
}

GpuLinear GpuLinear::from(const models::Linear& linear, const Split& split, int rank,
                          const std::string& name, const std::string& method_name) {
  if (!linear.method) {
    if (linear.input_quant) {
      throw Unsupported("--device cuda: " + name + " has emulated input quantization (" +
                        quant::to_string(linear.input_quant->args.strategy) +
                        "), which the GPU backend does not run");
    }
    if (split.dim != Split::Dim::COLS) return fused_dense({&linear}, {split}, name);
    GpuLinear g;  // a dense row-parallel part
    g.n_ = linear.out_features();
    g.k_ = split.end - split.begin;
    g.weight_ = kc::DeviceBuffer<uint16_t>(std::span<const uint16_t>(
        slice_matrix(to_bf16_bits(linear.weight), g.n_, linear.in_features(), split)));
    g.weight_ptr_ = g.weight_.data();
    const std::vector<float> bias = slice_bias(linear.bias, split, rank);
    if (!bias.empty()) {
      g.bias_ = kc::DeviceBuffer<uint16_t>(std::span<const uint16_t>(bias_bits(bias, g.n_)));
    }
    return g;
  }
  const std::string kernel = linear.method->kernel_name();
  const auto* method = dynamic_cast<const quant::KernelLinear*>(linear.method.get());
  if (method == nullptr) {
    unsupported(name, method_name, kernel, "this quantization method has no GPU kernel");
  }
  GpuLinear g;
  const int64_t full_n = linear.out_features(), full_k = linear.in_features();
  g.n_ = split.dim == Split::Dim::ROWS ? split.end - split.begin : full_n;
  g.k_ = split.dim == Split::Dim::COLS ? split.end - split.begin : full_k;
  const std::vector<float> bias = slice_bias(linear.bias, split, rank);
  if (!bias.empty()) {
    g.bias_ = kc::DeviceBuffer<uint16_t>(std::span<const uint16_t>(bias_bits(bias, g.n_)));
  }
  const std::optional<quant::InputQuant>& input = method->input_quant();
  auto dense_from = [&](std::vector<uint16_t> bits) {  // whole-layer bits, cut here
    g.kind_ = Kind::DENSE;
    g.weight_ = kc::DeviceBuffer<uint16_t>(
        std::span<const uint16_t>(slice_matrix(bits, full_n, full_k, split)));
    g.weight_ptr_ = g.weight_.data();
    };
  // Quantized kernels pack this GPU's part of the weights (with its own scales).
  std::optional<kernels::IntWeights> int_part;
  std::optional<kernels::Fp8Weights> fp8_part;
  auto part_of = [&](const auto* whole, auto& part, auto slice) {
    if (split.is_whole()) return whole;
    part = slice(*whole, split, name);
    return static_cast<decltype(whole)>(&*part);
  };
  const kernels::IntWeights* int_whole = method->int_weights();
  const kernels::Fp8Weights* fp8_whole = method->fp8_weights();
  if (int_whole == nullptr && fp8_whole == nullptr && kernel.rfind("dequant", 0) != 0) {
    throw InvalidArgument("--device cuda: " + name + " (" + kernel +
                          ") kept no canonical weights: load the CPU model with "
                          "gpu::load_model_for_gpu (or KernelLinear::set_keep_canonical_weights)");
  }
  // The kernel comes from the table `lowbit methods` declares (quant/methods/gpu_linear_kernels.h).
  const quant::GpuLinearChoice choice =
      quant::choose_gpu_linear(quant::gpu_linear_case(*method, g.k_));
  switch (choice.kernel) {
    case quant::GpuLinearKernel::None: unsupported(name, method_name, kernel, choice.why_not);
    case quant::GpuLinearKernel::Bf16:  // exact weights in bf16
      dense_from(int_whole   ? dequantize_bits(*int_whole)
                 : fp8_whole ? dequantize_bits(*fp8_whole)
                             : to_bf16_bits(linear.method->dequantized_weight()));
      return g;
    case quant::GpuLinearKernel::Wna16:
      g.kind_ = Kind::WNA16;
      g.wna16_ = std::make_unique<kc::Wna16GpuWeights>(
          kc::pack_wna16_for_gpu(*part_of(int_whole, int_part, slice_int_weights)));
      return g;
    case quant::GpuLinearKernel::W8a8Int8:
      LOWBIT_CHECK_AS(Internal, int8_activations(*input, g.int8_act_),
                      name + ": int8 inputs the GPU table accepts but int8_activations does not");
      g.kind_ = Kind::W8A8_INT;
      g.w8a8_ = std::make_unique<kc::W8a8GpuWeights>(
          kc::pack_int8_for_gpu(*part_of(int_whole, int_part, slice_int_weights)));
      return g;
    case quant::GpuLinearKernel::W8a8Fp8:
      LOWBIT_CHECK_AS(Internal, fp8_activations(*input, g.k_, g.fp8_act_),
                      name + ": fp8 inputs the GPU table accepts but fp8_activations does not");
      g.kind_ = Kind::W8A8_FP8;
      g.w8a8_ = std::make_unique<kc::W8a8GpuWeights>(
          kc::pack_fp8_for_gpu(*part_of(fp8_whole, fp8_part, slice_fp8_weights)));
      return g;
  }
  return g;
}

GpuLinear GpuLinear::lm_head(const models::Linear& linear, const Split& split,
                             const std::string& method_name, const uint16_t* shared) {
  GpuLinear g;
  g.n_ = split.is_whole() ? linear.out_features() : split.end - split.begin;
  g.k_ = linear.in_features();
  if (!linear.bias.empty()) {
    g.bias_f32_ = kc::DeviceBuffer<float>(std::span<const float>(slice_bias(linear.bias, split, 0)));
  }
  if (shared != nullptr) {
    g.weight_ptr_ = shared;
    return g;
  }
  std::vector<uint16_t> bits;
  if (!linear.method) {
    if (linear.input_quant) {
      throw Unsupported("--device cuda: lm_head has emulated input quantization, which the GPU "
                        "backend does not run");
    }
    bits = to_bf16_bits(linear.weight);
  } else {
    const auto* method = dynamic_cast<const quant::KernelLinear*>(linear.method.get());
    const std::string kernel = linear.method->kernel_name();
    if (method == nullptr) unsupported("lm_head", method_name, kernel, "no GPU kernel");
    if (method->input_quant()) {
      unsupported("lm_head", method_name, kernel,
                  "a quantized LM head input has no GPU kernel (fp32 logits)");
    }
    if (const kernels::IntWeights* iw = method->int_weights()) {
      if (iw->bits == 4 || iw->bits == 8) {  // the wna16 kernel's widths: keep it packed
        g.kind_ = Kind::WNA16;
        g.wna16_ = std::make_unique<kc::Wna16GpuWeights>(kc::pack_wna16_for_gpu(
            split.is_whole() ? *iw : slice_int_weights(*iw, split, "lm_head")));
        return g;
      }
      bits = dequantize_bits(*iw);
    } else if (const kernels::Fp8Weights* fw = method->fp8_weights()) {
      bits = dequantize_bits(*fw);
    } else if (kernel.rfind("dequant", 0) == 0) {
      bits = to_bf16_bits(linear.method->dequantized_weight());
    } else {
      throw InvalidArgument("--device cuda: lm_head (" + kernel +
                            ") kept no canonical weights: load the CPU model with "
                            "gpu::load_model_for_gpu");
    }
  }
  g.weight_ = kc::DeviceBuffer<uint16_t>(
      std::span<const uint16_t>(slice_matrix(bits, linear.out_features(), g.k_, split)));
  g.weight_ptr_ = g.weight_.data();
  return g;
}

const char* GpuLinear::kernel_name() const {
  switch (kind_) {
    case Kind::DENSE: return "bf16";
    case Kind::WNA16: return wna16_->layout.bits == 4 ? "wna16 (w4a16)" : "wna16 (w8a16)";
    case Kind::W8A8_FP8: return "w8a8 fp8";
    case Kind::W8A8_INT: return "w8a8 int8";
  }
  return "?";
}

size_t GpuLinear::device_bytes() const {
  size_t bytes = bias_.bytes() + bias_f32_.bytes();
  switch (kind_) {
    case Kind::DENSE: return bytes + static_cast<size_t>(n_ * k_) * sizeof(uint16_t);
    case Kind::WNA16: return bytes + wna16_->device_bytes();
    case Kind::W8A8_FP8:
    case Kind::W8A8_INT: return bytes + w8a8_->bytes();
  }
  return bytes;
}

size_t GpuLinear::workspace_bytes(int64_t m) const {
  switch (kind_) {
    case Kind::DENSE: return 0;
    case Kind::WNA16: {
      // The path (and its scratch) changes with m: the largest of the sizes a call may need.
      size_t bytes = 0;
      for (int64_t rows : {int64_t{1}, std::min<int64_t>(m, 64), m}) {
        bytes = std::max(bytes, kc::wna16_workspace_bytes(rows, *wna16_));
      }
      return bytes;
    }
    case Kind::W8A8_FP8: return kc::w8a8_workspace_bytes(*w8a8_, m, fp8_act_);
    case Kind::W8A8_INT: return kc::w8a8_workspace_bytes(*w8a8_, m, int8_act_);
  }
  return 0;
}

void GpuLinear::run(kc::BlasLt& blas, const uint16_t* x, int64_t m, uint16_t* y, void* workspace,
                    size_t workspace_bytes, cudaStream_t stream) const {
  const uint16_t* bias = bias_.size() > 0 ? bias_.data() : nullptr;
  switch (kind_) {
    case Kind::DENSE:
      if (uses_gemv(x, m, k_)) {
        kc::gemv_bf16(x, m, k_, weight_ptr_, n_, y, stream, bias);
      } else {
        kc::gemm_bf16(blas, x, m, k_, weight_ptr_, n_, y, stream, bias);
      }
      return;
    case Kind::WNA16:
      kc::wna16_gemm(x, m, *wna16_, y, workspace, workspace_bytes, stream, bias);
      return;
    case Kind::W8A8_FP8: {
      // Decode steps on the streaming FP8 GEMV (not with LOWBIT_GPU_GEMV=0), else cuBLASLt.
      const bool gemv = m <= kGemvMaxRows && gemv_kernels_enabled() &&
                        kc::w8a8_gemv_applies(*w8a8_, m, fp8_act_);
      kc::w8a8_gemm(*w8a8_, x, m, fp8_act_, bias, y, workspace, workspace_bytes, stream,
                    gemv ? kc::W8a8Path::GEMV : kc::W8a8Path::AUTO);
      return;
    }
    case Kind::W8A8_INT:
      kc::w8a8_gemm(*w8a8_, x, m, int8_act_, bias, y, workspace, workspace_bytes, stream);
      return;
  }
}

bool GpuLinear::uses_gemv(const uint16_t* x, int64_t m, int64_t x_stride) const {
  return kind_ == Kind::DENSE && m >= 1 && m <= kGemvMaxRows && gemv_kernels_enabled() &&
         kc::gemv_bf16_vectorized(x, x_stride, k_, weight_ptr_);
}

size_t GpuLinear::workspace_bytes_f32(int64_t m) const {
  return kind_ == Kind::WNA16 ? kc::wna16_workspace_bytes(m, *wna16_, kc::Wna16GpuPath::STREAM) : 0;
}

void GpuLinear::run_f32(kc::BlasLt& blas, const uint16_t* x, int64_t m, float* y,
                        cudaStream_t stream, void* workspace, size_t workspace_bytes) const {
  const float* bias = bias_f32_.size() > 0 ? bias_f32_.data() : nullptr;
  if (kind_ == Kind::WNA16) {
    kc::wna16_gemm_f32out(x, m, *wna16_, y, workspace, workspace_bytes, stream, bias);
    return;
  }
  LOWBIT_CHECK_AS(Internal, kind_ == Kind::DENSE, "GpuLinear::run_f32: not a dense or wna16 layer");
  kc::gemm_bf16_f32out(blas, x, m, k_, weight_ptr_, n_, y, stream, bias);
}

}  // namespace lowbit::gpu
