// Scheme facts from the preset table, hardware requirements, and the registry's kernels.
#include "eval/scheme_support.h"

#include <cctype>
#include <sstream>

#include "lowbit/error.h"
#include "quant/methods/gpu_linear_kernels.h"
#include "quant/methods/kernel_linear.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::eval {
namespace {

// The method lowbit quantize writes; everything lowbit can run of its output goes through it.
constexpr const char* kMethod = "compressed-tensors";

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.precision(digits);
  s << std::fixed << v;
  return s.str();
}

bool is_mx(const quant::QuantArgs& a) {
  return a.type == quant::QuantType::Float && a.strategy == quant::Strategy::Group &&
         a.scale_dtype && *a.scale_dtype == DType::U8;
}
bool is_nvfp4(const quant::QuantArgs& a) {
  return a.type == quant::QuantType::Float && a.num_bits == 4 &&
         a.strategy == quant::Strategy::TensorGroup;
}

std::string args_text(const quant::QuantArgs& a) {
  std::string s = is_nvfp4(a) ? "nvfp4" : is_mx(a) ? "mxfp" + std::to_string(a.num_bits)
                  : (a.type == quant::QuantType::Int ? "int" : "fp") + std::to_string(a.num_bits);
  switch (a.strategy) {
    case quant::Strategy::Group:
    case quant::Strategy::TensorGroup: s += ", group " + std::to_string(a.group_size); break;
    case quant::Strategy::Block:
      s += ", " + std::to_string(a.block_rows) + "x" + std::to_string(a.block_cols) + " blocks";
      break;
    default: s += ", per " + quant::to_string(a.strategy); break;
  }
  if (a.is_dynamic()) s += ", dynamic";
  if (a.type == quant::QuantType::Int) s += a.symmetric ? ", symmetric" : ", zero points";
  return s;
}

// Bits stored per weight: the codes plus each group's scale (16-bit unless the preset says fp8
// or E8M0) and packed zero point. Per-channel and per-tensor scales add under 0.01 bit.
double bits_per_weight(const quant::QuantArgs& a) {
  double bits = a.num_bits;
  if (a.strategy == quant::Strategy::Group || a.strategy == quant::Strategy::TensorGroup) {
    const double scale_bits = a.scale_dtype ? 8.0 * dtype_size(*a.scale_dtype) : 16.0;
    bits += scale_bits / static_cast<double>(a.group_size);
    if (!a.symmetric) bits += static_cast<double>(a.num_bits) / static_cast<double>(a.group_size);
  }
  return bits;
}

ActFormat act_format(const quant::QuantArgs& a) {
  if (is_nvfp4(a)) return ActFormat::Nvfp4;
  if (is_mx(a)) return a.num_bits == 4 ? ActFormat::Mxfp4 : ActFormat::Mxfp8;
  if (a.type == quant::QuantType::Float) return ActFormat::Fp8;
  return a.num_bits <= 4 ? ActFormat::Int4 : ActFormat::Int8;
}

std::string gpu_is(const GpuSpec& gpu) {
  return gpu.name + " is " + gpu.architecture +
         (gpu.vendor == GpuVendor::Nvidia ? " sm_" + std::to_string(gpu.capability) : "");
}

Support nvidia_support(const SchemeFacts& s, const GpuSpec& gpu) {
  const int cc = gpu.capability;
  const int registry_min = registry_min_capability();
  if (cc < registry_min) {
    return {false, "lowbit writes " + std::string(kMethod) + " checkpoints and the method " +
                       "registry declares compute capability >= " + std::to_string(registry_min) +
                       " for that method (vLLM's get_min_capability); " + gpu_is(gpu)};
  }
  const bool fp4 = s.weights == WeightFormat::Nvfp4 || s.weights == WeightFormat::Mxfp4 ||
                   s.weights == WeightFormat::Mxfp8;
  if (fp4 && cc < 100) {
    return {false, "needs the FP4/MX block-scaled tensor cores of Blackwell (sm_100 and later); " +
                       gpu_is(gpu) + ". vLLM could only emulate it here (Marlin dequantizes the "
                       "weights to 16 bits), losing the FP4 compute gain; seed 004 §3 marks "
                       "NVFP4/MXFP4 unsupported before Blackwell"};
  }
  if (s.weights == WeightFormat::Fp8 && s.activations == ActFormat::Fp8 && cc < 89) {
    return {false, "FP8 W8A8 needs FP8 tensor cores (Ada sm_89, Hopper sm_90 and later); " +
                       gpu_is(gpu) + ", so vLLM would load it as FP8 weight-only (W8A16 through "
                       "Marlin): the memory saving without the FP8 compute; seed 004 §3: "
                       "llm-compressor FP8 (W8A8) unsupported on Volta, Turing and Ampere"};
  }
  if (s.weights == WeightFormat::Int && s.activations == ActFormat::Fp8 && cc != 90) {
    return {false, "int4 weights with FP8 activations run on vLLM's W4A8-FP8 (CUTLASS) kernel, "
                   "which exists for Hopper sm_90 only; " + gpu_is(gpu)};
  }
  if (cc < 75) {
    return {false, s.quantizes_activations()
                       ? "INT8 activations need INT8 tensor cores (Turing sm_75 and later); " +
                             gpu_is(gpu)
                       : "vLLM's compressed-tensors weight-only kernels (WNA16: Marlin and the "
                         "ones after it) need sm_75; " + gpu_is(gpu) +
                             " (seed 004 §3 lists GPTQ on Volta through the GPTQ format's "
                             "Exllama kernel, which lowbit does not write)"};
  }
  return {true, ""};
}

