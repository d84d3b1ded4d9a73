// The serving engine's KV cache: one fixed pool of blocks (block_size token positions each, every
// layer's keys and values), handed out to sequences through per-sequence block tables, as vLLM's
// PagedAttention does. The budget is fixed when the pool is made; a sequence that needs a block
// when none is free is refused (reserve() returns false and changes nothing), so running
// sequences are never corrupted and the scheduler decides who waits.
//
// forward_batch() runs several sequences in one pass: their new tokens are stacked into one
// activation matrix, so every linear layer reads its weights once per step for all of them
// (what makes batching pay on a memory-bound decode), while attention runs per sequence against
// its own blocks. Per row, the arithmetic is exactly Model::forward's (same kernels, same
// summation order): a sequence run in a batch gives bit-identical logits to one run alone, which
// is what makes the server's greedy output equal `lowbit generate`'s. That needs each matmul call
// to run every row on the path Model::forward's call for that row's sequence would have taken;
// forward_batch() arranges its calls so (see BatchOptions).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lowbit/tensor.h"
#include "models/model.h"
#include "models/prefix_index.h"

namespace lowbit::models {

// One sequence's view of the pool: which blocks hold its positions, and how many are filled.
struct PagedSequence {
  std::vector<int32_t> blocks;  // block ids; position p lives in blocks[p / block_size]
  int64_t length = 0;           // positions cached (the next token's position)
  // Prefix caching's bookkeeping (KvBlockPool::share_prefix / index_blocks): how many leading
  // full blocks have their chain hash computed, and the last one's hash.
  int64_t hashed_blocks = 0;
  uint64_t chain_hash = PrefixIndex::kRootHash;
};

class KvBlockPool {
 public:
  // Allocates num_blocks blocks now (throws OutOfMemory naming the size when it cannot).
  // block_size >= 1. Storage per layer: fp32, or one fp8 byte per value for the layers the
  // model's KV cache quantizes (--kv-cache-dtype fp8: the codes, decoded with the quantizer's
  // scales, are the values Model::forward's cache holds, in a quarter of the memory).
  // with_storage false: block accounting only (a BatchRunner below keeps the keys and values, on
  // its device); keys() / values() / key_codes() / value_codes() must not be called then.
  KvBlockPool(const Model& model, int64_t num_blocks, int64_t block_size = 16,
              bool with_storage = true);

