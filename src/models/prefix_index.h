// Automatic prefix caching's index (vLLM's): which KV blocks hold which token prefix. A full block
// is named by the chain hash of every token from position 0 to its end, so equal hashes mean the
// same tokens at the same positions, hence the same keys and values; the block's own tokens are
// kept too and compared on lookup, so a hash collision can only ever cost a miss. Blocks nobody
// references any more stay indexed ("parked", least recently released first) until the pool needs
// a fresh block and evicts the oldest. Used by KvBlockPool; internal to src/models.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace lowbit::models {

class PrefixIndex {
 public:
  PrefixIndex(int64_t num_blocks, int64_t block_size);

  // The chain hash of a block holding `tokens` (block_size of them) after the prefix `parent`
  // (kRootHash for the first block).
  static constexpr uint64_t kRootHash = 0x6c6f77626974ULL;
  static uint64_t chain(uint64_t parent, std::span<const int32_t> tokens);

  // The block indexed under `hash` whose tokens are `tokens`; -1 when none.
  int32_t find(uint64_t hash, std::span<const int32_t> tokens) const;
  // Indexes `block` (just filled with `tokens`) under `hash`. False when the hash is already
  // indexed (another block computed the same prefix): the block then stays unindexed.
  bool insert(int32_t block, uint64_t hash, std::span<const int32_t> tokens);
  bool indexed(int32_t block) const { return hash_of_[static_cast<size_t>(block)].has; }

  // An indexed block nobody references: kept for reuse, evicted least recently parked first.
  void park(int32_t block);
  // A parked block taken again (a prefix hit).
  void unpark(int32_t block);
  int64_t parked() const { return static_cast<int64_t>(lru_.size()); }
  // Forgets the least recently parked block and returns it (free for new contents); -1 when none.
  int32_t evict();

 private:
  struct Entry {
    bool has = false;
    uint64_t hash = 0;
    bool parked = false;
    std::list<int32_t>::iterator where;
  };
  int64_t block_size_;
  std::vector<Entry> hash_of_;     // per block
  std::vector<int32_t> tokens_;    // per block: its block_size tokens, while indexed
  std::unordered_map<uint64_t, int32_t> blocks_;  // hash -> block
  std::list<int32_t> lru_;         // parked blocks, oldest first
};

}  // namespace lowbit::models
