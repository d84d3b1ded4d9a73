// The machine's own memory bandwidth, measured the STREAM way (copy and triad over arrays much
// larger than the caches, best of several runs), so that benchmarks can report weight GB/s as a
// fraction of what this machine can move in the same run (docs/PERFORMANCE.md, rules).
#pragma once

#include <cstddef>

namespace lowbit::kernels::cpu {

struct MemoryBandwidthOptions {
  size_t total_bytes = size_t{1} << 30;  // the three arrays together; >= 1 GiB defeats any L3
  int runs = 5;                          // best of this many timed runs (after one warm-up)
  int threads = 0;                       // OpenMP threads; 0 = the OpenMP default
};

struct MemoryBandwidth {
  // STREAM counting: copy moves 2 words per element (read + write), triad 3 (two reads, one
  // write); write-allocate traffic is not counted, as in STREAM.
  double copy_gb_per_s = 0;
  double triad_gb_per_s = 0;
  int threads = 0;
  size_t total_bytes = 0;
};

// Allocates total_bytes (throws OutOfMemory if it cannot), touches it from the threads that will
// use it, and times the loops. Takes about runs × total_bytes / bandwidth × 2 seconds.
MemoryBandwidth measure_memory_bandwidth(const MemoryBandwidthOptions& options = {});

}  // namespace lowbit::kernels::cpu
