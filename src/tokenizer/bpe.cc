#include "tokenizer/bpe.h"

#include <queue>

#include "lowbit/error.h"
#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {
namespace {

constexpr uint64_t kNoKey = ~uint64_t{0};  // ids are non-negative, so no pair packs to this

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Fibonacci hashing: the top bits of the product mix all bits of both ids.
size_t slot_of(uint64_t key, uint64_t mask) {
  const uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>((h ^ (h >> 29)) >> 20) & mask;
}

std::string byte_token(unsigned b) {
  static const char* kHex = "0123456789ABCDEF";
  return std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
}

}  // namespace

BpeModel::BpeModel(const Json& model, const JsonPath& at) {
  require_object(model, at);
  if (const Json* type = find_field(model, "type")) {
    const std::string t = as_string(*type, at / "type");
    if (t != "BPE") {
      at.unsupported("model type '" + t + "' is not supported (lowbit implements BPE)");
    }
  }
  if (const Json* dropout = find_field(model, "dropout")) {
    if (!dropout->is_number()) (at / "dropout").fail("expected a number, got " + json_type_name(*dropout));
    const double p = dropout->get<double>();
    if (!(p >= 0.0 && p <= 1.0)) (at / "dropout").fail("must be within [0, 1]");
    if (p != 0.0) (at / "dropout").unsupported("BPE dropout (random merges) is not supported");
  }
  continuing_subword_prefix_ = get_optional_string(model, "continuing_subword_prefix", at).value_or("");
  end_of_word_suffix_ = get_optional_string(model, "end_of_word_suffix", at).value_or("");
  fuse_unk_ = get_bool(model, "fuse_unk", at, false);
  byte_fallback_ = get_bool(model, "byte_fallback", at, false);
  ignore_merges_ = get_bool(model, "ignore_merges", at, false);

  load_vocab(get_field(model, "vocab", at), at / "vocab");
  load_merges(get_field(model, "merges", at), at / "merges");

  if (auto unk = get_optional_string(model, "unk_token", at)) {
    auto id = token_to_id(*unk);
    if (!id) (at / "unk_token").fail("'" + *unk + "' is not in model.vocab");
    unk_id_ = *id;
  }
  for (unsigned b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(byte_token(b)).value_or(-1);
}

void BpeModel::load_vocab(const Json& vocab, const JsonPath& at) {
  require_object(vocab, at);
  const int64_t n = static_cast<int64_t>(vocab.size());
  vocab_.reserve(vocab.size());
  vocab_r_.assign(vocab.size(), nullptr);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    // Ids must be 0..n-1: tokenizers gives added tokens the ids from n up, so a gap or an id
    // past the end would collide with them.
    const JsonPath entry = at.quoted(it.key());
    if (!it->is_number_integer()) entry.fail("expected an integer id, got " + json_type_name(*it));
    const int64_t id = as_int(*it, entry, 0, INT32_MAX);
    if (id >= n) entry.fail("id " + std::to_string(id) + " is out of range [0, " + std::to_string(n) + ")");
    auto [pos, inserted] = vocab_.emplace(it.key(), static_cast<int32_t>(id));
    if (vocab_r_[id] != nullptr) {
      entry.fail("id " + std::to_string(id) + " is also the id of '" + *vocab_r_[id] + "'");
    }
    vocab_r_[id] = &pos->first;
  }
}

void BpeModel::load_merges(const Json& merges, const JsonPath& at) {
  require_array(merges, at);
  std::unordered_map<uint64_t, MergeValue> table;
  table.reserve(merges.size());
  int32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    const JsonPath mat = at[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;  // merges.txt header kept in the list
      std::vector<std::string> parts;
      size_t start = 0;
      for (size_t pos; (pos = line.find(' ', start)) != std::string::npos; start = pos + 1) {
        parts.push_back(line.substr(start, pos - start));
      }
      parts.push_back(line.substr(start));
      if (parts.size() != 2) mat.fail("expected 2 parts, got " + std::to_string(parts.size()));
      a = std::move(parts[0]);
      b = std::move(parts[1]);
    } else if (m.is_array()) {
      if (m.size() != 2) mat.fail("expected 2 parts, got " + std::to_string(m.size()));
      a = as_string(m[0], mat[0]);
      b = as_string(m[1], mat[1]);
    } else {
      mat.fail("expected a string \"a b\" or a pair [\"a\", \"b\"], got " + json_type_name(m));
    }
    const auto a_id = token_to_id(a);
    if (!a_id) mat.fail("'" + a + "' is not in model.vocab");
    const auto b_id = token_to_id(b);
    if (!b_id) mat.fail("'" + b + "' is not in model.vocab");
    // The merged token drops the continuing-subword prefix of b (its first bytes, unchecked).
    const size_t prefix_len = continuing_subword_prefix_.size();
    if (b.size() < prefix_len) mat.fail("'" + b + "' is shorter than continuing_subword_prefix");
    const std::string merged = a + b.substr(prefix_len);
    const auto new_id = token_to_id(merged);
    if (!new_id) mat.fail("merged token '" + merged + "' is not in model.vocab");
    // A repeated pair keeps its last rank, as tokenizers' HashMap collect does.
    table.insert_or_assign(pair_key(*a_id, *b_id), MergeValue{rank, *new_id});
    rank_new_id_.push_back(*new_id);
    ++rank;
  }
  build_merge_table(table);
}

