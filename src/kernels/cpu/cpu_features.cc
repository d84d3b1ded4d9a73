#include "kernels/cpu/cpu_features.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LOWBIT_X86 1
#endif

namespace lowbit::kernels::cpu {

namespace {

#ifdef LOWBIT_X86
struct CpuidRegs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return CpuidRegs{};
  return r;
}

// XCR0: which register states the OS saves. Read with inline asm so that this file needs no
// -mxsave flag (it is compiled for the baseline ISA).
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned value, int index) { return ((value >> index) & 1u) != 0; }

CpuFeatures detect() {
  CpuFeatures f;
  CpuidRegs leaf1 = cpuid(1, 0);
  bool osxsave = bit(leaf1.ecx, 27);
  if (!osxsave) return f;  // without XSAVE enabled by the OS no AVX state is saved
  uint64_t xcr0 = read_xcr0();
  bool os_avx = (xcr0 & 0x6) == 0x6;             // SSE and AVX (YMM upper) state
  bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM state
  if (!os_avx) return f;
  CpuidRegs leaf7 = cpuid(7, 0);
  CpuidRegs leaf7_1 = cpuid(7, 1);
  bool avx = bit(leaf1.ecx, 28);
  f.fma = avx && bit(leaf1.ecx, 12);
  f.f16c = avx && bit(leaf1.ecx, 29);
  f.avx2 = avx && bit(leaf7.ebx, 5);
  if (os_avx512) {
    f.avx512f = bit(leaf7.ebx, 16);
    f.avx512dq = f.avx512f && bit(leaf7.ebx, 17);
    f.avx512bw = f.avx512f && bit(leaf7.ebx, 30);
    f.avx512vl = f.avx512f && bit(leaf7.ebx, 31);
    f.avx512vnni = f.avx512f && bit(leaf7.ecx, 11);
    f.avx512bf16 = f.avx512f && bit(leaf7_1.eax, 5);
  }
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_features_string(const CpuFeatures& f) {
  std::string out;
  auto add = [&out](bool present, const char* name) {
    if (!present) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512bf16, "avx512bf16");
  add(f.avx512vnni, "avx512vnni");
  return out.empty() ? "baseline" : out;
}

std::string cpu_brand() {
#ifdef LOWBIT_X86
  if (cpuid(0x80000000u, 0).eax < 0x80000004u) return "unknown";
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    CpuidRegs r = cpuid(0x80000002u + i, 0);
    std::memcpy(brand + 16 * i + 0, &r.eax, 4);
    std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
    std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
    std::memcpy(brand + 16 * i + 12, &r.edx, 4);
  }
  std::string s(brand);
  size_t first = s.find_first_not_of(' ');
  size_t last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown" : s.substr(first, last - first + 1);
#else
  return "unknown";
#endif
}

}  // namespace lowbit::kernels::cpu
