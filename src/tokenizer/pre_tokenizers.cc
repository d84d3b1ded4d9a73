#include "tokenizer/pre_tokenizers.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {
namespace {

// Applies fn(piece, out) to every text piece (fn appends the pieces that replace it); added
// tokens are kept as they are. Empty pieces are dropped, as PreTokenizedString::split does.
template <typename Fn>
void split_each(std::vector<Piece>& pieces, Fn fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& p : pieces) {
    if (p.is_token()) {
      out.push_back(std::move(p));
    } else {
      fn(p, out);
    }
  }
  pieces = std::move(out);
}

SplitBehavior parse_behavior(const Json& obj, const JsonPath& at, const SplitBehavior* def) {
  const Json* v = find_field(obj, "behavior");
  if (v == nullptr) {
    if (def == nullptr) (at / "behavior").fail("missing");
    return *def;
  }
  const std::string s = as_string(*v, at / "behavior");
  if (s == "Removed") return SplitBehavior::REMOVED;
  if (s == "Isolated") return SplitBehavior::ISOLATED;
  if (s == "MergedWithPrevious") return SplitBehavior::MERGED_WITH_PREVIOUS;
  if (s == "MergedWithNext") return SplitBehavior::MERGED_WITH_NEXT;
  if (s == "Contiguous") return SplitBehavior::CONTIGUOUS;
  (at / "behavior").fail("unknown split behavior '" + s + "'");
}

void split_by_chars(const Piece& p, std::vector<Piece>& out, const CharPredicate& pred,
                    SplitBehavior behavior) {
  split_piece(p, apply_split_behavior(find_char_matches(p.text, pred), behavior), out);
}

// GPT-2's pattern, used by ByteLevel when use_regex is set.
const Regex& gpt2_regex() {
  static const Regex re(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
      "ByteLevel");
  return re;
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> items)
      : items_(std::move(items)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& item : items_) item->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [this](Piece& p, std::vector<Piece>& out) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) prepend_to_piece(p, " ");
      if (!use_regex_) {
        out.push_back(std::move(p));
        return;
      }
      split_piece(p, apply_split_behavior(gpt2_regex().find_matches(p.text), SplitBehavior::ISOLATED),
                  out);
    });
    // The regex saw real text; the model sees the byte alphabet.
    for (Piece& p : pieces) {
      if (p.is_token()) continue;
      p.origin_span = bytes_to_alphabet(std::string_view(p.text).substr(0, p.origin_span)).size();
      p.text = bytes_to_alphabet(p.text);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [this](Piece& p, std::vector<Piece>& out) {
      std::vector<Span> matches = re_->find_matches(p.text);
      if (invert_) {
        for (Span& m : matches) m.is_match = !m.is_match;
      }
      split_piece(p, apply_split_behavior(std::move(matches), behavior_), out);
    });
  }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(rep_, replacement);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [this](Piece& p, std::vector<Piece>& out) {
      std::string text;
      text.reserve(p.text.size() + rep_.size());
      size_t span = 0;
      for (size_t k = 0; k < p.text.size(); ++k) {
        if (p.text[k] == ' ') {
          text += rep_;
        } else {
          text.push_back(p.text[k]);
        }
        if (k < p.origin_span) span = text.size();
      }
      p.text = std::move(text);
      p.origin_span = span;
      const bool starts_with_rep = p.text.compare(0, rep_.size(), rep_) == 0;
      if (!starts_with_rep && !p.text.empty() &&
          (scheme_ == PrependScheme::ALWAYS || (scheme_ == PrependScheme::FIRST && p.at_origin))) {
        prepend_to_piece(p, rep_);
      }
      if (!split_) {
        out.push_back(std::move(p));
        return;
      }
      const char32_t rep = replacement_;
      split_by_chars(p, out, [rep](char32_t c) { return c == rep; },
                     SplitBehavior::MERGED_WITH_NEXT);
    });
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

// Splits with a char predicate and a fixed behavior (Digits, Punctuation, WhitespaceSplit,
// CharDelimiterSplit; BertPreTokenizer is two of these in a row).
class CharSplitPreTokenizer : public PreTokenizer {
 public:
  CharSplitPreTokenizer(CharPredicate pred, SplitBehavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [this](Piece& p, std::vector<Piece>& out) {
      split_by_chars(p, out, pred_, behavior_);
    });
  }

 private:
  CharPredicate pred_;
  SplitBehavior behavior_;
};

