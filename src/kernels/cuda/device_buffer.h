// Owning device memory: DeviceBuffer<T> is a typed, move-only cudaMalloc'd array. Weights are
// allocated once at load and live as long as the model; per-step scratch comes from the caller's
// workspace, never from cudaMalloc inside a decode step (a malloc would synchronize the device).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace lowbit::kernels::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_ > 0) LOWBIT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count_ * sizeof(T)));
  }
  // Allocates and copies `host` to the device (synchronously).
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { release(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  void upload(std::span<const T> host) {
    LOWBIT_CHECK_AS(Internal, host.size() <= count_, "DeviceBuffer::upload: too many elements");
    if (!host.empty()) {
      LOWBIT_CUDA_CHECK(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) {
      LOWBIT_CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return host;
  }

 private:
  void release() noexcept {
    if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor
    data_ = nullptr;
    count_ = 0;
  }

  T* data_ = nullptr;
  size_t count_ = 0;
};

// True when a CUDA device is usable by this process (tests skip cleanly when it is not).
bool device_available();

}  // namespace lowbit::kernels::cuda
