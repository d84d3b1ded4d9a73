// What a quantization preset is (from compressed-tensors' preset table, quant::preset_scheme), what
// hardware it needs to run as intended, and which of lowbit's registered kernels would run it.
//
// Two questions kept apart:
//   target_support: can the target GPU run the scheme's arithmetic (FP8 tensor cores from Ada
//     sm_89, FP4 from Blackwell sm_100, INT8 from Turing sm_75; vLLM's compressed-tensors scheme
//     minimums, /work/shared/docs/REGISTRY.md §5), whoever's software runs it;
//   lowbit_kernel: which kernel of lowbit's method registry (the compressed-tensors method, since
//     that is what `lowbit quantize` writes) would run it on a given platform, today.
#pragma once

#include <string>
#include <vector>

#include "eval/gpu_catalog.h"
#include "lowbit/quant_method.h"

namespace lowbit::eval {

enum class WeightFormat { None, Int, Fp8, Nvfp4, Mxfp4, Mxfp8 };  // None: unquantized
enum class ActFormat { None, Int8, Int4, Fp8, Nvfp4, Mxfp4, Mxfp8 };  // None: 16-bit activations

struct SchemeFacts {
  std::string name;  // the preset, upper case: "W4A16"
  WeightFormat weights = WeightFormat::None;
  int weight_bits = 16;
  ActFormat activations = ActFormat::None;
  std::string weight_text;      // "int4, group 128, symmetric"
  std::string activation_text;  // "16-bit", "int8 dynamic per token", ...
  double bits_per_weight = 16;  // stored bits per quantized weight, scales and zero points included
  // The kernel family lowbit's compressed-tensors method picks for it on a CPU (kernel_linear.h):
  // "wna16", "w8a8", "fp8" or "dequant".
  std::string cpu_kernel;
  // Static or calibrated activation scales (FP8, NVFP4): quantize needs calibration data.
  bool calibrated_activations = false;
  bool quantizes_activations() const { return activations != ActFormat::None; }
};

// The presets `recommend` reasons about (the compressed-tensors names lowbit quantize accepts).
const std::vector<std::string>& recommend_presets();

// Facts of a preset ("w4a16" works too); InvalidArgument naming the preset when unknown.
SchemeFacts scheme_facts(const std::string& preset);

struct Support {
  bool runs = false;
  std::string reason;  // why not (or, when it runs, what runs it)
};

// Can `gpu` run the scheme's arithmetic natively? When not, the reason names what is missing and
// what vLLM would do instead (e.g. FP8 W8A8 on Ampere: loaded as FP8 weight-only).
Support target_support(const SchemeFacts& scheme, const GpuSpec& gpu);

// The registry's answer for a platform: the first kernel of the compressed-tensors method that
// would run the scheme there, or why none does. `kernel` is empty when none runs; `dequant_only`
// when the only kernel is the reference that dequantizes the weights at load.
struct LowbitKernel {
  std::string kernel;
  bool dequant_only = false;
  std::string text;  // one line for the report
};
LowbitKernel lowbit_kernel(const SchemeFacts& scheme, const quant::Platform& platform);

// The registry's minimum compute capability for the method lowbit's checkpoints use
// (compressed-tensors), and its kernel names, for the report.
int registry_min_capability();
std::string registry_kernel_names();

}  // namespace lowbit::eval
