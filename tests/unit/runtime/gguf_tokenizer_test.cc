// The tokenizer of a GGUF file (models/gguf_tokenizer.h) on ref-llama-19m's byte-level BPE, as
// llama.cpp's convert_hf_to_gguf.py wrote it into tests/golden/gguf/ref-llama-2l-q4_k_m.gguf
// (scripts/fixtures/make_gguf_model_fixtures.py). Golden ids: the Hugging Face tokenizers cases
// of tests/golden/ref-llama-19m/reference.json (with and without BOS); on a longer text (the
// heldout file), the ids of the model's own tokenizer.json through lowbit's tokenizer, which the
// tokenizer tests check against HF tokenizers. Then Qwen2's pre-tokenizer and a SentencePiece
// vocabulary, each from a file llama.cpp's converter wrote.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <optional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "lowbit/error.h"
#include "models/gguf_tokenizer.h"
#include "runtime/chat_source.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::models {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const fs::path kRoot = LOWBIT_SOURCE_DIR;
const fs::path kGguf = kRoot / "tests/golden/gguf/ref-llama-2l-q4_k_m.gguf";

Tokenizer gguf_tokenizer() {
  auto file = formats::GgufFile::open(kGguf.string());
  return Tokenizer::from_json_string(gguf_tokenizer_json(*file), kGguf.string());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message of the E that gguf_tokenizer_json throws on a patched copy of a fixture's bytes
// ("" when it throws nothing; another exception fails the test by escaping).
template <typename E>
std::string error_on_patched(const std::string& bytes) {
  auto file = formats::GgufFile::from_bytes(bytes, "patched.gguf");
  try {
    gguf_tokenizer_json(*file);
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(GgufTokenizer, MatchesHuggingFaceCases) {
  const Tokenizer tokenizer = gguf_tokenizer();
  EXPECT_EQ(tokenizer.vocab_size(), 8192);
  const nlohmann::json reference =
      nlohmann::json::parse(read_text(kRoot / "tests/golden/ref-llama-19m/reference.json"));
  ASSERT_FALSE(reference["tokenizer_cases"].empty());
  for (const nlohmann::json& c : reference["tokenizer_cases"]) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tokenizer.encode(text, false), c["ids_no_special"].get<std::vector<int32_t>>())
        << text;
    EXPECT_EQ(tokenizer.encode(text, true), c["ids_with_bos"].get<std::vector<int32_t>>()) << text;
  }
}

TEST(GgufTokenizer, MatchesTokenizerJsonOnHeldoutText) {
  const Tokenizer ours = gguf_tokenizer();
  const Tokenizer hf = Tokenizer::from_dir((kRoot / "models/ref-llama-19m").string());
  std::string text = read_text(kRoot / "data/text/heldout.txt").substr(0, 200000);
  const std::vector<int32_t> ids = hf.encode(text, true);
  ASSERT_GT(ids.size(), 1000u);
  EXPECT_EQ(ours.encode(text, true), ids);
  EXPECT_EQ(ours.decode(ids, true), hf.decode(ids, true));
  EXPECT_EQ(ours.decode(ids, false), hf.decode(ids, false));
}

// Qwen2's pre-tokenizer (digits one at a time): tests/golden/gguf/qwen2-tiny-q8_0.gguf, written by
// llama.cpp's converter with tokenizer.ggml.pre "qwen2" (scripts/fixtures/make_gguf_qwen2_fixture.py);
// golden ids from transformers' tokenizer built from that file (equal to the tokenizer.json's).
TEST(GgufTokenizer, Qwen2PreTokenizerMatchesTransformers) {
  const fs::path path = kRoot / "tests/golden/gguf/qwen2-tiny-q8_0.gguf";
  auto file = formats::GgufFile::open(path.string());
  const Tokenizer tokenizer = Tokenizer::from_json_string(gguf_tokenizer_json(*file), path.string());
  const nlohmann::json texts =
      nlohmann::json::parse(read_text(kRoot / "tests/golden/gguf/qwen2_texts.json"));
  auto golden = formats::SafetensorsFile::open(
      (kRoot / "tests/golden/gguf/qwen2_golden.safetensors").string());
  ASSERT_EQ(texts.size(), 4u);
  for (size_t j = 0; j < texts.size(); ++j) {
    const Tensor want = golden->get("text" + std::to_string(j) + ".ids");
    const int64_t* p = want.data_as<const int64_t>();
    const std::vector<int32_t> ids(p, p + want.numel());
    EXPECT_EQ(tokenizer.encode(texts[j].get<std::string>(), false), ids) << texts[j];
  }
  // With Llama 3's regex "2024" would be one piece; here each digit is its own token.
  EXPECT_EQ(tokenizer.encode("x=12345", false).size(), 7u);
}

// A SentencePiece vocabulary (tokenizer.ggml.model "llama"): tests/golden/gguf/spm-tiny-bf16.gguf,
// written by llama.cpp's converter from a SentencePiece BPE model trained with Llama's settings
// (scripts/fixtures/make_gguf_spm_fixture.py). Golden ids: llama.cpp's llama-tokenize on that
// file, equal to SentencePiece's own encoding (the script asserts it), on texts with leading and
// repeated spaces, tabs, newlines, digits, accents and characters outside the vocabulary (byte
// fallback), and on 20,000 characters of heldout text.
TEST(GgufTokenizer, SentencePieceMatchesLlamaCpp) {
  const fs::path path = kRoot / "tests/golden/gguf/spm-tiny-bf16.gguf";
  auto file = formats::GgufFile::open(path.string());
  const Tokenizer tokenizer = Tokenizer::from_json_string(gguf_tokenizer_json(*file), path.string());
  EXPECT_EQ(tokenizer.vocab_size(), 1200);
  const nlohmann::json golden =
      nlohmann::json::parse(read_text(kRoot / "tests/golden/gguf/spm_golden.json"));
  ASSERT_EQ(golden["texts"].size(), 11u);
  for (size_t j = 0; j < golden["texts"].size(); ++j) {
    const std::string text = golden["texts"][j].get<std::string>();
    const std::vector<int32_t> ids = golden["ids"][j].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer.encode(text, true), ids) << text.substr(0, 80);
    // SentencePiece's decoding gives the text back (no normalization; the prefix space dropped).
    EXPECT_EQ(tokenizer.decode(ids, true), text) << text.substr(0, 80);
  }
  EXPECT_EQ(tokenizer.encode("a", false), std::vector<int32_t>(golden["ids"][8].begin() + 1, golden["ids"][8].end()));
}