// tokenizers' Whitespace: keeps the matches of `\w+|[^\w\s]+`, i.e. runs of word chars and runs of
// chars that are neither word chars nor whitespace.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [](Piece& p, std::vector<Piece>& out) {
      std::vector<std::pair<size_t, size_t>> spans;
      int run_kind = -1;  // 0: word run, 1: other run, -1: none
      size_t i = 0;
      while (i < p.text.size()) {
        const size_t start = i;
        const char32_t c = next_char(p.text, i);
        const int kind = is_word_char(c) ? 0 : is_whitespace(c) ? -1 : 1;
        if (kind >= 0 && kind == run_kind) {
          spans.back().second = i;
        } else if (kind >= 0) {
          spans.emplace_back(start, i);
        }
        run_kind = kind;
      }
      split_piece(p, spans, out);
    });
  }
};

}  // namespace

MetaspaceConfig parse_metaspace_config(const Json& j, const JsonPath& at) {
  MetaspaceConfig c{get_char(j, "replacement", at), PrependScheme::ALWAYS,
                    get_bool(j, "split", at, true)};
  if (auto s = get_optional_string(j, "prepend_scheme", at)) {
    if (*s == "always") {
      c.scheme = PrependScheme::ALWAYS;
    } else if (*s == "first") {
      c.scheme = PrependScheme::FIRST;
    } else if (*s == "never") {
      c.scheme = PrependScheme::NEVER;
    } else {
      (at / "prepend_scheme").fail("expected always, first or never, got '" + *s + "'");
    }
  }
  // The legacy add_prefix_space=false means "never"; tokenizers refuses it with any other
  // scheme, including the default "always".
  if (!get_bool(j, "add_prefix_space", at, true) && c.scheme != PrependScheme::NEVER) {
    (at / "add_prefix_space").fail("false does not match prepend_scheme (expected \"never\")");
  }
  return c;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& j, const JsonPath& at) {
  at.check_depth();
  const std::string type = get_type(j, at);
  if (type == "Sequence") {
    const Json& list = require_array(get_field(j, "pretokenizers", at), at / "pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      items.push_back(parse_pre_tokenizer(list[i], (at / "pretokenizers")[i]));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(items));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(get_bool(j, "add_prefix_space", at, true),
                                                   get_bool(j, "use_regex", at, true));
  }
  if (type == "Split") {
    const bool invert = get_bool(j, "invert", at, false);
    const SplitBehavior behavior = parse_behavior(j, at, nullptr);
    return std::make_unique<SplitPreTokenizer>(parse_pattern(j, at), behavior, invert);
  }
  if (type == "Metaspace") {
    const MetaspaceConfig c = parse_metaspace_config(j, at);
    return std::make_unique<MetaspacePreTokenizer>(c.replacement, c.scheme, c.split);
  }
  if (type == "Digits") {
    const bool individual = get_bool(j, "individual_digits", at, false);
    return std::make_unique<CharSplitPreTokenizer>(
        is_numeric, individual ? SplitBehavior::ISOLATED : SplitBehavior::CONTIGUOUS);
  }
  if (type == "Punctuation") {
    const SplitBehavior isolated = SplitBehavior::ISOLATED;
    return std::make_unique<CharSplitPreTokenizer>(is_punctuation, parse_behavior(j, at, &isolated));
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharSplitPreTokenizer>(is_whitespace, SplitBehavior::REMOVED);
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "CharDelimiterSplit") {
    const char32_t d = get_char(j, "delimiter", at);
    return std::make_unique<CharSplitPreTokenizer>([d](char32_t c) { return c == d; },
                                                   SplitBehavior::REMOVED);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> items;
    items.push_back(std::make_unique<CharSplitPreTokenizer>(is_whitespace, SplitBehavior::REMOVED));
    items.push_back(std::make_unique<CharSplitPreTokenizer>(is_punctuation, SplitBehavior::ISOLATED));
    return std::make_unique<SequencePreTokenizer>(std::move(items));
  }
  (at / "type").unsupported("pre_tokenizer type '" + type + "' is not supported");
}

}  // namespace lowbit::tokenizer
