// The block pool of the serving engine's KV cache (paged_kv_cache.h). forward_batch() is in
// batch_decoder.cc.
#include "models/paged_kv_cache.h"

#include <cstdio>
#include <limits>
#include <new>
#include <string>

#include "lowbit/error.h"
#include "models/kv_cache_quant.h"

namespace lowbit::models {

namespace {

// Elements of one of the two arrays (keys or values) of `layers` layers; throws OutOfMemory naming
// the bytes when the product does not even fit in memory's address range.
size_t pool_elements(int layers, int64_t num_blocks, int64_t block_size, int64_t row_size,
                     size_t element_bytes) {
  const long double elements =
      static_cast<long double>(layers) * static_cast<long double>(num_blocks) *
      static_cast<long double>(block_size) * static_cast<long double>(row_size);
  const long double limit =
      static_cast<long double>(std::numeric_limits<std::ptrdiff_t>::max() / element_bytes);
  if (elements > limit) {
    char bytes[64];
    std::snprintf(bytes, sizeof bytes, "%.0Lf", 2.0L * elements * element_bytes);
    throw OutOfMemory("KV block pool: " + std::to_string(num_blocks) + " blocks of " +
                      std::to_string(block_size) + " tokens need " + bytes + " bytes");
  }
  return static_cast<size_t>(elements);
}

bool layer_fp8(const Model& model, int layer) {
  const KvCacheQuantizer* q = model.kv_cache_quantizer();
  return q != nullptr && q->quantizes(layer);
}

}  // namespace

KvBlockPool::KvBlockPool(const Model& model, int64_t num_blocks, int64_t block_size,
                         bool with_storage)
    : layers_(static_cast<int>(model.config().num_layers)),
      num_blocks_(num_blocks),
      block_size_(block_size),
      row_size_(model.config().num_kv_heads * model.config().head_dim) {
  if (block_size < 1) {
    throw InvalidArgument("KV block pool: block_size must be >= 1, got " +
                          std::to_string(block_size));
  }
  // Block ids are int32 in the tables (as vLLM's block tables are).
  if (num_blocks < 1 || num_blocks > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgument("KV block pool: num_blocks must be in [1, 2^31), got " +
                          std::to_string(num_blocks));
  }
  int fp8_layers = 0, fp32_layers = 0;
  for (int l = 0; l < layers_; ++l) {
    const bool f = layer_fp8(model, l);
    fp8_.push_back(f);
    slot_.push_back(f ? fp8_layers++ : fp32_layers++);
  }
  const size_t floats =
      with_storage ? pool_elements(fp32_layers, num_blocks, block_size, row_size_, sizeof(float)) : 0;
  const size_t codes =
      with_storage ? pool_elements(fp8_layers, num_blocks, block_size, row_size_, 1) : 0;
  try {
    keys_.resize(floats);
    values_.resize(floats);
    key_codes_.resize(codes);
    value_codes_.resize(codes);
    free_.resize(static_cast<size_t>(num_blocks));
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("KV block pool: cannot allocate " + std::to_string(num_blocks) +
                      " blocks of " + std::to_string(block_size) + " tokens (" +
                      std::to_string(2 * (floats * sizeof(float) + codes)) + " bytes)");
  }
  // A stack popped from the back: block 0 is handed out first, freed blocks are reused first
  // (they are the most likely to still be in cache).
  for (int64_t i = 0; i < num_blocks; ++i) {
    free_[static_cast<size_t>(i)] = static_cast<int32_t>(num_blocks - 1 - i);
  }
}

int64_t KvBlockPool::bytes_per_block(const Model& model, int64_t block_size) {
  const ModelConfig& c = model.config();
  int64_t bytes = 0;
  for (int l = 0; l < static_cast<int>(c.num_layers); ++l) {
    const int64_t element = layer_fp8(model, l) ? 1 : static_cast<int64_t>(sizeof(float));
    bytes += block_size * 2 * c.num_kv_heads * c.head_dim * element;
  }
  return bytes;
}

bool KvBlockPool::reserve(PagedSequence& seq, int64_t tokens) {
  const int64_t have = static_cast<int64_t>(seq.blocks.size());
  const int64_t need = blocks_for(tokens) - have;
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  seq.blocks.reserve(static_cast<size_t>(have + need));  // may throw: nothing taken yet
  for (int64_t i = 0; i < need; ++i) {
    seq.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvBlockPool::release(PagedSequence& seq) {
  for (const int32_t block : seq.blocks) {
    if (block < 0 || block >= num_blocks_) {
      throw InvalidArgument("KV block pool: release of block " + std::to_string(block) +
                            ", which is not in this pool of " + std::to_string(num_blocks_) +
                            " blocks");
    }
  }
  if (free_.size() + seq.blocks.size() > static_cast<size_t>(num_blocks_)) {
    throw InvalidArgument("KV block pool: release of " + std::to_string(seq.blocks.size()) +
                          " blocks would exceed the pool (a sequence released twice?)");
  }
  // Last taken, first reused: the stack gives the blocks back out in the order they were held.
  free_.insert(free_.end(), seq.blocks.rbegin(), seq.blocks.rend());
  seq.blocks.clear();
  seq.length = 0;
}

size_t KvBlockPool::offset(int layer, int32_t block, bool want_fp8) const {
  LOWBIT_CHECK_AS(Internal, layer >= 0 && layer < layers_ && fp8(layer) == want_fp8,
                  "KV block pool: layer " + std::to_string(layer) + " does not store " +
                      (want_fp8 ? "fp8 codes" : "fp32 values"));
  return static_cast<size_t>(((slot_[static_cast<size_t>(layer)] * num_blocks_ + block) *
                              block_size_) * row_size_);
}

float* KvBlockPool::keys(int layer, int32_t block) { return keys_.data() + offset(layer, block, false); }
float* KvBlockPool::values(int layer, int32_t block) { return values_.data() + offset(layer, block, false); }
const float* KvBlockPool::keys(int layer, int32_t block) const {
  return keys_.data() + offset(layer, block, false);
}
const float* KvBlockPool::values(int layer, int32_t block) const {
  return values_.data() + offset(layer, block, false);
}
uint8_t* KvBlockPool::key_codes(int layer, int32_t block) {
  return key_codes_.data() + offset(layer, block, true);
}
uint8_t* KvBlockPool::value_codes(int layer, int32_t block) {
  return value_codes_.data() + offset(layer, block, true);
}
const uint8_t* KvBlockPool::key_codes(int layer, int32_t block) const {
  return key_codes_.data() + offset(layer, block, true);
}
const uint8_t* KvBlockPool::value_codes(int layer, int32_t block) const {
  return value_codes_.data() + offset(layer, block, true);
}

}  // namespace lowbit::models
