// Each normalizer, pre-tokenizer and decoder on its own against HF tokenizers 0.23.2
// (tests/golden/tokenizers/components/golden.json: normalize_str, pre_tokenize_str and decode of
// the Python bindings, written by scripts/fixtures/tokenizer_goldens.py), plus rules taken from
// the specifications they implement (byte alphabet, UTF-8 substitution of maximal subparts).
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pattern.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace lowbit::tokenizer {
namespace {

using nlohmann::json;

const json& components() {
  static const json g = testing::read_json(testing::repo_path("tests/golden/tokenizers/components/golden.json"));
  return g;
}

TEST(TokenizerComponentsTest, NormalizersMatchHf) {
  for (const json& n : components().at("normalizers")) {
    const auto normalizer = parse_normalizer(n.at("json"), JsonPath("golden", "normalizer"));
    for (const json& c : n.at("cases")) {
      Piece p;
      p.text = c[0].get<std::string>();
      normalizer->normalize(p);
      EXPECT_EQ(p.text, c[1].get<std::string>()) << n.at("json").dump() << " on \"" << c[0] << "\"";
    }
  }
}

TEST(TokenizerComponentsTest, PreTokenizersMatchHf) {
  for (const json& t : components().at("pre_tokenizers")) {
    const auto pre = parse_pre_tokenizer(t.at("json"), JsonPath("golden", "pre_tokenizer"));
    for (const json& c : t.at("cases")) {
      // pre_tokenize_str sees the whole string, which starts at offset 0 of the input.
      std::vector<Piece> pieces(1);
      pieces[0].text = c[0].get<std::string>();
      pieces[0].at_origin = true;
      pieces[0].origin_span = pieces[0].text.empty() ? 0 : utf8_len(pieces[0].text[0]);
      if (pieces[0].text.empty()) pieces.clear();
      pre->pre_tokenize(pieces);
      std::vector<std::string> texts;
      for (const Piece& p : pieces) texts.push_back(p.text);
      EXPECT_EQ(texts, c[1].get<std::vector<std::string>>())
          << t.at("json").dump() << " on \"" << c[0] << "\"";
    }
  }
}

TEST(TokenizerComponentsTest, DecodersMatchHf) {
  for (const json& d : components().at("decoders")) {
    const auto decoder = parse_decoder(d.at("json"), JsonPath("golden", "decoder"));
    for (const json& c : d.at("cases")) {
      std::vector<std::string> tokens = c[0].get<std::vector<std::string>>();
      decoder->decode_chain(tokens);
      std::string text;
      for (const auto& t : tokens) text += t;
      EXPECT_EQ(text, c[1].get<std::string>()) << d.at("json").dump() << " on " << c[0];
    }
  }
}

// GPT-2's bytes_to_unicode table: printable Latin-1 maps to itself, the rest to U+0100 upward.
TEST(TokenizerComponentsTest, ByteLevelAlphabet) {
  EXPECT_EQ(byte_to_alphabet('A'), U'A');
  EXPECT_EQ(byte_to_alphabet(' '), U'\u0120');
  EXPECT_EQ(byte_to_alphabet('\n'), U'\u010A');
  EXPECT_EQ(byte_to_alphabet('\t'), U'\u0109');
  EXPECT_EQ(byte_to_alphabet(0x00), U'\u0100');
  EXPECT_EQ(byte_to_alphabet(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_alphabet(0xA0), U'\u0142');
  EXPECT_EQ(byte_to_alphabet(0xAD), U'\u0143');
  EXPECT_EQ(byte_to_alphabet(0xFF), U'\u00FF');
  for (int b = 0; b < 256; ++b) EXPECT_EQ(alphabet_to_byte(byte_to_alphabet(b)), b);
  EXPECT_EQ(alphabet_to_byte(U'\u0144'), -1);
  EXPECT_EQ(bytes_to_alphabet(" t"), "\xC4\xA0t");  // "Ġt"
}

// The Unicode standard's example for "U+FFFD substitution of maximal subparts" (chapter 3,
// Table 3-8), which Rust's String::from_utf8_lossy follows.
TEST(TokenizerComponentsTest, LossyUtf8UsesMaximalSubparts) {
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string r(kReplacementChar);
  EXPECT_EQ(utf8_lossy(in), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);   // a surrogate: each byte on its own
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);           // overlong
  EXPECT_EQ(utf8_lossy("\xE2\x82"), r);               // truncated at the end
  EXPECT_EQ(utf8_lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(find_invalid_utf8("ok \xF0\x9F\xA4\x96"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("ok \xF4\x90\x80\x80"), 3u);  // above U+10FFFF
}

// The split behaviours as tokenizers documents them on "the-final--countdown".
TEST(TokenizerComponentsTest, SplitBehaviorsOnDocumentedExample) {
  const std::string text = "the-final--countdown";
  const auto matches = find_char_matches(text, [](char32_t c) { return c == '-'; });
  auto pieces = [&](SplitBehavior b) {
    std::vector<std::string> out;
    for (const auto& [s, e] : apply_split_behavior(matches, b)) out.push_back(text.substr(s, e - s));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(SplitBehavior::REMOVED), (V{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(SplitBehavior::ISOLATED), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces(SplitBehavior::MERGED_WITH_PREVIOUS), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces(SplitBehavior::MERGED_WITH_NEXT), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces(SplitBehavior::CONTIGUOUS), (V{"the", "-", "final", "--", "countdown"}));
}

TEST(TokenizerComponentsTest, CleanupTokenizationSpaces) {
  std::string s = "Hello , world ! It 's fine , is n't it ?";
  cleanup_tokenization_spaces(s);
  EXPECT_EQ(s, "Hello, world! It's fine, isn't it?");
}

}  // namespace
}  // namespace lowbit::tokenizer
