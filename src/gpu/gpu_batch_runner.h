// models::BatchRunner on a GpuModel: the serving engine's steps (continuous batching) on the GPU.
// The engine's KvBlockPool keeps the block accounting; the runner keeps one GpuSequence per engine
// sequence (PagedSequence), truncated to the engine's length when that went down (a preempted
// request readmitted) and dropped when the sequence leaves the running set. A step with more new
// tokens than the model's max_step_tokens runs in several forward_batch calls; an entry longer than
// that alone runs through forward() (which chunks).
#pragma once

#include <memory>

#include "gpu/gpu_model.h"
#include "models/paged_kv_cache.h"

namespace lowbit::gpu {

std::unique_ptr<models::BatchRunner> make_gpu_batch_runner(std::unique_ptr<GpuModel> model);

}  // namespace lowbit::gpu
