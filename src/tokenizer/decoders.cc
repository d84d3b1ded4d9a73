#include "tokenizer/decoders.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {
namespace {

// Rust str::replace: every non-overlapping occurrence; an empty `from` matches at every char
// boundary.
std::string replace_all(const std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) {
    size_t i = 0;
    out += to;
    while (i < s.size()) {
      const size_t start = i;
      next_char(s, i);
      out.append(s, start, i - start);
      out += to;
    }
    return out;
  }
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      // A token with any char outside the alphabet contributes its own UTF-8 bytes.
      std::string mapped;
      bool all_in_alphabet = true;
      size_t i = 0;
      while (i < t.size() && all_in_alphabet) {
        const int b = alphabet_to_byte(next_char(t, i));
        all_in_alphabet = b >= 0;
        if (all_in_alphabet) mapped.push_back(static_cast<char>(b));
      }
      bytes += all_in_alphabet ? mapped : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(const MetaspaceConfig& c) : config_(c) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      const bool drop = k == 0 && config_.scheme != PrependScheme::NEVER;
      std::string out;
      size_t i = 0;
      const std::string& t = tokens[k];
      while (i < t.size()) {
        const size_t start = i;
        if (next_char(t, i) != config_.replacement) {
          out.append(t, start, i - start);
        } else if (!drop) {
          out.push_back(' ');
        }
      }
      tokens[k] = std::move(out);
    }
  }

 private:
  MetaspaceConfig config_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      for (const Span& m : re_->find_matches(t)) {
        if (m.is_match) {
          out += content_;
        } else {
          out.append(t, m.start, m.end - m.start);
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

// Runs of "<0xXX>" tokens become their bytes: one string if valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t byte_tokens = 0;
    auto flush = [&] {
      if (byte_tokens == 0) return;
      if (find_invalid_utf8(bytes) == std::string::npos) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < byte_tokens; ++k) out.emplace_back(kReplacementChar);
      }
      bytes.clear();
      byte_tokens = 0;
    };
    for (std::string& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') value = parse_hex(t[3], t[4]);
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
        ++byte_tokens;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // Rust u8::from_str_radix(.., 16) on two chars: digits, or '+' and one digit.
  static int parse_hex(char a, char b) {
    const int lo = hex_digit(b);
    if (lo < 0) return -1;
    if (a == '+') return lo;
    const int hi = hex_digit(a);
    return hi < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of `content` from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<size_t> bounds;  // byte offset of each char, then the end
      for (size_t i = 0; i < t.size();) {
        bounds.push_back(i);
        next_char(t, i);
      }
      const size_t n = bounds.size();
      bounds.push_back(t.size());
      auto char_at = [&](size_t k) {
        size_t i = bounds[k];
        return next_char(t, i);
      };
      size_t first = 0;
      while (first < start_ && first < n && char_at(first) == content_) ++first;
      size_t last = n;  // one past the last kept char
      for (size_t k = 0; k < stop_ && last > 0 && char_at(last - 1) == content_; ++k) --last;
      t = last > first ? t.substr(bounds[first], bounds[last] - bounds[first]) : std::string();
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> items) : items_(std::move(items)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      tokens[k] = replace_all(tokens[k], suffix_, k + 1 == tokens.size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string& t = tokens[k];
      if (k != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) {
          t.erase(0, prefix_.size());
        } else {
          t = " " + t;
        }
      }
      if (cleanup_) cleanup_tokenization_spaces(t, /*wordpiece_variant=*/true);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

}  // namespace

void cleanup_tokenization_spaces(std::string& text, bool wordpiece_variant) {
  static const std::pair<const char*, const char*> kCommon[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}};
  static const std::pair<const char*, const char*> kTail[] = {
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kCommon) text = replace_all(text, from, to);
  if (wordpiece_variant) text = replace_all(text, " do not", " don't");
  for (const auto& [from, to] : kTail) text = replace_all(text, from, to);
}

std::unique_ptr<Decoder> parse_decoder(const Json& j, const JsonPath& at) {
  at.check_depth();
  const std::string type = get_type(j, at);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(parse_metaspace_config(j, at));
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(parse_pattern(j, at), get_string(j, "content", at));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(get_char(j, "content", at),
                                          static_cast<size_t>(get_int(j, "start", at, 0, INT32_MAX)),
                                          static_cast<size_t>(get_int(j, "stop", at, 0, INT32_MAX)));
  }
  if (type == "Sequence") {
    const Json& list = require_array(get_field(j, "decoders", at), at / "decoders");
    std::vector<std::unique_ptr<Decoder>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      items.push_back(parse_decoder(list[i], (at / "decoders")[i]));
    }
    return std::make_unique<SequenceDecoder>(std::move(items));
  }
  if (type == "BPEDecoder") {
    return std::make_unique<BpeDecoder>(get_optional_string(j, "suffix", at).value_or("</w>"));
  }
  if (type == "WordPiece") {
    return std::make_unique<WordPieceDecoder>(get_optional_string(j, "prefix", at).value_or("##"),
                                              get_bool(j, "cleanup", at, true));
  }
  (at / "type").unsupported("decoder type '" + type + "' is not supported");
}

}  // namespace lowbit::tokenizer
