// The CUDA backend's basics: device discovery, buffers, and errors that become lowbit exceptions.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"

namespace lowbit::kernels::cuda {
namespace {

TEST(CudaDevice, ListingDevicesNeverThrows) {
  // On the CI machine (no GPU, maybe no driver) this is empty; on the GPU machine it is not.
  const auto devices = list_devices();
  EXPECT_EQ(device_available(), !devices.empty());
  for (const DeviceInfo& d : devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.compute_capability, 50);
    EXPECT_GT(d.total_memory, 0u);
  }
}

TEST(CudaDevice, BufferRoundTrip) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> host = {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f};
  DeviceBuffer<float> buffer{std::span<const float>(host)};
  EXPECT_EQ(buffer.size(), host.size());
  EXPECT_EQ(buffer.download(), host);
  DeviceBuffer<float> moved = std::move(buffer);
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(moved.download(), host);
}

TEST(CudaDevice, ErrorsBecomeExceptionsNamingTheCall) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  // An impossible allocation is OutOfMemory, with the call in the message.
  try {
    DeviceBuffer<char> huge(size_t(1) << 60);
    FAIL() << "allocating 2^60 bytes succeeded";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lowbit::kernels::cuda
