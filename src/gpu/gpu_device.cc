// Device checks, the CPU-side load for the GPU, the bandwidth probe and pinned host buffers.
#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "gpu/gpu_impl.h"
#include "gpu/gpu_kernels.h"
#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "quant/methods/kernel_linear.h"

namespace lowbit::gpu {

namespace kc = kernels::cuda;

void require_device(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Unsupported(std::string("--device cuda: no CUDA device is usable by this process "
                                  "(cudaGetDeviceCount: ") +
                      cudaGetErrorName(status) + ": " + cudaGetErrorString(status) + ")");
  }
  if (count == 0) throw Unsupported("--device cuda: no CUDA device is visible to this process");
  if (device < 0 || device >= count) {
    throw InvalidArgument("--device cuda: device " + std::to_string(device) + " does not exist (" +
                          std::to_string(count) + " visible)");
  }
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void run_per_rank(int world, const std::function<void(int)>& fn) {
  if (world == 1) {
    fn(0);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  auto guarded = [&](int r) {
    try {
      fn(r);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < world; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::unique_ptr<models::Model> load_model_for_gpu(const std::string& dir,
                                                  const models::LoadOptions& options, int device) {
  require_device(device);
  // Quantized layers keep their canonical weights for the GPU kernels' own packing; the flag is
  // process-wide, so it stays on (later CPU loads keep the copy too, at a host-memory cost only).
  quant::KernelLinear::set_keep_canonical_weights(true);
  return models::Model::load(dir, options);
}

double measure_device_read_bandwidth_gbps(int device) {
  require_device(device);
  LOWBIT_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp props{};
  LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  // Far larger than L2 (50 MB on H200), small enough to fit beside a loaded model.
  size_t free_bytes = 0, total_bytes = 0;
  LOWBIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t bytes = std::min<size_t>(size_t(2) << 30, free_bytes / 4) / 16 * 16;
  LOWBIT_CHECK_AS(OutOfMemory, bytes >= (size_t(256) << 20),
                  "bandwidth probe: less than 1 GiB of device memory is free");
  kc::DeviceBuffer<uint8_t> data(bytes);
  LOWBIT_CUDA_CHECK(cudaMemset(data.data(), 1, bytes));
  const int blocks = props.multiProcessorCount * 8;
  kc::DeviceBuffer<uint32_t> sink(static_cast<size_t>(blocks));
  cudaStream_t stream = nullptr;
  LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 1e30f;
  for (int rep = 0; rep < 12; ++rep) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(start, stream));
    read_probe(data.data(), bytes, sink.data(), blocks, stream);
    LOWBIT_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep >= 2) best_ms = std::min(best_ms, ms);  // the first runs warm clocks and TLBs
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  return static_cast<double>(bytes) / (static_cast<double>(best_ms) * 1e-3) / 1e9;
}

template <typename T>
PinnedBuffer<T>::PinnedBuffer(size_t count) : count_(count) {
  if (count_ > 0) {
    LOWBIT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count_ * sizeof(T)));
  }
}

template <typename T>
PinnedBuffer<T>::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

template <typename T>
PinnedBuffer<T>::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}

template <typename T>
PinnedBuffer<T>& PinnedBuffer<T>::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

template class PinnedBuffer<float>;
template class PinnedBuffer<int32_t>;

}  // namespace lowbit::gpu
