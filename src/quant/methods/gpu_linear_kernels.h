// The GPU backend's linear kernels as data, in one place: which kernel `--device cuda` runs for a
// layer (choose_gpu_linear: src/gpu/gpu_linear.cc's GpuLinear::from dispatches on it), what each
// kernel's code needs (gpu_linear_kernel_spec), and the CUDA kernels a method declares to the
// registry, derived from its CPU kernels by classifying the layers each CPU kernel runs
// (add_gpu_kernels). So `lowbit methods` cannot drift from the dispatch.
//
//   layer (what GpuLinear::from reads)                           GPU kernel
//   no method (unquantized, GGUF decoded at load)                bf16       (cuBLASLt / bf16 GEMV)
//   int 4 / 8-bit weights, no input quantization                 wna16      (W4A16, W8A16)
//   int weights of other widths, no input quantization           bf16       (dequantized at load)
//   int weights x int8 inputs (dynamic per token / static)       w8a8_int8  (cuBLASLt IMMA / SIMT)
//   fp8 weights, no input quantization                           bf16       (dequantized at load)
//   fp8 weights x fp8 inputs (token / tensor / group)            w8a8_fp8   (cuBLASLt FP8 / GEMV)
//   dequantized weights (fp4, mx, bnb 4-bit, DeepSpeedFP), no input quantization   bf16
//   anything else (other input schemes, a method that is not a KernelLinear, emulated inputs on
//   an unquantized layer)                                        none: loading fails (Unsupported)
// bitsandbytes' LLM.int8() has int8 weights and no input_quant(): it runs as W8A16 on the GPU, its
// outlier decomposition of the inputs being CPU-only (docs/methods.md).
//
// No CUDA here: this is data, compiled into every build. A build without the CUDA backend declares
// no GPU kernel (cuda_backend_built() is false), so a CPU-only binary's matrix stays honest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowbit/quant_method.h"

namespace lowbit::quant {

struct InputQuant;
class KernelLinear;

enum class GpuLinearKernel { None, Bf16, Wna16, W8a8Int8, W8a8Fp8 };

// What the dispatch reads of one layer.
struct GpuLinearCase {
  enum class Weights {
    Dense,        // no quantization method: the layer's float weight
    Int,          // KernelLinear with canonical int weights (kernels::IntWeights)
    Fp8,          // KernelLinear with canonical fp8 weights (kernels::Fp8Weights)
    Dequantized,  // KernelLinear on the dequant kernel only (fp4, mx, bnb 4-bit, DeepSpeedFP)
    Other,        // a LinearMethod that is not a KernelLinear (plugins)
  };
  Weights weights = Weights::Dense;
  int bits = 0;                         // Int: the code width
  const InputQuant* input = nullptr;    // how the input is quantized (null: it is not)
  int64_t cols = 0;                     // this GPU's in_features (fp8 group inputs must divide it)
};

struct GpuLinearChoice {
  GpuLinearKernel kernel = GpuLinearKernel::None;
  std::string why_not;  // None: why (for the Unsupported message)
};

GpuLinearChoice choose_gpu_linear(const GpuLinearCase& layer);
// The case of a KernelLinear layer whose canonical weights were kept (gpu::load_model_for_gpu).
GpuLinearCase gpu_linear_case(const KernelLinear& layer, int64_t cols);

// The input schemes the GPU kernels implement (the CPU's act_quant.h / w8a8 readings of them).
bool gpu_int8_inputs(const InputQuant& input);
bool gpu_fp8_inputs(const InputQuant& input, int64_t cols);

// The kernel's spec: name ("wna16_cuda"), Isa::Cuda, the compute capability its code needs.
KernelSpec gpu_linear_kernel_spec(GpuLinearKernel kernel);
std::vector<KernelSpec> gpu_linear_kernel_specs();  // every GPU linear kernel, None excluded

// The layers each CPU kernel family runs, as cases of the table above (one representative of each
// scheme): what the derivation classifies.
struct CpuKernelCase {
  std::string cpu_kernel;  // "wna16", "w8a8", "fp8", "dequant", "gguf_decode"
  std::string scheme;      // for messages and tests: "int4 weights, no input quantization"
  GpuLinearCase layer;
};
const std::vector<CpuKernelCase>& cpu_kernel_cases();

// Appends to d.kernels the GPU kernels that run the layers of d's CPU kernels (nothing without the
// CUDA backend, for an unsupported method, or for a method that only quantizes MoE experts, which
// the GPU backend does not run).
void add_gpu_kernels(MethodDescription& d);

// ---- the CUDA build ------------------------------------------------------------------------------

bool cuda_backend_built();
// CMAKE_CUDA_ARCHITECTURES of this build ({"90a"} by default; empty without the CUDA backend).
const std::vector<std::string>& cuda_architectures();
std::string cuda_architectures_text();  // "sm_90a", "sm_80, sm_89, sm_90a"
// The compute capability of the compiled code that a GPU of `capability` runs: the best real
// architecture of `archs` it can run (same major, not newer; "90a" only on 9.0), else the best
// PTX it can JIT-compile; -1 when none. "native" / "all" count as code for every GPU.
int cuda_code_capability(int capability, const std::vector<std::string>& archs);

// Platform::current() asks `probe` for the first CUDA device's compute capability (-1: none);
// set by the CLI of a CUDA build before it reads the platform. Re-detects when already read.
void set_cuda_device_probe(int (*probe)());

}  // namespace lowbit::quant
