#include "kernels/cpu/memory_bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include "lowbit/error.h"

namespace lowbit::kernels::cpu {

namespace {

struct FreeDeleter {
  void operator()(double* p) const { std::free(p); }
};
using Array = std::unique_ptr<double[], FreeDeleter>;

Array allocate(size_t elements) {
  size_t bytes = (elements * sizeof(double) + 4095) / 4096 * 4096;
  auto* p = static_cast<double*>(std::aligned_alloc(4096, bytes));
  if (p == nullptr) {
    throw OutOfMemory("memory_bandwidth: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  return Array(p);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

MemoryBandwidth measure_memory_bandwidth(const MemoryBandwidthOptions& options) {
  LOWBIT_CHECK(options.total_bytes >= 3 * 4096,
               "memory_bandwidth: total_bytes " + std::to_string(options.total_bytes) +
                   " is too small");
  LOWBIT_CHECK(options.runs >= 1, "memory_bandwidth: runs must be >= 1");
  int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  const int64_t n = static_cast<int64_t>(options.total_bytes / 3 / sizeof(double));
  Array a = allocate(static_cast<size_t>(n));
  Array b = allocate(static_cast<size_t>(n));
  Array c = allocate(static_cast<size_t>(n));
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
  // First touch from the same static split the timed loops use, so pages land near their users.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.5;
  }
  const double scalar = 3.0;
  double best_copy = std::numeric_limits<double>::infinity();
  double best_triad = std::numeric_limits<double>::infinity();
  double expected_a = 1.0;  // every element follows the same recurrence; track one
  for (int run = 0; run <= options.runs; ++run) {  // run 0 is the warm-up
    auto start = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pc[i] = pa[i];
    double copy = seconds_since(start);
    start = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + scalar * pc[i];
    double triad = seconds_since(start);
    expected_a = 2.0 + scalar * expected_a;
    if (run > 0) {
      best_copy = std::min(best_copy, copy);
      best_triad = std::min(best_triad, triad);
    }
  }
  // Keep the loops observable: a wrong value here means the compiler or the memory lied.
  if (pa[n / 2] != expected_a) {
    throw Internal("memory_bandwidth: triad produced a wrong value");
  }
  MemoryBandwidth result;
  double word_bytes = static_cast<double>(n) * sizeof(double);
  result.copy_gb_per_s = 2.0 * word_bytes / best_copy / 1e9;
  result.triad_gb_per_s = 3.0 * word_bytes / best_triad / 1e9;
  result.threads = threads;
  result.total_bytes = 3 * static_cast<size_t>(n) * sizeof(double);
  return result;
}

}  // namespace lowbit::kernels::cpu
