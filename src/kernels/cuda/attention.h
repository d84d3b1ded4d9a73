// Attention on the GPU over a paged KV cache (vLLM's PagedAttention layout), BF16 or FP8 E4M3.
//
// The cache of one layer is a pool of blocks: cache position j of a sequence lives at row
// j % block_size of block table[j / block_size], and a block holds block_size rows of
// [kv_heads, head_dim] keys (and, in the other pool, values): element (block b, row r, head h,
// dim d) sits at ((b * block_size + r) * kv_heads + h) * head_dim + d. This is the layout of the CPU
// reference kernels::attention_paged (KvPages), so results compare position for position.
//
// FP8 E4M3 caches store x → e4m3(clamp(x / s, ±448)) with s = k_scale / v_scale per tensor or per
// KV head, exactly KvCacheQuantizer's rounding (models/kv_cache_quant.h); attention reads back
// code · s. Scales live on the device (fp32), so a CUDA graph keeps working when they change.
//
// Three entry points:
// - write_kv_paged: the new tokens' keys and values into their cache slots (vLLM's
//   reshape_and_cache).
// - decode_attention: one query per sequence (the next token), a batch of sequences with different
//   context lengths. One CTA per (sequence, KV head, context split) handles the whole GQA group, so
//   each cached row is read once; long contexts are split over CTAs and merged by a second small
//   kernel (flash-decoding) so that small batches still fill the GPU.
// - prefill_attention: many queries per sequence (causal, GQA, optional sliding window), a
//   flash-attention-2 style kernel on mma.sync tensor cores, reading K/V through the block table, so
//   chunked prefill with a past works (the queries sit at the last positions of the context).
// Scores are q·k · scale accumulated in fp32; the softmax is online in fp32; probabilities enter
// the P·V product as bf16 (the usual flash-attention rounding); outputs are bf16.
//
// Kernels take device pointers and a stream; they never allocate or synchronize. Argument errors
// (checked on the host, before any launch) throw InvalidArgument / Unsupported naming the field.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"

namespace lowbit::kernels::cuda {

enum class KvCacheDtype : uint8_t {
  BF16,
  FP8_E4M3,  // OCP e4m3 ("fn"), max 448
};

// One layer's paged cache on the device.
struct PagedKvCache {
  void* k_blocks = nullptr;  // [num_blocks, block_size, kv_heads, head_dim] of dtype, 16-byte aligned
  void* v_blocks = nullptr;
  KvCacheDtype dtype = KvCacheDtype::BF16;
  int block_size = 16;  // >= 1 (any value; powers of two are not required)
  int kv_heads = 0;
  int head_dim = 0;  // 64 or 128
  // FP8 only: device fp32 scales, scale_count of each: 1 (per tensor) or kv_heads (per KV head).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int scale_count = 1;
};

// Bytes one block of the K pool (or of the V pool) takes.
size_t kv_cache_block_bytes(const PagedKvCache& cache);

// Writes `tokens` rows of new keys and values into the cache: row t goes to slot slot_mapping[t]
// (= block * block_size + row); a negative slot skips the row (padding, as in vLLM). k and v are
// bf16 [tokens, kv_heads * head_dim] with rows k_stride / v_stride elements apart (0: dense), so
// they may be column slices of a fused QKV output; base pointers and strides must be 16-byte
// aligned. FP8 rounds to nearest even after clamping to ±448 (never NaN for finite input).
void write_kv_paged(const __nv_bfloat16* k, int64_t k_stride, const __nv_bfloat16* v,
                    int64_t v_stride, const int32_t* slot_mapping, int64_t tokens,
                    const PagedKvCache& cache, cudaStream_t stream);

// The sequences of one attention call. Device arrays unless said otherwise.
struct PagedBatch {
  int num_seqs = 0;
  // Positions cached for each sequence, including this step's new tokens (which must already be
  // written): the queries of sequence s sit at positions context_lens[s] - n_s .. context_lens[s]-1.
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] block ids
  int max_blocks_per_seq = 0;
  int max_context_len = 0;  // host: >= every context_lens[s] (sizes the decode split grid)
  // Prefill only: sequence s's queries are rows query_start[s] .. query_start[s+1]-1 of q and out
  // ([num_seqs + 1] prefix sums, query_start[0] = 0), n_s = query_start[s+1] - query_start[s].
  const int32_t* query_start = nullptr;
  int max_query_len = 0;  // host: >= every n_s (sizes the prefill grid)
};

// shape gives heads, kv_heads, head_dim (64 or 128; others throw Unsupported naming it), window
// (0 = unlimited; else key j is visible to query position p iff p - window < j <= p) and scale
// (usually 1/sqrt(head_dim)). shape.queries and shape.past are not used: they come per sequence
// from the batch. q is bf16 [rows, heads * head_dim] with rows q_stride elements apart (0: dense;
// 16-byte aligned); out is dense bf16 [rows, heads * head_dim].

// Scratch decode_attention needs for this batch shape (0 when no context is split). Depends on the
// current device's multiprocessor count, like the split choice itself.
size_t decode_attention_workspace_bytes(const AttentionShape& shape, int num_seqs,
                                        int max_context_len);

// One query per sequence: q row s and out row s belong to sequence s (n_s = 1, so the query sits
// at position context_lens[s] - 1). A sequence with context length 0 gets zeros.
void decode_attention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& cache,
                      const PagedBatch& batch, const AttentionShape& shape, __nv_bfloat16* out,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Any number of queries per sequence (batch.query_start); also correct for n_s = 1, but
// decode_attention is the fast path there.
void prefill_attention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& cache,
                       const PagedBatch& batch, const AttentionShape& shape, __nv_bfloat16* out,
                       cudaStream_t stream);

}  // namespace lowbit::kernels::cuda
