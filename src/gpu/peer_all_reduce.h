// A one-shot all-reduce of small bf16 buffers between the GPUs of one process over peer access
// (NVLink), for the latency-bound all-reduces of a decode step: NCCL takes ~20 us per 8 KiB call
// on 2 x H200 (bench/NOTES.md, "Tensor parallelism"); this is one kernel that each GPU runs on its
// own stream:
//   1. copy its data into its own staging buffer (two, alternating by call, so a slow peer still
//      reading call k's data is never overwritten by call k + 1),
//   2. raise its flag for this call in every peer's flag array (a release store, system scope),
//   3. wait for every peer's flag (acquire loads), then
//   4. sum all GPUs' staging buffers in rank order in fp32 and round once: every GPU gets the same
//      bits (a forward's residual streams stay identical across GPUs).
// Each block handles its own slice with its own flags and call counter (kept on the device, so CUDA
// graph replays count too). Every GPU must issue the same sequence of calls (sizes included).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/device_buffer.h"

namespace lowbit::gpu {

class PeerAllReduce {
 public:
  // Null when some pair of `devices` has no peer access (then callers use NCCL for everything).
  // `max_count`: the largest buffer (bf16 values) run() takes.
  static std::unique_ptr<PeerAllReduce> create(const std::vector<int>& devices, int64_t max_count);

  // Whether run() takes `count` values (<= max_count and a multiple of 8: 16-byte vectors).
  bool accepts(int64_t count) const { return count > 0 && count <= max_count_ && count % 8 == 0; }
  // data[i] = Σ over ranks of data[i], in place, on `stream` of rank `rank`'s device.
  void run(int rank, uint16_t* data, int64_t count, cudaStream_t stream) const;

  static constexpr int kMaxRanks = 8;
  static constexpr int kMaxBlocks = 32;

 private:
  struct Rank {
    kernels::cuda::DeviceBuffer<uint16_t> staging;  // [2, max_count]
    kernels::cuda::DeviceBuffer<uint32_t> flags;    // [kMaxBlocks, kMaxRanks]: call number per peer
    kernels::cuda::DeviceBuffer<uint32_t> calls;    // [kMaxBlocks]: this rank's calls so far
  };
  std::vector<Rank> ranks_;
  std::vector<int> devices_;
  int64_t max_count_ = 0;
};

}  // namespace lowbit::gpu
