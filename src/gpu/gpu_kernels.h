// The few device kernels the GPU model needs beyond src/kernels/cuda (internal to src/gpu). Same
// conventions: bf16 as raw bit patterns, fp32 math, one rounding per output, asynchronous on
// `stream`, nothing allocated.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::gpu {

// x[i] = bf16(x[i] · scale): the embedding scale (Gemma's sqrt(hidden)) on gathered rows.
void scale_bf16(uint16_t* x, int64_t n, float scale, cudaStream_t stream);

// out[r][i] = bf16(silu(gate[r][i]) · up[r][i]) for separate dense gate and up [rows, n]: the MLP
// of layers whose gate and up projections are not fused (quantized ones).
void silu_mul_split(const uint16_t* gate, const uint16_t* up, int64_t rows, int64_t n,
                    uint16_t* out, cudaStream_t stream);

// x[i] = a bf16 value uniform in [-0.02·√3, 0.02·√3] (std 0.02, what `lowbit synth` draws) from a
// hash of (seed, i): random benchmark weights made on the device. Default stream; synchronous.
void fill_random_bf16(uint16_t* x, int64_t n, uint64_t seed);

// The embedding rows of ids in [vocab_begin, vocab_begin + vocab_rows) from this GPU's part of the
// table (rows relative to vocab_begin); zero rows for other ids, which another GPU holds (an
// all-reduce over the GPUs completes the lookup). Ids are checked by the caller.
void embedding_gather_part(const uint16_t* table, int64_t vocab_begin, int64_t vocab_rows,
                           int64_t hidden, const int32_t* ids, int64_t rows, uint16_t* out,
                           cudaStream_t stream);

// dst[i] = src[rows[i]] for `count` rows of `hidden` bf16 values (rows: device indices).
void gather_rows_bf16(const uint16_t* src, int64_t hidden, const int32_t* rows, int64_t count,
                      uint16_t* dst, cudaStream_t stream);

// Greedy sampling on the device: for each of `rows` fp32 rows of `cols` logits (rows `ld` apart),
// the largest value and the first column holding it (the host Sampler's argmax: the lowest index
// wins a tie), as out[r] = {column, float bits}. NaN never wins (a row of only NaN gives column 0):
// std::max_element's answer on NaN depends on where the NaN sits, which no parallel reduction can
// reproduce, and a model producing NaN is reported elsewhere. out: device int32 [rows, 2].
void argmax_rows(const float* logits, int64_t rows, int64_t cols, int64_t ld, int32_t* out,
                 cudaStream_t stream);

// Reads `bytes` (a multiple of 16) of device memory once with 16-byte loads and writes one word
// per block to `sink` (so the reads cannot be optimized away): a read-bandwidth probe.
void read_probe(const void* data, size_t bytes, uint32_t* sink, int blocks, cudaStream_t stream);

}  // namespace lowbit::gpu
