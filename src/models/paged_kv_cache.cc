// The block pool of the serving engine's KV cache (paged_kv_cache.h). forward_batch() is in
// batch_decoder.cc.
#include "models/paged_kv_cache.h"

#include <algorithm>
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
    holders_.assign(static_cast<size_t>(num_blocks), 0);
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
    int32_t block = -1;
    if (!free_.empty()) {
      block = free_.back();
      free_.pop_back();
    } else {
      block = prefix_->evict();  // free_blocks() counted the parked ones
    }
    holders_[static_cast<size_t>(block)] = 1;
    seq.blocks.push_back(block);
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
    if (holders_[static_cast<size_t>(block)] < 1) {
      throw InvalidArgument("KV block pool: release of block " + std::to_string(block) +
                            ", which no sequence holds (a sequence released twice?)");
    }
  }
  // Last block first: on the free stack the first block ends on top (reused first); among parked
  // prefix blocks a sequence's tail is evicted before its head, which more requests share.
  for (auto it = seq.blocks.rbegin(); it != seq.blocks.rend(); ++it) {
    if (--holders_[static_cast<size_t>(*it)] > 0) continue;
    if (prefix_ != nullptr && prefix_->indexed(*it)) {
      prefix_->park(*it);
    } else {
      free_.push_back(*it);
    }
  }
  seq.blocks.clear();
  seq.length = 0;
  seq.hashed_blocks = 0;
  seq.chain_hash = PrefixIndex::kRootHash;
}

int64_t KvBlockPool::free_blocks() const {
  return static_cast<int64_t>(free_.size()) + (prefix_ != nullptr ? prefix_->parked() : 0);
}

void KvBlockPool::enable_prefix_caching() {
  if (prefix_ == nullptr) prefix_ = std::make_unique<PrefixIndex>(num_blocks_, block_size_);
}

int64_t KvBlockPool::share_prefix(PagedSequence& seq, std::span<const int32_t> tokens,
                                  int64_t max_tokens) {
  if (prefix_ == nullptr || !seq.blocks.empty()) return 0;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  uint64_t hash = PrefixIndex::kRootHash;
  for (int64_t b = 0; (b + 1) * block_size_ <= limit; ++b) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(b * block_size_),
                                             static_cast<size_t>(block_size_));
    const uint64_t next = PrefixIndex::chain(hash, block_tokens);
    const int32_t block = prefix_->find(next, block_tokens);
    if (block < 0) break;
    prefix_->unpark(block);
    ++holders_[static_cast<size_t>(block)];
    seq.blocks.push_back(block);
    hash = next;
  }
  seq.hashed_blocks = static_cast<int64_t>(seq.blocks.size());
  seq.chain_hash = hash;
  seq.length = seq.hashed_blocks * block_size_;
  return seq.length;
}

void KvBlockPool::index_blocks(PagedSequence& seq, std::span<const int32_t> tokens) {
  if (prefix_ == nullptr) return;
  const int64_t full = std::min<int64_t>(seq.length, static_cast<int64_t>(tokens.size())) / block_size_;
  for (int64_t b = seq.hashed_blocks; b < full; ++b) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(b * block_size_),
                                             static_cast<size_t>(block_size_));
    seq.chain_hash = PrefixIndex::chain(seq.chain_hash, block_tokens);
    prefix_->insert(seq.blocks[static_cast<size_t>(b)], seq.chain_hash, block_tokens);
  }
  seq.hashed_blocks = std::max(seq.hashed_blocks, full);
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