Support amd_support(const SchemeFacts& s, const GpuSpec& gpu) {
  if (s.weights == WeightFormat::Nvfp4) {
    return {false, "NVFP4 is NVIDIA's FP4 format: no AMD matrix core computes it (seed 004 §3: "
                   "FP4 on AMD only 'partial', i.e. MXFP4 on CDNA 4)"};
  }
  if ((s.weights == WeightFormat::Mxfp4 || s.weights == WeightFormat::Mxfp8) && !gpu.amd_mx) {
    return {false, "MX formats need CDNA 4's MXFP4/MXFP8 matrix cores (MI350 series); " +
                       gpu_is(gpu)};
  }
  if (s.activations == ActFormat::Fp8 && s.weights == WeightFormat::Int) {
    return {false, "vLLM's int4-weight x FP8-activation kernel exists for Hopper only"};
  }
  if (s.activations == ActFormat::Fp8 && !gpu.amd_fp8) {
    return {false, "FP8 W8A8 needs FP8 matrix cores (CDNA 3: MI300 series and later); " +
                       gpu_is(gpu)};
  }
  return {true, ""};
}

}  // namespace

const std::vector<std::string>& recommend_presets() {
  static const std::vector<std::string> names = {
      "W4A16",  "W4A16_ASYM", "W8A16", "W8A8",  "W4A8",     "W4AFP8", "FP8_DYNAMIC",
      "FP8",    "FP8_BLOCK",  "NVFP4", "NVFP4A16", "MXFP4", "MXFP4A16"};
  return names;
}

SchemeFacts scheme_facts(const std::string& preset) {
  SchemeFacts f;
  f.name = upper(preset);
  if (f.name == "UNQUANTIZED" || f.name == "BF16") {
    f.name = "UNQUANTIZED";
    f.weight_text = "16-bit (as the checkpoint)";
    f.activation_text = "16-bit";
    f.cpu_kernel = "";
    return f;
  }
  const quant::QuantScheme scheme = quant::preset_scheme(f.name, {"Linear"});
  if (!scheme.weights) throw InvalidArgument("preset '" + preset + "' quantizes no weights");
  const quant::QuantArgs& w = *scheme.weights;
  f.weight_bits = w.num_bits;
  f.bits_per_weight = bits_per_weight(w);
  f.weight_text = args_text(w);
  if (is_nvfp4(w)) {
    f.weights = WeightFormat::Nvfp4;
  } else if (is_mx(w)) {
    f.weights = w.num_bits == 4 ? WeightFormat::Mxfp4 : WeightFormat::Mxfp8;
  } else {
    f.weights = w.type == quant::QuantType::Int ? WeightFormat::Int : WeightFormat::Fp8;
  }
  if (scheme.input_activations) {
    f.activations = act_format(*scheme.input_activations);
    f.activation_text = args_text(*scheme.input_activations);
    f.calibrated_activations = scheme.input_activations->dynamic != quant::DynamicMode::Dynamic;
  } else {
    f.activation_text = "16-bit";
  }
  // compressed_tensors.cc's dispatch: int weights → wna16 (or w8a8 with int8 inputs), fp8
  // weights → fp8, fp4 / mx → the dequantizing reference.
  if (f.weights == WeightFormat::Int) {
    f.cpu_kernel = f.activations == ActFormat::Int8 ? "w8a8" : "wna16";
  } else if (f.weights == WeightFormat::Fp8) {
    f.cpu_kernel = "fp8";
  } else {
    f.cpu_kernel = "dequant";
  }
  return f;
}

Support target_support(const SchemeFacts& scheme, const GpuSpec& gpu) {
  if (scheme.weights == WeightFormat::None) return {true, "no quantization"};
  return gpu.vendor == GpuVendor::Nvidia ? nvidia_support(scheme, gpu) : amd_support(scheme, gpu);
}

int registry_min_capability() { return quant::describe_quantization(kMethod).min_capability; }

std::string registry_kernel_names() {
  std::string names;
  for (const quant::KernelSpec& k : quant::describe_quantization(kMethod).kernels) {
    names += (names.empty() ? "" : ", ") + k.name;
  }
  return names;
}

