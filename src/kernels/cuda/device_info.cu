#include <cuda_runtime.h>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"

namespace lowbit::kernels::cuda {

std::vector<DeviceInfo> list_devices() {
  int count = 0;
  // No driver or no GPU is not an error here: the CPU backend takes over.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) continue;
    devices.push_back({i, props.name, props.major * 10 + props.minor, props.totalGlobalMem});
  }
  return devices;
}

bool device_available() { return !list_devices().empty(); }

}  // namespace lowbit::kernels::cuda
