// One pass through the layers (internal to src/gpu): the device pointers of its metadata, shared by
// the single-sequence forward (gpu_forward.cc) and the batched one (gpu_forward_batch.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "gpu/gpu_impl.h"

namespace lowbit::gpu {

// Device pointers into Shard::meta, laid out by the pass's filler.
struct Pass {
  int64_t rows = 0;          // new tokens of all sequences
  int64_t num_seqs = 1;
  int64_t max_query = 0;     // most new tokens of one sequence (0: rows)
  int64_t max_context = 0;   // host upper bound of the context length (sizes attention grids)
  const int32_t* ids = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* context_len = nullptr;  // [num_seqs]
  const int32_t* query_start = nullptr;  // [num_seqs + 1]
  const int32_t* block_table = nullptr;  // [num_seqs, block_stride]
  int64_t block_stride = 0;              // 0: the shard's max_blocks_per_seq
  const float* rope = nullptr;           // cos/sin table the positions index
  int64_t rope_rows = 0;
  void* attn_workspace = nullptr;        // decode attention scratch (null: the shard's own)
  size_t attn_workspace_bytes = 0;
};

// InvalidArgument unless every id is in [0, vocab) and there is at least one.
void check_tokens(std::span<const int32_t> tokens, int64_t vocab);

// Gives the sequence blocks for `tokens` positions, all or none (OutOfMemory when the pool is full).
void reserve_blocks(GpuSequence::State& seq, int64_t tokens);

// Copies this rank's logits [rows, vocab_rows] (device) into columns [vocab_begin, +vocab_rows)
// of consecutive rows of host logits [.., vocab] starting at out_row.
void copy_logits(Shard& im, const float* device, int64_t rows, float* out_row);

// Embedding through the last layer: buf_a ends as RMSNorm_final(x) of the pass's rows.
void run_layers(Shard& im, const Pass& p);

}  // namespace lowbit::gpu
