#include "gpu/peer_all_reduce.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::gpu {

namespace {

constexpr int kThreads = 512;
constexpr int kVector = 8;  // bf16 values per 16-byte load

struct Peers {
  const uint4* staging[PeerAllReduce::kMaxRanks];  // each rank's staging buffer (both halves)
  uint32_t* flags[PeerAllReduce::kMaxRanks];       // each rank's flag array
};

__device__ inline void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ inline uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ inline void add_bf16x8(float* acc, uint4 v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] += f.x;
    acc[2 * i + 1] += f.y;
  }
}

// One block per slice of `vectors` 16-byte vectors; see the header for the four steps.
__global__ void one_shot_kernel(uint4* data, int64_t vectors, int64_t half, int rank, int world,
                                Peers peers, uint32_t* calls) {
  __shared__ uint32_t call;
  if (threadIdx.x == 0) call = ++calls[blockIdx.x];
  __syncthreads();
  const uint32_t c = call;
  const int64_t per_block = (vectors + gridDim.x - 1) / gridDim.x;
  const int64_t begin = blockIdx.x * per_block;
  const int64_t end = min(vectors, begin + per_block);
  const int64_t offset = (c & 1) * half;
  uint4* mine = const_cast<uint4*>(peers.staging[rank]) + offset;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine[i] = data[i];
  __syncthreads();  // the block's copies happen before its flag (release, cumulative)
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    store_release(peers.flags[peer] + blockIdx.x * PeerAllReduce::kMaxRanks + rank, c);
    const uint32_t* flag = peers.flags[rank] + blockIdx.x * PeerAllReduce::kMaxRanks + peer;
    // Monotonic call numbers: a peer already one call ahead has also finished this one.
    while (static_cast<int32_t>(load_acquire(flag) - c) < 0) __nanosleep(32);
  }
  __syncthreads();
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float acc[kVector] = {};
    for (int r = 0; r < world; ++r) add_bf16x8(acc, __ldcv(peers.staging[r] + offset + i));
    uint4 out;
    auto* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
    data[i] = out;
  }
}

}  // namespace

std::unique_ptr<PeerAllReduce> PeerAllReduce::create(const std::vector<int>& devices,
                                                     int64_t max_count) {
  const int world = static_cast<int>(devices.size());
  if (world < 2 || world > kMaxRanks) return nullptr;
  for (int a : devices) {
    for (int b : devices) {
      int can = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || can == 0)) {
        cudaGetLastError();
        return nullptr;
      }
    }
  }
  std::unique_ptr<PeerAllReduce> ar(new PeerAllReduce());
  ar->devices_ = devices;
  ar->max_count_ = max_count / kVector * kVector;
  int previous = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&previous));
  for (int a : devices) {
    LOWBIT_CUDA_CHECK(cudaSetDevice(a));
    for (int b : devices) {
      if (a == b) continue;
      const cudaError_t status = cudaDeviceEnablePeerAccess(b, 0);
      if (status != cudaSuccess && status != cudaErrorPeerAccessAlreadyEnabled) {
        LOWBIT_CUDA_CHECK(status);
      }
      cudaGetLastError();  // clears cudaErrorPeerAccessAlreadyEnabled
    }
    Rank r;
    r.staging = kernels::cuda::DeviceBuffer<uint16_t>(static_cast<size_t>(2 * ar->max_count_));
    r.flags = kernels::cuda::DeviceBuffer<uint32_t>(static_cast<size_t>(kMaxBlocks * kMaxRanks));
    r.calls = kernels::cuda::DeviceBuffer<uint32_t>(static_cast<size_t>(kMaxBlocks));
    LOWBIT_CUDA_CHECK(cudaMemset(r.flags.data(), 0, r.flags.bytes()));
    LOWBIT_CUDA_CHECK(cudaMemset(r.calls.data(), 0, r.calls.bytes()));
    ar->ranks_.push_back(std::move(r));
  }
  for (int a : devices) {
    LOWBIT_CUDA_CHECK(cudaSetDevice(a));
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  LOWBIT_CUDA_CHECK(cudaSetDevice(previous));
  return ar;
}

void PeerAllReduce::run(int rank, uint16_t* data, int64_t count, cudaStream_t stream) const {
  LOWBIT_CHECK_AS(Internal, accepts(count), "PeerAllReduce::run: count " + std::to_string(count));
  Peers peers{};
  for (size_t r = 0; r < ranks_.size(); ++r) {
    peers.staging[r] = reinterpret_cast<const uint4*>(ranks_[r].staging.data());
    peers.flags[r] = const_cast<uint32_t*>(ranks_[r].flags.data());
  }
  const int64_t vectors = count / kVector;
  // The same grid on every rank for the same count (each block pairs with its peers' block).
  const int blocks = static_cast<int>(std::clamp<int64_t>((vectors + kThreads - 1) / kThreads, 1, kMaxBlocks));
  one_shot_kernel<<<blocks, kThreads, 0, stream>>>(
      reinterpret_cast<uint4*>(data), vectors, max_count_ / kVector, rank,
      static_cast<int>(ranks_.size()), peers, const_cast<uint32_t*>(ranks_[static_cast<size_t>(rank)].calls.data()));
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::gpu