  // Bytes one block takes: block_size * 2 * kv_heads * head_dim values per layer, 4 bytes each
  // (1 in fp8 layers).
  static int64_t bytes_per_block(const Model& model, int64_t block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t free_blocks() const;  // never used, released, or parked prefix blocks
  int64_t used_blocks() const { return num_blocks_ - free_blocks(); }
  // Blocks a sequence of `tokens` positions needs.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Grows seq.blocks so that it can hold `tokens` positions. False (seq unchanged) when the pool
  // has too few free blocks (free_blocks() counts parked prefix blocks, which are evicted, oldest
  // first, only when no never-used or released unindexed block is left).
  bool reserve(PagedSequence& seq, int64_t tokens);
  // Drops seq's hold on its blocks; seq becomes empty. A block nobody else holds returns to the
  // pool, or, when it is an indexed prefix block, stays parked for reuse until evicted.
  // InvalidArgument (nothing changed) for a block outside the pool or not held.
  void release(PagedSequence& seq);

  // Automatic prefix caching (vLLM's --enable-prefix-caching), off until enabled. Then:
  // share_prefix() gives an empty sequence the cached blocks holding the longest run of full
  // blocks at the start of `tokens` (at most max_tokens positions' worth) and sets its length to
  // their positions, so only the rest is computed; index_blocks() records the full blocks a
  // sequence has written (positions < seq.length, whose tokens are tokens[0 .. seq.length)) for
  // later sequences. Blocks shared by several sequences are only ever read: a sequence writes
  // only positions past its shared prefix, which lie in blocks of its own.
  void enable_prefix_caching();
  bool prefix_caching() const { return prefix_ != nullptr; }
  int64_t share_prefix(PagedSequence& seq, std::span<const int32_t> tokens, int64_t max_tokens);
  void index_blocks(PagedSequence& seq, std::span<const int32_t> tokens);

  // Whether `layer` stores fp8 codes (key_codes / value_codes) rather than fp32 (keys / values).
  bool fp8(int layer) const { return fp8_[static_cast<size_t>(layer)]; }
  // Raw storage of one block of one layer: [block_size, kv_heads * head_dim] keys / values.
  // Internal error when the layer stores the other type.
  float* keys(int layer, int32_t block);
  float* values(int layer, int32_t block);
  const float* keys(int layer, int32_t block) const;
  const float* values(int layer, int32_t block) const;
  uint8_t* key_codes(int layer, int32_t block);
  uint8_t* value_codes(int layer, int32_t block);
  const uint8_t* key_codes(int layer, int32_t block) const;
  const uint8_t* value_codes(int layer, int32_t block) const;
  int64_t row_size() const { return row_size_; }
  int num_layers() const { return layers_; }

 private:
  // Element offset of (layer, block) in its layer's type of storage.
  size_t offset(int layer, int32_t block, bool want_fp8) const;

  int layers_ = 0;
  int64_t num_blocks_ = 0, block_size_ = 0, row_size_ = 0;
  std::vector<bool> fp8_;             // per layer
  std::vector<int64_t> slot_;         // per layer: its index among the layers of its type
  std::vector<float> keys_, values_;  // [fp32 layers, num_blocks, block_size, row_size]
  std::vector<uint8_t> key_codes_, value_codes_;  // [fp8 layers, num_blocks, block_size, row_size]
  std::vector<int32_t> free_;         // free block ids (a stack)
  std::vector<int32_t> holders_;      // per block: sequences holding it
  std::unique_ptr<PrefixIndex> prefix_;  // null: prefix caching off
};

// One sequence's part of a batched step.
struct BatchEntry {
  std::span<const int32_t> tokens;  // new tokens, at positions seq->length ...
  PagedSequence* seq = nullptr;     // must already hold seq->length + tokens.size() positions
  bool all_logits = false;          // logits of every new token (prompt logprobs), else the last
  // The caller samples greedily from the last row and wants no logprobs: a runner may return
  // that row's argmax instead (an I32 tensor [1], the lowest id on a tie) and keep the logits on
  // its device. Runners that ignore this return the logits as usual.
  bool argmax_only = false;
};

// How forward_batch() groups the batch's rows into matmul calls.
struct BatchOptions {
  // true: bit-identical to Model::forward. A matmul kernel computes each row of its output from
  // that row alone, but picks its path (streaming or register-blocked, whose summation orders
  // differ) by the call's row count. So rows of sequences with few new tokens (decode steps,
  // short prompts) share calls of at most the streaming path's row limit (64 with AVX-512, 32
  // with AVX2, 4 portable), and a sequence with more new tokens than that gets calls of its own,
  // as alone. A model with any linear layer run by a quantization method (opaque: it may quantize
  // inputs with one scale per call, as fp8_per_tensor does) or with dynamic per-tensor input
  // quantization takes no shared calls at all: each sequence's rows run alone, and batching
  // saves nothing on its matmuls.
  // false: every layer runs all the step's rows in one call (fastest for quantized models and
  // mixed prefill; logits may then differ from Model::forward's in the last bits, as they do
  // between batch sizes on a GPU). For dense models, decode steps of up to the streaming limit
  // of sequences run the same calls either way.
  bool exact = true;
};

// Runs every entry's new tokens, writes their keys and values into the pool, advances each
// seq->length, and returns per entry fp32 logits [n, vocab] (all_logits) or [1, vocab]. Throws
// InvalidArgument (nothing changed) for an empty batch, an entry without tokens or without a
// sequence, a sequence twice in the batch, ids outside the vocabulary, a sequence whose blocks
// cannot hold its new tokens or whose table names a block outside the pool, or a pool made for
// another model. Entries of more than 512 new tokens run in the 512-token chunks Model::forward
// uses, each chunk attending to the previous ones. RoPE frequencies come from each entry's own
// total length (past + new tokens), as Model::forward chooses them per call. With
// --calculate-kv-scales, one entry's rows fix each layer's scales on the first call (the first
// entry with few new tokens, else the first entry), as the first Model::forward call's rows do.
// Threads: OpenMP inside; call from one thread at a time per pool (each thread has its own
// scratch).
std::vector<Tensor> forward_batch(const Model& model, std::span<const BatchEntry> batch,
                                  KvBlockPool& pool, const BatchOptions& options = {});

// What runs a batched step when the model is not on the CPU (the GPU backend implements it): the
// same contract as forward_batch (logits per entry; each entry's seq->length advanced by its
// tokens), with its own KV storage; the caller's KvBlockPool (without storage) keeps the block
// accounting, so seq->blocks is not read. A sequence absent from a step may have been released:
// the runner may drop what it holds for it, and a sequence whose length went down (preempted,
// then readmitted) is recomputed from that length.
class BatchRunner {
 public:
  virtual ~BatchRunner() = default;
  virtual std::vector<Tensor> run(std::span<const BatchEntry> batch) = 0;
  virtual int64_t capacity_tokens() const = 0;  // KV positions its storage holds
  virtual std::string describe() const = 0;     // e.g. "cuda: 2 x NVIDIA H200, ..."
};

}  // namespace lowbit::models
