// The current platform (CPU features, CUDA capability) and which kernels run on it.
#include "kernels/cpu/cpu_features.h"
#include "lowbit/quant_method.h"
#include "quant/methods/gpu_linear_kernels.h"

namespace lowbit::quant {
namespace {

int (*cuda_probe)() = nullptr;

Platform detect() {
  Platform p;
#if defined(__x86_64__) || defined(_M_X64)
  p.x86 = true;
  const kernels::cpu::CpuFeatures& f = kernels::cpu::cpu_features();
  p.avx2 = f.has_avx2_kernels();
  p.avx512 = f.has_avx512_kernels();
  p.avx512_vnni = p.avx512 && f.avx512vnni;
  p.avx512_bf16 = p.avx512 && f.avx512bf16;
#elif defined(__aarch64__)
  p.arm = true;
#endif
  // The CUDA device comes from the probe the CLI of a CUDA build installs (this library does not
  // link CUDA): without it, no GPU is seen.
  if (cuda_probe != nullptr) {
    p.cuda_capability = cuda_probe();
    if (p.cuda_capability >= 0) {
      p.cuda_binary_capability = cuda_code_capability(p.cuda_capability, cuda_architectures());
    }
  }
  return p;
}

Platform& current_platform() {
  static Platform platform = detect();
  return platform;
}

}  // namespace

const Platform& Platform::current() { return current_platform(); }

void set_cuda_device_probe(int (*probe)()) {
  cuda_probe = probe;
  current_platform() = detect();
}

std::string Platform::describe() const {
  std::string s = x86 ? "x86-64 CPU" : arm ? "Arm CPU" : "CPU";
  if (x86) {
    std::string isa;
    if (avx2) isa += " avx2";
    if (avx512) isa += " avx512";
    if (avx512_vnni) isa += " avx512_vnni";
    if (avx512_bf16) isa += " avx512_bf16";
    s += " (" + (isa.empty() ? std::string("baseline") : isa.substr(1)) + ")";
  }
  if (cuda_capability >= 0) {
    s += ", CUDA GPU sm_" + std::to_string(cuda_capability);
    if (cuda_binary_capability < 0) {
      s += " (this binary has no GPU code for it: built for " + cuda_architectures_text() + ")";
    }
  } else if (rocm) {
    s += ", AMD GPU";
  } else {
    s += ", no GPU";
  }
  return s;
}

std::string KernelSpec::missing_on(const Platform& p) const {
  switch (isa) {
    case Isa::Portable: return (p.x86 || p.arm) ? "" : "needs a CPU";
    case Isa::Avx2: return p.avx2 ? "" : "needs an x86-64 CPU with AVX2, FMA and F16C";
    case Isa::Avx512: return p.avx512 ? "" : "needs an x86-64 CPU with AVX-512 (F/BW/VL/DQ)";
    case Isa::Avx512Vnni: return p.avx512_vnni ? "" : "needs an x86-64 CPU with AVX-512 VNNI";
    case Isa::Avx512Bf16: return p.avx512_bf16 ? "" : "needs an x86-64 CPU with AVX-512 BF16";
    case Isa::Rocm: return p.rocm ? "" : "needs an AMD GPU (ROCm)";
    case Isa::Cuda: {
      if (p.cuda_capability < 0) {
        return "needs a CUDA GPU with compute capability >= " +
               std::to_string(min_capability / 10) + "." + std::to_string(min_capability % 10);
      }
      if (p.cuda_capability < min_capability || p.cuda_capability > max_capability) {
        return "needs compute capability in [" + std::to_string(min_capability) + ", " +
               std::to_string(max_capability) + "], this GPU has " +
               std::to_string(p.cuda_capability);
      }
      if (p.cuda_binary_capability < 0) {
        return "this binary has no GPU code for sm_" + std::to_string(p.cuda_capability) +
               " (built for " + cuda_architectures_text() +
               "; configure with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(p.cuda_capability) +
               ")";
      }
      if (p.cuda_binary_capability > 0 && p.cuda_binary_capability < min_capability) {
        return "this GPU runs this binary's sm_" + std::to_string(p.cuda_binary_capability) +
               " code, the kernel needs sm_" + std::to_string(min_capability) +
               " (configure with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(p.cuda_capability) +
               ")";
      }
      return "";
    }
  }
  return "unknown ISA";
}

bool KernelSpec::runs_on(const Platform& platform) const { return missing_on(platform).empty(); }

}  // namespace lowbit::quant
