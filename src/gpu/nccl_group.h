// The NCCL communicators of one process that drives N GPUs (one communicator per GPU, made by
// ncclCommInitAll) and the one collective tensor parallelism needs: an in-place bf16 all-reduce.
// Each rank's calls are issued from that rank's own host thread (NCCL blocks a collective until
// every rank has issued it). Built without NCCL (no nccl.h / libnccl found at configure time),
// the constructor throws Unsupported.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace lowbit::gpu {

class NcclGroup {
 public:
  // One communicator per device in `devices` (rank i = devices[i]). NVLink SHARP (NVLS) multicast
  // is switched off unless NCCL_NVLS_ENABLE is already set: the lent machines do not allow it.
  explicit NcclGroup(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  // data[i] = Σ over ranks of data[i] (bf16, summed by NCCL in fp32 and rounded once per step).
  void all_reduce_bf16(int rank, uint16_t* data, int64_t count, cudaStream_t stream) const;

 private:
  std::vector<void*> comms_;  // ncclComm_t (kept opaque: this header has no NCCL types)
};

// True when this build links NCCL.
bool nccl_available();

}  // namespace lowbit::gpu