// The chat template a GGUF carries (tokenizer.chat_template, written by llama.cpp's converter from
// tokenizer_config.json) with the special tokens of its metadata: rendered as transformers'
// render_jinja_template renders it, then tokenized as llama-tokenize does with special tokens
// parsed (the "chat" golden of the same script).
TEST(GgufTokenizer, ChatTemplateFromTheFile) {
  const fs::path path = kRoot / "tests/golden/gguf/spm-tiny-bf16.gguf";
  const std::optional<ChatTemplate> chat = runtime::model_chat_template(path.string());
  ASSERT_TRUE(chat.has_value());
  const nlohmann::json special = runtime::model_special_tokens(path.string());
  // The converter wrote bos and eos ids (no unknown or padding id): those are the variables.
  EXPECT_EQ(special, (nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
  const nlohmann::ordered_json golden =
      nlohmann::ordered_json::parse(read_text(kRoot / "tests/golden/gguf/spm_golden.json"))["chat"];
  const std::string rendered = chat->render(golden["messages"], true, nlohmann::ordered_json(special));
  EXPECT_EQ(rendered, golden["rendered"].get<std::string>());
  auto file = formats::GgufFile::open(path.string());
  const Tokenizer tokenizer = Tokenizer::from_json_string(gguf_tokenizer_json(*file), path.string());
  EXPECT_EQ(tokenizer.encode(rendered, false), golden["ids"].get<std::vector<int32_t>>());
  // A GGUF without a template (the converter found none in the model it converted) has none.
  EXPECT_FALSE(runtime::model_chat_template((kRoot / "tests/golden/gguf/ref-llama-2l-q8_0.gguf").string()));
}

TEST(GgufTokenizer, SentencePieceWithoutScoresIsNamed) {
  const fs::path path = kRoot / "tests/golden/gguf/spm-tiny-bf16.gguf";
  std::string bytes = read_text(path);
  const size_t at = bytes.find("tokenizer.ggml.scores");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 21, "tokenizer.ggml.scorez");
  EXPECT_THAT(error_on_patched<InvalidArgument>(bytes),
              HasSubstr("patched.gguf: tokenizer.ggml.model 'llama' needs tokenizer.ggml.scores"));
}

TEST(GgufTokenizer, SentencePieceScoreThatIsNotFiniteIsNamed) {
  const fs::path path = kRoot / "tests/golden/gguf/spm-tiny-bf16.gguf";
  std::string bytes = read_text(path);
  // tokenizer.ggml.scores: key, value type ARRAY (9), element type FLOAT32 (6), u64 count, floats.
  const size_t at = bytes.find("tokenizer.ggml.scores");
  ASSERT_NE(at, std::string::npos);
  const size_t first = at + 21 + 4 + 4 + 8;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  bytes.replace(first + 4 * 5, 4, reinterpret_cast<const char*>(&nan), 4);  // score of token 5
  EXPECT_THAT(error_on_patched<InvalidArgument>(bytes),
              HasSubstr("patched.gguf: tokenizer.ggml.scores[5] is not finite"));
}

// Found by the fuzzer: a token that is not UTF-8 used to escape as the JSON library's exception.
TEST(GgufTokenizer, TokenThatIsNotUtf8IsNamed) {
  const fs::path path = kRoot / "tests/golden/gguf/spm-tiny-bf16.gguf";
  std::string bytes = read_text(path);
  const std::string piece = std::string("\x03\0\0\0\0\0\0\0", 8) + "<s>";  // token 1, u64 length 3
  const size_t at = bytes.find(piece);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] = '\xB3';  // "<s>" -> "<\xB3>": a continuation byte with no lead
  EXPECT_THAT(error_on_patched<InvalidArgument>(bytes),
              HasSubstr("patched.gguf: tokenizer.ggml.tokens[1] is not valid UTF-8"));
}

TEST(GgufTokenizer, UnsupportedTokenizerModelIsNamed) {
  std::string bytes = read_text(kGguf);
  // tokenizer.ggml.model's value "gpt2" (u64 length 4) patched to another 4-letter model name.
  const std::string value = std::string("\x04\0\0\0\0\0\0\0", 8);
  const size_t at = bytes.find(value + "gpt2");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + 8, 4, "t5xx");
  EXPECT_THAT(error_on_patched<Unsupported>(bytes), HasSubstr("tokenizer.ggml.model 't5xx' is not supported"));
}

}  // namespace
}  // namespace lowbit::models
