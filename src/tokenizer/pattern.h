// Splitting machinery of HF tokenizers (tokenizer/pattern.rs, normalizer.rs::split): a pattern
// (Oniguruma regex, literal string or char predicate) turns a string into (span, is_match)
// pieces covering it, and a SplitBehavior turns those into the spans to keep.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit::tokenizer {

struct Span {
  size_t start;
  size_t end;
  bool is_match;
};

// A compiled Oniguruma regex (UTF-8, default syntax and options: what the Rust `onig` crate's
// Regex::new uses). Immutable after construction, so one instance may be searched from several
// threads at once (each search has its own region).
class Regex {
 public:
  // Throws InvalidArgument "<where>: invalid regex ...: <onig message>" when it does not compile.
  Regex(std::string_view pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // A pattern matching `literal` exactly (tokenizers compiles String patterns this way).
  static std::unique_ptr<Regex> literal(std::string_view literal, const std::string& where);

  // Non-overlapping matches, as the onig crate's find_iter yields them (including its rule for
  // empty matches right after a non-empty one).
  std::vector<std::pair<size_t, size_t>> find_iter(std::string_view text) const;

  // (span, is_match) pieces covering all of text; one (0,0,false) piece for empty text.
  std::vector<Span> find_matches(std::string_view text) const;

 private:
  void* regex_ = nullptr;  // regex_t*, kept opaque so that oniguruma.h stays out of headers
};

using CharPredicate = std::function<bool(char32_t)>;

// Each char satisfying the predicate is its own match (tokenizers' `impl Pattern for Fn(char)`).
std::vector<Span> find_char_matches(std::string_view text, const CharPredicate& pred);

enum class SplitBehavior { REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS };

// Spans to keep after applying the behavior (may include empty ones; callers drop those).
std::vector<std::pair<size_t, size_t>> apply_split_behavior(std::vector<Span> matches,
                                                            SplitBehavior behavior);

}  // namespace lowbit::tokenizer
