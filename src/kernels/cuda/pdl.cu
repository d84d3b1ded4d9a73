// pdl_enabled(): see pdl.cuh.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels/cuda/pdl.cuh"

namespace lowbit::kernels::cuda {

bool pdl_enabled() {
  static const bool allowed = [] {
    const char* v = std::getenv("LOWBIT_GPU_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!allowed) return false;
  static std::mutex mutex;
  static std::vector<int> cache;  // per device: 0 unknown, 1 yes, 2 no
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() <= static_cast<size_t>(device)) cache.resize(static_cast<size_t>(device) + 1, 0);
  int& known = cache[static_cast<size_t>(device)];
  if (known == 0) {
    int major = 0;
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    known = major >= 9 ? 1 : 2;
  }
  return known == 1;
}

}  // namespace lowbit::kernels::cuda
