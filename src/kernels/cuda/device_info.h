// What CUDA devices this process can use. Safe to call on a machine without a GPU or driver: it
// then reports zero devices instead of failing.
#pragma once

#include <string>
#include <vector>

namespace lowbit::kernels::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability = 0;  // 90 for sm_90
  size_t total_memory = 0;
};

std::vector<DeviceInfo> list_devices();

}  // namespace lowbit::kernels::cuda
