// The GPU backend's linear kernels as data (see gpu_linear_kernels.h).
#include "quant/methods/gpu_linear_kernels.h"

#include <algorithm>
#include <cctype>

#include "quant/methods/kernel_linear.h"

// Set for this file by src/CMakeLists.txt in a build with the CUDA backend.
#ifndef LOWBIT_CUDA_ARCHITECTURES
#define LOWBIT_CUDA_ARCHITECTURES ""
#endif

namespace lowbit::quant {

namespace {

std::string describe_input(const InputQuant& in) {
  const QuantArgs& a = in.args;
  return std::string(a.type == QuantType::Float ? "float" : "int") + std::to_string(a.num_bits) +
         " " + to_string(a.strategy) + (a.is_dynamic() ? " dynamic" : " static") +
         (a.symmetric ? "" : " asymmetric");
}

GpuLinearChoice none(std::string why) { return {GpuLinearKernel::None, std::move(why)}; }

}  // namespace

bool gpu_int8_inputs(const InputQuant& in) {
  const QuantArgs& a = in.args;
  if (a.type != QuantType::Int || a.num_bits != 8) return false;
  if (a.is_dynamic()) return a.strategy == Strategy::Token && a.symmetric;
  return a.strategy == Strategy::Tensor;
}

bool gpu_fp8_inputs(const InputQuant& in, int64_t cols) {
  const QuantArgs& a = in.args;
  if (a.type != QuantType::Float || a.num_bits != 8 || !a.symmetric) return false;
  if (!a.is_dynamic()) return a.strategy == Strategy::Tensor;
  switch (a.strategy) {
    case Strategy::Token:
    case Strategy::Tensor: return true;
    case Strategy::Group: return a.group_size > 0 && cols % a.group_size == 0;
    default: return false;
  }
}

GpuLinearChoice choose_gpu_linear(const GpuLinearCase& c) {
  using W = GpuLinearCase::Weights;
  if (c.weights == W::Other) return none("this quantization method has no GPU kernel");
  if (c.weights == W::Dense) {
    if (c.input) return none("its emulated input quantization has no GPU kernel");
    return {GpuLinearKernel::Bf16, ""};
  }
  if (!c.input) {
    if (c.weights == W::Int && (c.bits == 4 || c.bits == 8)) return {GpuLinearKernel::Wna16, ""};
    return {GpuLinearKernel::Bf16, ""};  // other widths, fp8, fp4 / mx: exact weights in bf16
  }
  switch (c.weights) {
    case W::Int:
      if (gpu_int8_inputs(*c.input)) return {GpuLinearKernel::W8a8Int8, ""};
      return none("int weights with " + describe_input(*c.input) + " inputs have no GPU kernel");
    case W::Fp8:
      if (gpu_fp8_inputs(*c.input, c.cols)) return {GpuLinearKernel::W8a8Fp8, ""};
      return none("fp8 weights with " + describe_input(*c.input) + " inputs have no GPU kernel");
    default:
      return none("its " + describe_input(*c.input) + " input quantization has no GPU kernel");
  }
}

GpuLinearCase gpu_linear_case(const KernelLinear& layer, int64_t cols) {
  GpuLinearCase c;
  if (const kernels::IntWeights* w = layer.int_weights()) {
    c.weights = GpuLinearCase::Weights::Int;
    c.bits = w->bits;
  } else if (layer.fp8_weights() != nullptr) {
    c.weights = GpuLinearCase::Weights::Fp8;
  } else {
    c.weights = GpuLinearCase::Weights::Dequantized;
  }
  if (layer.input_quant()) c.input = &*layer.input_quant();
  c.cols = cols;
  return c;
}

KernelSpec gpu_linear_kernel_spec(GpuLinearKernel kernel) {
  KernelSpec k;
  k.isa = KernelSpec::Isa::Cuda;
  // Every kernel runs inside the GPU backend, whose activations, attention and dense products are
  // bf16 (tensor-core bf16 mma, cuBLASLt bf16): sm_80 and later.
  k.min_capability = 80;
  switch (kernel) {
    case GpuLinearKernel::Bf16:
      k.name = "bf16_cuda";
      k.implements = "dense bf16 (cuBLASLt, bf16 GEMV for decode): unquantized layers, and weights "
                     "dequantized to bf16 at load (int of other widths, fp8 weight-only, fp4 / mx)";
      break;
    case GpuLinearKernel::Wna16:
      k.name = "wna16_cuda";
      k.implements = "int4 / int8 weights (group / channel, zero points, g_idx) x bf16 inputs: "
                     "W4A16, W8A16 (bf16 mma.sync)";
      break;
    case GpuLinearKernel::W8a8Int8:
      // cuBLASLt's IMMA would run on sm_75; the backend around it needs sm_80.
      k.name = "w8a8_int8_cuda";
      k.implements = "int weights (int8; int4 widened) x int8 inputs, dynamic per token or static "
                     "per tensor: W8A8, W4A8 (cuBLASLt IMMA, CUDA-core kernel for groups)";
      break;
    case GpuLinearKernel::W8a8Fp8:
      k.name = "w8a8_fp8_cuda";
      k.min_capability = 89;  // e4m3 tensor cores: cuBLASLt scaled FP8, the FP8 GEMV
      k.implements = "fp8 e4m3 weights x fp8 inputs (per token, per tensor, 1x128 groups): "
                     "cuBLASLt scaled FP8, FP8 GEMV for decode";
      break;
    case GpuLinearKernel::None: k.name = "none"; break;
  }
  return k;
}

std::vector<KernelSpec> gpu_linear_kernel_specs() {
  return {gpu_linear_kernel_spec(GpuLinearKernel::Wna16),
          gpu_linear_kernel_spec(GpuLinearKernel::W8a8Int8),
          gpu_linear_kernel_spec(GpuLinearKernel::W8a8Fp8),
          gpu_linear_kernel_spec(GpuLinearKernel::Bf16)};
}

const std::vector<CpuKernelCase>& cpu_kernel_cases() {
  static const std::vector<CpuKernelCase> cases = [] {
    auto input = [](QuantType type, Strategy strategy, bool dynamic, int64_t group = 0) {
      static std::vector<std::unique_ptr<InputQuant>> kept;  // the cases point at them
      auto in = std::make_unique<InputQuant>();
      in->args.type = type;
      in->args.num_bits = 8;
      in->args.strategy = strategy;
      in->args.group_size = group;
      in->args.dynamic = dynamic ? DynamicMode::Dynamic : DynamicMode::Static;
      in->args.symmetric = true;
      kept.push_back(std::move(in));
      return kept.back().get();
    };
    const InputQuant* int8_token = input(QuantType::Int, Strategy::Token, true);
    const InputQuant* int8_static = input(QuantType::Int, Strategy::Tensor, false);
    const InputQuant* fp8_token = input(QuantType::Float, Strategy::Token, true);
    const InputQuant* fp8_static = input(QuantType::Float, Strategy::Tensor, false);
    const InputQuant* fp8_group = input(QuantType::Float, Strategy::Group, true, 128);
    using W = GpuLinearCase::Weights;
    auto layer = [](W w, int bits, const InputQuant* in) {
      GpuLinearCase c;
      c.weights = w;
      c.bits = bits;
      c.input = in;
      c.cols = 4096;
      return c;
    };
    return std::vector<CpuKernelCase>{
        {"wna16", "int4 weights (W4A16)", layer(W::Int, 4, nullptr)},
        {"wna16", "int8 weights (W8A16)", layer(W::Int, 8, nullptr)},
        {"wna16", "int2 / int3 weights", layer(W::Int, 3, nullptr)},
        {"wna16", "int4 weights x fp8 inputs (W4AFP8)", layer(W::Int, 4, fp8_token)},
        {"w8a8", "int8 weights x dynamic int8 inputs (W8A8)", layer(W::Int, 8, int8_token)},
        {"w8a8", "int8 weights x static int8 inputs", layer(W::Int, 8, int8_static)},
        {"w8a8", "int4 weights x int8 inputs (W4A8)", layer(W::Int, 4, int8_token)},
        {"fp8", "fp8 weights (weight-only)", layer(W::Fp8, 8, nullptr)},
        {"fp8", "fp8 weights x dynamic fp8 inputs (FP8_DYNAMIC)", layer(W::Fp8, 8, fp8_token)},
        {"fp8", "fp8 weights x static fp8 inputs (FP8)", layer(W::Fp8, 8, fp8_static)},
        {"fp8", "fp8 block weights x 1x128 fp8 inputs (FP8_BLOCK)", layer(W::Fp8, 8, fp8_group)},
        {"dequant", "weights dequantized at load (fp4, mx, ...)", layer(W::Dequantized, 4, nullptr)},
        {"dequant", "dequantized weights x fp8 inputs", layer(W::Dequantized, 4, fp8_token)},
        {"gguf_decode", "GGUF tensors decoded to float at load", layer(W::Dense, 16, nullptr)},
    };
  }();
  return cases;
}

void add_gpu_kernels(MethodDescription& d) {
  if (!cuda_backend_built() || !d.unsupported.empty()) return;
  const bool dense_layers = std::any_of(d.layers.begin(), d.layers.end(), [](LayerKind k) {
    return k == LayerKind::Linear || k == LayerKind::LmHead;
  });
  if (!dense_layers) return;  // MoE experts only: the GPU backend runs no MoE model
  std::vector<GpuLinearKernel> found;
  for (const KernelSpec& cpu : std::vector<KernelSpec>(d.kernels)) {
    if (cpu.isa == KernelSpec::Isa::Cuda || cpu.isa == KernelSpec::Isa::Rocm || cpu.opt_in) continue;
    for (const CpuKernelCase& c : cpu_kernel_cases()) {
      if (c.cpu_kernel != cpu.name) continue;
      const GpuLinearKernel k = choose_gpu_linear(c.layer).kernel;
      if (k != GpuLinearKernel::None && std::find(found.begin(), found.end(), k) == found.end()) {
        found.push_back(k);
      }
    }
  }
  // In the table's order (quantized kernels first, bf16 last), whatever the CPU kernels' order.
  for (const KernelSpec& spec : gpu_linear_kernel_specs()) {
    for (GpuLinearKernel k : found) {
      if (gpu_linear_kernel_spec(k).name == spec.name) d.kernels.push_back(spec);
    }
  }
}

// ---- the CUDA build ------------------------------------------------------------------------------

bool cuda_backend_built() {
#ifdef LOWBIT_CUDA_BACKEND
  return true;
#else
  return false;
#endif
}

const std::vector<std::string>& cuda_architectures() {
  static const std::vector<std::string> archs = [] {
    std::vector<std::string> out;
    const std::string all = LOWBIT_CUDA_ARCHITECTURES;
    size_t start = 0;
    while (start < all.size()) {
      size_t comma = all.find(',', start);
      if (comma == std::string::npos) comma = all.size();
      if (comma > start) out.push_back(all.substr(start, comma - start));
      start = comma + 1;
    }
    return out;
  }();
  return archs;
}

std::string cuda_architectures_text() {
  std::string s;
  for (const std::string& a : cuda_architectures()) {
    const bool numeric = !a.empty() && std::isdigit(static_cast<unsigned char>(a[0]));
    s += (s.empty() ? "" : ", ") + (numeric ? "sm_" + a : a);
  }
  return s.empty() ? "none" : s;
}

int cuda_code_capability(int capability, const std::vector<std::string>& archs) {
  if (capability < 0) return -1;
  int best_real = -1, best_ptx = -1;
  for (const std::string& entry : archs) {
    if (entry == "native" || entry.rfind("all", 0) == 0) return capability;
    size_t digits = 0;
    while (digits < entry.size() && std::isdigit(static_cast<unsigned char>(entry[digits]))) {
      ++digits;
    }
    if (digits == 0) continue;
    const int arch = std::stoi(entry.substr(0, digits));
    std::string rest = entry.substr(digits);
    char feature = 0;  // 'a': this exact GPU only; 'f': this family (same major, not older)
    if (!rest.empty() && (rest[0] == 'a' || rest[0] == 'f')) {
      feature = rest[0];
      rest = rest.substr(1);
    }
    const bool real = rest != "-virtual", ptx = rest != "-real";
    const bool same_major = capability / 10 == arch / 10 && capability >= arch;
    if (real && (feature == 'a' ? capability == arch : same_major)) {
      best_real = std::max(best_real, arch);
    }
    const bool jit = feature == 'a' ? capability == arch
                     : feature == 'f' ? same_major
                                      : capability >= arch;
    if (ptx && jit) best_ptx = std::max(best_ptx, arch);
  }
  return best_real >= 0 ? best_real : best_ptx;
}

}  // namespace lowbit::quant
