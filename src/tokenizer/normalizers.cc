#include "tokenizer/normalizers.h"

#include <algorithm>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {
namespace {

// The end of the char that contains byte `pos` (pos itself when it starts a char), so that
// origin_span always ends on a char boundary.
size_t char_boundary_at_or_after(const std::string& s, size_t pos) {
  while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
  return std::min(pos, s.size());
}

// Rewrites the piece char by char: emit(c, raw, out) appends what the char c (bytes `raw`)
// becomes, possibly nothing. Output made from chars inside origin_span stays aligned with the
// input's first char, as tokenizers' alignments do, so origin_span becomes its length.
template <typename Emit>
void transform_chars(Piece& p, Emit emit) {
  std::string out;
  out.reserve(p.text.size());
  size_t span = 0;
  size_t i = 0;
  while (i < p.text.size()) {
    const size_t start = i;
    const char32_t c = next_char(p.text, i);
    emit(c, std::string_view(p.text).substr(start, i - start), out);
    if (start < p.origin_span) span = out.size();
  }
  p.origin_span = span;
  p.text = std::move(out);
}

// Keeps the chars for which keep(c) holds.
template <typename Keep>
void filter_chars(Piece& p, Keep keep) {
  transform_chars(p, [&keep](char32_t c, std::string_view raw, std::string& out) {
    if (keep(c)) out.append(raw);
  });
}

template <typename Map>
void map_chars(Piece& p, Map map) {
  transform_chars(p, [&map](char32_t c, std::string_view, std::string& out) {
    append_utf8(out, map(c));
  });
}

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> items)
      : items_(std::move(items)) {}
  void normalize(Piece& p) const override {
    for (const auto& n : items_) n->normalize(p);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(Piece& p) const override {
    if (!p.text.empty()) prepend_to_piece(p, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  void normalize(Piece& p) const override {
    std::string out;
    size_t span = 0;
    for (const Span& m : re_->find_matches(p.text)) {
      if (!m.is_match) {
        out.append(p.text, m.start, m.end - m.start);
        if (m.start < p.origin_span) span = out.size() - (m.end - std::min(m.end, p.origin_span));
        continue;
      }
      out += content_;
      // tokenizers aligns the replacement with the last replaced byte (with the byte before an
      // empty match), so it stays at the origin when that byte does.
      const bool origin = m.end > m.start ? m.end - 1 < p.origin_span
                                          : (m.start == 0 || m.start - 1 < p.origin_span);
      if (origin && p.origin_span > 0) span = out.size();
    }
    p.origin_span = char_boundary_at_or_after(out, span);
    p.text = std::move(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(Piece& p) const override {
    // The chars composed or decomposed from the first input char keep its alignment (a char
    // composed with the chars after it too).
    const std::string_view head = std::string_view(p.text).substr(0, p.origin_span);
    const size_t span = p.origin_span > 0 ? normalize_unicode(head, form_).size() : 0;
    p.text = normalize_unicode(p.text, form_);
    p.origin_span = char_boundary_at_or_after(p.text, span);
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override {
    transform_chars(p, [](char32_t c, std::string_view, std::string& out) { append_lowercase(out, c); });
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(Piece& p) const override {
    const std::string& s = p.text;
    size_t begin = 0;
    size_t end = s.size();
    if (left_) {
      size_t i = 0;
      while (i < s.size()) {
        const size_t start = i;
        if (!is_whitespace(next_char(s, i))) {
          i = start;
          break;
        }
      }
      begin = i;
    }
    if (right_) {
      size_t last_kept = begin;  // end of the last non-whitespace char
      size_t i = begin;
      while (i < s.size()) {
        if (!is_whitespace(next_char(s, i))) last_kept = i;
      }
      end = last_kept;
    }
    // The kept bytes are [begin, end); those that were in origin_span still are.
    const size_t kept = end > begin ? end - begin : 0;
    p.origin_span = p.origin_span > begin ? std::min(p.origin_span - begin, kept) : 0;
    p.text = s.substr(begin, kept);
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override {
    filter_chars(p, [](char32_t c) { return !is_combining_mark(c); });
  }
};

// tokenizers' Nmt: drop some control chars, turn other separators into spaces.
class NmtNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override {
    filter_chars(p, [](char32_t c) {
      return !((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
               c == 0x8F || c == 0x9F);
    });
    map_chars(p, [](char32_t c) -> char32_t {
      switch (c) {
        case 0x09: case 0x0A: case 0x0C: case 0x0D: case 0x1680: case 0x2028: case 0x2029:
        case 0x2581: case 0xFEFF: case 0xFFFD:
          return ' ';
        default:
          return (c >= 0x200B && c <= 0x200F) ? ' ' : c;
      }
    });
  }
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents),
        lowercase_(lowercase) {}
  void normalize(Piece& p) const override {
    if (clean_text_) {
      filter_chars(p, [](char32_t c) {
        const bool control = c != '\t' && c != '\n' && c != '\r' && is_other(c);
        return !(c == 0 || c == 0xFFFD || control);
      });
      map_chars(p, [](char32_t c) -> char32_t {
        return (c == '\t' || c == '\n' || c == '\r' || is_whitespace(c)) ? ' ' : c;
      });
    }
    if (chinese_) {
      transform_chars(p, [](char32_t c, std::string_view raw, std::string& out) {
        if (is_cjk(c)) out.push_back(' ');
        out.append(raw);
        if (is_cjk(c)) out.push_back(' ');
      });
    }
    if (strip_accents_) {
      UnicodeNormalizer(NormalForm::NFD).normalize(p);
      filter_chars(p, [](char32_t c) { return !is_mark_nonspacing(c); });
    }
    if (lowercase_) LowercaseNormalizer().normalize(p);
  }

 private:
  static bool is_cjk(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override {
    transform_chars(p, [](char32_t, std::string_view raw, std::string& out) {
      out += bytes_to_alphabet(raw);
    });
  }
};

}  // namespace

// A {"String": s} or {"Regex": r} pattern object, compiled as tokenizers does.
std::unique_ptr<Regex> parse_pattern(const Json& obj, const JsonPath& at) {
  const Json& pattern = require_object(get_field(obj, "pattern", at), at / "pattern");
  if (pattern.size() == 1 && pattern.contains("String")) {
    return Regex::literal(as_string(pattern["String"], at / "pattern" / "String"),
                          (at / "pattern").str());
  }
  if (pattern.size() == 1 && pattern.contains("Regex")) {
    return std::make_unique<Regex>(as_string(pattern["Regex"], at / "pattern" / "Regex"),
                                   (at / "pattern").str());
  }
  (at / "pattern").fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> parse_normalizer(const Json& j, const JsonPath& at) {
  at.check_depth();
  const std::string type = get_type(j, at);
  if (type == "Sequence") {
    const Json& list = require_array(get_field(j, "normalizers", at), at / "normalizers");
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      items.push_back(parse_normalizer(list[i], (at / "normalizers")[i]));
    }
    return std::make_unique<SequenceNormalizer>(std::move(items));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(get_string(j, "prepend", at));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(parse_pattern(j, at), get_string(j, "content", at));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(get_bool(j, "strip_left", at, true),
                                             get_bool(j, "strip_right", at, true));
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Nmt") return std::make_unique<NmtNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "BertNormalizer") {
    const bool lowercase = get_bool(j, "lowercase", at, true);
    const Json* strip = find_field(j, "strip_accents");
    const bool strip_accents = strip != nullptr ? get_bool(j, "strip_accents", at, false) : lowercase;
    return std::make_unique<BertNormalizer>(get_bool(j, "clean_text", at, true),
                                            get_bool(j, "handle_chinese_chars", at, true),
                                            strip_accents, lowercase);
  }
  (at / "type").unsupported("normalizer type '" + type + "' is not supported");
}

}  // namespace lowbit::tokenizer
