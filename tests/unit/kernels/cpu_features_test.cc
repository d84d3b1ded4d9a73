// cpu_features() against what the kernel reports in /proc/cpuinfo (Linux x86), and the
// memory-bandwidth measurement's contract (not its speed: no timing thresholds in tests).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu {
namespace {

// The "flags" line of the first processor in /proc/cpuinfo, or an empty set.
std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

// Linux lists a flag only when the CPU has it and the kernel enabled its register state, which
// is what cpu_features() checks through cpuid + xgetbv. (Under an emulator such as valgrind,
// cpuid describes the emulated CPU while /proc/cpuinfo describes the real one: this test fails
// there by design, and the kernels it selects are the ones the emulator can run.)
TEST(CpuFeaturesTest, AgreesWithProcCpuinfo) {
  std::set<std::string> flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
  const CpuFeatures& f = cpu_features();
  auto has = [&](const char* name) { return flags.count(name) > 0; };
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.fma, has("fma"));
  EXPECT_EQ(f.f16c, has("f16c"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512vl, has("avx512vl"));
  EXPECT_EQ(f.avx512dq, has("avx512dq"));
  EXPECT_EQ(f.avx512bf16, has("avx512_bf16"));
  EXPECT_EQ(f.avx512vnni, has("avx512_vnni"));
  EXPECT_EQ(&cpu_features(), &f);  // detected once
  EXPECT_FALSE(cpu_features_string(f).empty());
  EXPECT_FALSE(cpu_brand().empty());
}

TEST(MemoryBandwidthTest, SmallRunReportsPositiveRatesAndItsSetup) {
  MemoryBandwidthOptions options;
  options.total_bytes = 3 << 20;
  options.runs = 2;
  options.threads = 2;
  MemoryBandwidth bw = measure_memory_bandwidth(options);
  EXPECT_TRUE(std::isfinite(bw.copy_gb_per_s) && bw.copy_gb_per_s > 0);
  EXPECT_TRUE(std::isfinite(bw.triad_gb_per_s) && bw.triad_gb_per_s > 0);
  EXPECT_EQ(bw.threads, 2);
  EXPECT_LE(bw.total_bytes, options.total_bytes);
  EXPECT_GT(bw.total_bytes, options.total_bytes - 3 * sizeof(double));
}

TEST(MemoryBandwidthTest, RejectsNonsenseOptions) {
  MemoryBandwidthOptions options;
  options.total_bytes = 100;
  EXPECT_THROW(measure_memory_bandwidth(options), InvalidArgument);
  options.total_bytes = 3 << 20;
  options.runs = 0;
  EXPECT_THROW(measure_memory_bandwidth(options), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::kernels::cpu
