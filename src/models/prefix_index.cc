// PrefixIndex (prefix_index.h).
#include "models/prefix_index.h"

#include <algorithm>

namespace lowbit::models {

namespace {

// splitmix64's finalizer: every input bit affects every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

PrefixIndex::PrefixIndex(int64_t num_blocks, int64_t block_size)
    : block_size_(block_size),
      hash_of_(static_cast<size_t>(num_blocks)),
      tokens_(static_cast<size_t>(num_blocks * block_size)) {}

uint64_t PrefixIndex::chain(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ULL);
  for (const int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

int32_t PrefixIndex::find(uint64_t hash, std::span<const int32_t> tokens) const {
  const auto it = blocks_.find(hash);
  if (it == blocks_.end()) return -1;
  const int32_t block = it->second;
  const auto held = tokens_.begin() + block * block_size_;
  return std::equal(tokens.begin(), tokens.end(), held) ? block : -1;
}

bool PrefixIndex::insert(int32_t block, uint64_t hash, std::span<const int32_t> tokens) {
  Entry& e = hash_of_[static_cast<size_t>(block)];
  if (e.has || !blocks_.emplace(hash, block).second) return false;
  e.has = true;
  e.hash = hash;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + block * block_size_);
  return true;
}

void PrefixIndex::park(int32_t block) {
  Entry& e = hash_of_[static_cast<size_t>(block)];
  if (!e.has || e.parked) return;
  e.where = lru_.insert(lru_.end(), block);
  e.parked = true;
}

void PrefixIndex::unpark(int32_t block) {
  Entry& e = hash_of_[static_cast<size_t>(block)];
  if (!e.parked) return;
  lru_.erase(e.where);
  e.parked = false;
}

int32_t PrefixIndex::evict() {
  if (lru_.empty()) return -1;
  const int32_t block = lru_.front();
  lru_.pop_front();
  Entry& e = hash_of_[static_cast<size_t>(block)];
  blocks_.erase(e.hash);
  e = Entry{};
  return block;
}

}  // namespace lowbit::models
