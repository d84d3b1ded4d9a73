// The BPE model of tokenizer.json (tokenizers/src/models/bpe): vocab, ranked merges, unk and
// byte fallback, and the heap-based merge loop, with a word cache.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_util.h"

namespace lowbit::tokenizer {

// Hash that lets unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Parses the `model` object; `at` names it in errors. Throws InvalidArgument for malformed
  // content (merge arity, tokens missing from the vocab, bad or duplicate ids) and Unsupported for
  // other model types or dropout.
  BpeModel(const Json& model, const JsonPath& at);

  // Appends the ids of one pre-token (tokenizers' BPE::tokenize). Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr for ids the vocab does not have.
  const std::string* id_to_token(int32_t id) const;
  size_t vocab_size() const { return vocab_.size(); }

 private:
  struct MergeValue {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };

  void load_vocab(const Json& vocab, const JsonPath& at);
  void load_merges(const Json& merges, const JsonPath& at);
  void build_merge_table(const std::unordered_map<uint64_t, MergeValue>& merges);
  std::vector<Symbol> initial_symbols(std::string_view word) const;
  void merge_all(std::vector<Symbol>& symbols) const;
  const MergeValue* find_merge(int32_t a, int32_t b) const;

  StringIdMap vocab_;
  std::vector<const std::string*> vocab_r_;  // id -> key in vocab_
  // (id(a), id(b)) -> (rank, id(a+b)) in an open-addressing table: the merge loop's hot lookup.
  std::vector<uint64_t> merge_keys_;  // kNoKey marks an empty slot
  std::vector<MergeValue> merge_values_;
  uint64_t merge_mask_ = 0;
  std::vector<int32_t> rank_new_id_;  // new id of the merge at each rank
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // id of "<0xXX>" or -1

  // Words seen before, as tokenizers' cache does (it changes nothing but speed). Bounded.
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>
      cache_;
};

}  // namespace lowbit::tokenizer
