// Added tokens (tokenizers/src/tokenizer/added_vocabulary.rs): their ids, and their extraction from
// the text before the normalizer and the model see it, leftmost-longest, honouring single_word,
// lstrip and rstrip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/json_util.h"
#include "tokenizer/piece.h"

namespace lowbit::tokenizer {

class Normalizer;

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  // Adds the `added_tokens` array in order, giving ids as tokenizers' add_tokens does: a content
  // already in the model vocab (or added before) keeps that id, others get the next free id after
  // the model vocab. Tokens with normalized=true are matched by their normalized form.
  void load(const Json& added_tokens, const JsonPath& at, const BpeModel& model,
            const Normalizer* normalizer);

  std::optional<int32_t> token_to_id(std::string_view content) const;
  // The string an added id decodes to (its normalized form for normalized tokens), or nullptr.
  const std::string* id_to_token(int32_t id) const;
  bool is_special_content(std::string_view s) const;
  bool is_special_id(int32_t id) const;
  // Contents that are also in the model vocab are counted once (tokenizers' get_vocab_size).
  size_t count_not_in(const BpeModel& model) const;

  // Extraction pass 1 (normalized=false tokens, on raw text) or 2 (normalized=true tokens, on
  // normalized text): replaces each text piece by the pieces around and between the matches.
  void extract(std::vector<Piece>& pieces, bool normalized_pass) const;

 private:
  // A byte trie over token contents; each node may end a token.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token_id = -1;
    };
    std::vector<Node> nodes{Node{}};
    void insert(std::string_view key, int32_t id);
    // Longest token starting at text[pos]: (id, length) or (-1, 0).
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
    bool empty() const { return nodes.size() == 1; }
  };

  struct Split {
    size_t start;
    size_t end;
    int32_t id;  // -1 for text
  };
  std::vector<Split> find_matches(std::string_view sentence, const Trie& trie) const;
  void rebuild_tries(const JsonPath& at);

  StringIdMap by_content_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_map<int32_t, std::string> normalized_form_;
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace lowbit::tokenizer