namespace {

// A GPU target: the kernel GpuLinear::from would pick for the scheme's layers (the table of
// quant/methods/gpu_linear_kernels.h), if the registry's method declares it and it runs there.
LowbitKernel gpu_kernel(const SchemeFacts& scheme, const quant::Platform& platform) {
  LowbitKernel out;
  if (!quant::cuda_backend_built()) {
    out.text = "this lowbit was built without the CUDA backend";
    return out;
  }
  quant::GpuLinearCase layer;
  quant::InputQuant input;
  if (scheme.weights != WeightFormat::None) {
    const quant::QuantScheme qs = quant::preset_scheme(scheme.name, {"Linear"});
    layer.weights = scheme.weights == WeightFormat::Int   ? quant::GpuLinearCase::Weights::Int
                    : scheme.weights == WeightFormat::Fp8 ? quant::GpuLinearCase::Weights::Fp8
                                                          : quant::GpuLinearCase::Weights::Dequantized;
    layer.bits = scheme.weight_bits;
    if (qs.input_activations) {
      input.args = *qs.input_activations;
      layer.input = &input;
    }
  }
  layer.cols = 4096;  // a typical hidden size (FP8_BLOCK's 128-wide input groups divide it)
  const quant::GpuLinearChoice choice = quant::choose_gpu_linear(layer);
  if (choice.kernel == quant::GpuLinearKernel::None) {
    out.text = choice.why_not;
    return out;
  }
  const quant::KernelSpec spec = quant::gpu_linear_kernel_spec(choice.kernel);
  const std::string missing = spec.missing_on(platform);
  if (!missing.empty()) {
    out.text = "kernel " + spec.name + " " + missing;
    return out;
  }
  out.kernel = spec.name;
  out.dequant_only = scheme.weights != WeightFormat::None && choice.kernel == quant::GpuLinearKernel::Bf16;
  out.text = "kernel " + spec.name;
  if (scheme.weights == WeightFormat::None) return out;
  bool declared = false;
  for (const quant::KernelSpec& k : quant::describe_quantization(kMethod).kernels) {
    declared = declared || k.name == spec.name;
  }
  if (!declared) {
    out.kernel.clear();
    out.text = "the registry's " + std::string(kMethod) + " method declares no " + spec.name;
    return out;
  }
  if (out.dequant_only) out.text += " (weights dequantized to bf16 at load: no memory saved)";
  if (quant::cuda_code_capability(platform.cuda_capability, quant::cuda_architectures()) <
      spec.min_capability) {
    out.text += " once built for it (this binary holds GPU code for " +
                quant::cuda_architectures_text() + ": -DCMAKE_CUDA_ARCHITECTURES=" +
                std::to_string(platform.cuda_capability) + ")";
  }
  out.text += ", " + fixed(scheme.bits_per_weight, 3) + " bits per weight on disk";
  return out;
}

}  // namespace

LowbitKernel lowbit_kernel(const SchemeFacts& scheme, const quant::Platform& platform) {
  if (!platform.x86 && !platform.arm && platform.cuda_capability >= 0) {
    return gpu_kernel(scheme, platform);
  }
  LowbitKernel out;
  if (scheme.weights == WeightFormat::None) {
    out.kernel = "dense";
    out.text = "the unquantized model runs on lowbit's dense kernels";
    return out;
  }
  const quant::MethodDescription method = quant::describe_quantization(kMethod);
  const bool cpu = platform.cuda_capability < 0 && !platform.rocm;
  // On a CPU the family is known (compressed_tensors.cc); an AMD GPU takes the first kernel that
  // runs (none today).
  for (const quant::KernelSpec& k : method.kernels) {
    if ((cpu && k.name != scheme.cpu_kernel) || !k.runs_on(platform)) continue;
    out.kernel = k.name;
    break;
  }
  if (out.kernel.empty() && cpu) {
    for (const quant::KernelSpec& k : method.kernels) {
      if (k.name == "dequant" && k.runs_on(platform)) out.kernel = k.name;
    }
  }
  if (out.kernel.empty()) {
    std::string why;
    for (const quant::KernelSpec& k : method.kernels) {
      why += (why.empty() ? "" : "; ") + k.name + ": " + k.missing_on(platform);
    }
    out.text = "no kernel of the registry's " + std::string(kMethod) + " method runs there (" +
               why + ")";
    return out;
  }
  out.dequant_only = out.kernel == "dequant";
  out.text = "kernel " + out.kernel +
             (out.dequant_only ? " (the reference: weights dequantized at load, so the "
                                 "quantized format saves no memory at run time)"
                               : "") +
             ", " + fixed(scheme.bits_per_weight, 3) + " bits per weight on disk";
  return out;
}

}  // namespace lowbit::eval