void BpeModel::build_merge_table(const std::unordered_map<uint64_t, MergeValue>& merges) {
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity *= 2;
  merge_mask_ = capacity - 1;
  merge_keys_.assign(capacity, kNoKey);
  merge_values_.assign(capacity, MergeValue{0, 0});
  for (const auto& [key, value] : merges) {
    size_t slot = slot_of(key, merge_mask_);
    while (merge_keys_[slot] != kNoKey) slot = (slot + 1) & merge_mask_;
    merge_keys_[slot] = key;
    merge_values_[slot] = value;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_r_.size()) return nullptr;
  return vocab_r_[id];
}

const BpeModel::MergeValue* BpeModel::find_merge(int32_t a, int32_t b) const {
  const uint64_t key = pair_key(a, b);
  for (size_t slot = slot_of(key, merge_mask_);; slot = (slot + 1) & merge_mask_) {
    if (merge_keys_[slot] == key) return &merge_values_[slot];
    if (merge_keys_[slot] == kNoKey) return nullptr;
  }
}

// tokenizers' BPE::merge_word: one symbol per char (with prefix/suffix), byte fallback, unk.
std::vector<BpeModel::Symbol> BpeModel::initial_symbols(std::string_view word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id, size_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, static_cast<uint32_t>(len)});
  };
  int32_t pending_unk = -1;  // an unk symbol not emitted yet (fuse_unk grows it)
  size_t pending_unk_len = 0;
  std::string s;
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    i += utf8_len(static_cast<unsigned char>(word[i]));
    const size_t byte_len = i - start;
    s.clear();
    if (start != 0) s += continuing_subword_prefix_;
    s.append(word.substr(start, byte_len));
    if (i >= word.size()) s += end_of_word_suffix_;

    if (auto id = token_to_id(s)) {
      if (pending_unk >= 0) add(pending_unk, pending_unk_len);
      pending_unk = -1;
      add(*id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      // Every byte of s (prefix and suffix included) must exist as <0xXX>. A pending unk is
      // not flushed first, exactly as in tokenizers.
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : s) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && fuse_unk_) {
        pending_unk_len += byte_len;
      } else {
        if (pending_unk >= 0) add(pending_unk, pending_unk_len);
        pending_unk = *unk_id_;
        pending_unk_len = byte_len;
      }
    }
    // No unk and no fallback: the char is dropped.
  }
  if (pending_unk >= 0) add(pending_unk, pending_unk_len);
  return symbols;
}

// tokenizers' Word::merge_all: repeatedly merge the lowest-rank pair (leftmost on ties), using a
// min-heap with lazy deletion of stale entries. An entry packs (rank, position) into one key,
// which orders exactly as tokenizers' (rank, pos) comparison; the rank gives the merge's new id.
void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  auto entry = [](int32_t rank, int32_t pos) {
    return (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos);
  };
  std::vector<uint64_t> init;
  init.reserve(symbols.size());
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const MergeValue* m = find_merge(symbols[k].id, symbols[k + 1].id)) {
      init.push_back(entry(m->rank, static_cast<int32_t>(k)));
    }
  }
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> queue(std::greater<>{},
                                                                              std::move(init));
  while (!queue.empty()) {
    const uint64_t top = queue.top();
    queue.pop();
    const auto top_pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    const int32_t top_new_id = rank_new_id_[top >> 32];
    Symbol& left = symbols[top_pos];
    if (left.len == 0 || left.next == -1) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    const MergeValue* current = find_merge(left.id, right.id);
    if (current == nullptr || current->new_id != top_new_id) continue;  // stale entry

    left.id = top_new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[right_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top_pos;

    if (left.prev >= 0) {
      if (const MergeValue* m = find_merge(symbols[left.prev].id, left.id)) {
        queue.push(entry(m->rank, left.prev));
      }
    }
    if (left.next >= 0) {
      if (const MergeValue* m = find_merge(left.id, symbols[left.next].id)) {
        queue.push(entry(m->rank, top_pos));
      }
    }
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<Symbol> symbols = initial_symbols(word);
  merge_all(symbols);
  const size_t first = out.size();
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
    }
  }
}

}  // namespace lowbit::tokenizer
