// Rotary embedding and the paged KV-cache write of one attention step in one kernel: rope_neox
// (small_ops.h) of q and k in place, then write_kv_paged (attention.h) of the rotated k and of v.
// One kernel launch instead of two per layer and step; the results (q, k, v rows and the cache
// slots, bf16 or fp8 cache) have the bits of the two kernels run in sequence: the same fp32
// formulas and roundings, and the cache copy reads back the k rows the rotation wrote.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace lowbit::kernels::cuda {

// q: [rows, heads · head_dim] (q_stride apart; 0: dense); k, v: [rows, cache.kv_heads · head_dim]
// (k_stride / v_stride apart; 0: dense), head_dim = cache.head_dim. positions, cos_sin,
// max_positions and rotary_dim as rope_neox; slot_mapping and the cache as write_kv_paged (a
// negative slot skips the cache write of its row, not its rotation). Every argument rule of the two
// functions applies (InvalidArgument naming this function otherwise).
void rope_neox_write_kv(uint16_t* q, int64_t q_stride, uint16_t* k, int64_t k_stride,
                        const uint16_t* v, int64_t v_stride, const int32_t* positions,
                        const int32_t* slot_mapping, int64_t rows, int heads, int rotary_dim,
                        const float* cos_sin, int64_t max_positions, const PagedKvCache& cache,
                        cudaStream_t stream);

}  // namespace lowbit::kernels::cuda
