// What the CPU we run on can execute, detected once (cpuid + xgetbv). This is the one place kernel
// dispatch asks; a feature counts only when the OS also saves its registers on context switches.
#pragma once

#include <string>

namespace lowbit::kernels::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512bf16 = false;
  bool avx512vnni = false;

  // The feature sets the ISA-specific kernel files are compiled for (see src/CMakeLists.txt).
  bool has_avx2_kernels() const { return avx2 && fma && f16c; }
  bool has_avx512_kernels() const {
    return has_avx2_kernels() && avx512f && avx512bw && avx512vl && avx512dq;
  }
};

// Detected on first call, constant afterwards.
const CpuFeatures& cpu_features();

// "avx2 fma f16c avx512f ..." for logs and benchmark headers.
std::string cpu_features_string(const CpuFeatures& features);

// The processor's brand string from cpuid ("AMD EPYC 9R14 ..."), or "unknown".
std::string cpu_brand();

}  // namespace lowbit::kernels::cpu
