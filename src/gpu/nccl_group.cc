#include "gpu/nccl_group.h"

#include <cstdlib>
#include <string>

#include "lowbit/error.h"

#ifdef LOWBIT_WITH_NCCL
#include <nccl.h>
#endif

namespace lowbit::gpu {

#ifndef LOWBIT_WITH_NCCL

bool nccl_available() { return false; }

NcclGroup::NcclGroup(const std::vector<int>&) {
  throw Unsupported("--tensor-parallel-size: this lowbit was built without NCCL (nccl.h and "
                    "libnccl were not found when it was configured)");
}
NcclGroup::~NcclGroup() = default;
void NcclGroup::all_reduce_bf16(int, uint16_t*, int64_t, cudaStream_t) const {}

#else

namespace {

void check(ncclResult_t status, const char* call) {
  if (status != ncclSuccess) {
    throw Internal(std::string("NCCL ") + call + " failed: " + ncclGetErrorString(status) +
                   " (NCCL_DEBUG=WARN says more)");
  }
}

}  // namespace

bool nccl_available() { return true; }

NcclGroup::NcclGroup(const std::vector<int>& devices) {
  LOWBIT_CHECK(!devices.empty(), "NcclGroup: no devices");
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  check(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()),
        "ncclCommInitAll");
  comms_.assign(comms.begin(), comms.end());
}

NcclGroup::~NcclGroup() {
  for (void* c : comms_) {
    if (c != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(c));
  }
}

void NcclGroup::all_reduce_bf16(int rank, uint16_t* data, int64_t count, cudaStream_t stream) const {
  check(ncclAllReduce(data, data, static_cast<size_t>(count), ncclBfloat16, ncclSum,
                      static_cast<ncclComm_t>(comms_.at(static_cast<size_t>(rank))), stream),
        "ncclAllReduce");
}

#endif

}  // namespace lowbit::gpu
