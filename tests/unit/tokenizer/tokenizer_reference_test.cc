// The tokenizers of the reference checkpoints against the golden data made with transformers /
// tokenizers when those fixtures were built: ref-llama-19m (reference.json, the prompt ids in
// reference_logits.safetensors, whole evaluation files) and TinyLlama-1.1B-Chat (golden.json).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace lowbit {
namespace {

using nlohmann::json;
using testing::ids_of;
using testing::read_json;
using testing::read_text;
using testing::repo_path;
using testing::show;

const char* kRefDir = "models/ref-llama-19m";

const Tokenizer& ref_llama() {
  static const Tokenizer tok = Tokenizer::from_dir(repo_path(kRefDir));
  return tok;
}

// Reads one I64 tensor of a safetensors file (8-byte header length, JSON header, data).
std::vector<int32_t> read_i64_tensor(const std::string& bytes, const std::string& name) {
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, header_len));
  const json& t = header.at(name);
  EXPECT_EQ(t.at("dtype"), "I64");
  const size_t begin = 8 + header_len + t.at("data_offsets")[0].get<size_t>();
  const size_t end = 8 + header_len + t.at("data_offsets")[1].get<size_t>();
  std::vector<int32_t> out;
  for (size_t p = begin; p < end; p += 8) {
    int64_t v = 0;
    std::memcpy(&v, bytes.data() + p, 8);
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

TEST(RefLlamaTokenizerTest, ReferenceJsonCases) {
  const json ref = read_json(repo_path("tests/golden/ref-llama-19m/reference.json"));
  const Tokenizer& tok = ref_llama();
  for (const json& c : ref.at("tokenizer_cases")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("text: \"" + text + "\"");
    EXPECT_EQ(tok.encode(text, false), ids_of(c.at("ids_no_special")));
    EXPECT_EQ(tok.encode(text, true), ids_of(c.at("ids_with_bos")));
    // Byte-level BPE round-trips any text exactly (special tokens included).
    EXPECT_EQ(tok.decode(ids_of(c.at("ids_no_special"))), text);
  }
}

TEST(RefLlamaTokenizerTest, PromptsAndGreedyTextsMatchReferenceLogitsFile) {
  const json ref = read_json(repo_path("tests/golden/ref-llama-19m/reference.json"));
  const std::string bytes = read_text(repo_path("tests/golden/ref-llama-19m/reference_logits.safetensors"));
  const Tokenizer& tok = ref_llama();
  for (size_t i = 0; i < ref.at("prompts").size(); ++i) {
    const std::string key = "prompt" + std::to_string(i);
    EXPECT_EQ(tok.encode(ref["prompts"][i].get<std::string>(), true),
              read_i64_tensor(bytes, key + ".input_ids"));
    EXPECT_EQ(tok.decode(read_i64_tensor(bytes, key + ".greedy_ids")),
              ref["greedy"][i].get<std::string>());
  }
}

TEST(RefLlamaTokenizerTest, FromDirReadsTokenizerConfig) {
  const Tokenizer& tok = ref_llama();
  EXPECT_EQ(tok.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tok.eos_token(), "<|end_of_text|>");
  EXPECT_EQ(tok.token_to_id("<|begin_of_text|>"), 0);
  EXPECT_EQ(tok.token_to_id("<|eot_id|>"), 4);
  EXPECT_TRUE(tok.is_special(4));
  EXPECT_FALSE(tok.is_special(5));
  EXPECT_EQ(tok.vocab_size(), 8192);
  EXPECT_EQ(tok.id_to_token(1000000), "");
  EXPECT_FALSE(tok.token_to_id("no such token").has_value());
}

// Whole evaluation files, as the perplexity code tokenizes them; HF's id count and a hash of
// its ids. Also prints the encode speed (informational; no threshold).
TEST(RefLlamaTokenizerTest, WholeEvaluationFilesMatchHf) {
  const json g = read_json(repo_path("tests/golden/tokenizers/ref-llama-19m/golden.json"));
  const Tokenizer& tok = ref_llama();
  for (const json& f : g.at("full_files")) {
    std::string text = read_text(repo_path(f.at("file")));
    if (f.at("crlf_to_lf").get<bool>()) {
      std::string lf;
      for (size_t i = 0; i < text.size(); ++i) {
        if (!(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) lf.push_back(text[i]);
      }
      text = std::move(lf);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(text, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ info ] %s: %zu bytes -> %zu ids in %.3f s (%.2f MB/s)\n",
                f.at("file").get<std::string>().c_str(), text.size(), ids.size(), s,
                text.size() / 1e6 / s);
    ASSERT_EQ(ids.size(), f.at("count").get<size_t>()) << f.at("file");
    uint64_t h = 0;
    for (int32_t id : ids) h = h * 1000003u + static_cast<uint64_t>(id) + 1u;
    EXPECT_EQ(std::to_string(h), f.at("hash").get<std::string>()) << f.at("file");
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 64), ids_of(f.at("first")));
    EXPECT_EQ(std::vector<int32_t>(ids.end() - 64, ids.end()), ids_of(f.at("last")));
  }
}

TEST(RefLlamaTokenizerTest, IgnoreMergesVariantMatchesHf) {
  json doc = read_json(repo_path("models/ref-llama-19m/tokenizer.json"));
  doc["model"]["ignore_merges"] = true;
  const Tokenizer tok = Tokenizer::from_json_string(doc.dump(), "ref-llama ignore_merges");
  const json g = read_json(repo_path("tests/golden/tokenizers/ref-llama-19m/golden.json"));
  for (const json& c : g.at("ignore_merges_cases")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("text: \"" + text.substr(0, 80) + "\"");
    EXPECT_EQ(tok.encode(text, false), ids_of(c.at("ids_no_special")));
  }
}

// The TinyLlama golden set made with the fixtures (transformers 5 re-saved file: Metaspace
// "first", byte fallback). hf_ids_default is what transformers' tokenizer(text) gives.
TEST(TinyLlamaTokenizerTest, GoldenJsonCases) {
  const std::string dir = repo_path("tests/golden/tokenizers/tinyllama-1.1b-chat");
  const Tokenizer tok = Tokenizer::from_dir(dir);
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.eos_token(), "</s>");
  const json g = read_json(dir + "/golden.json");
  EXPECT_EQ(tok.vocab_size(), g.at("vocab_size").get<int32_t>());
  for (const json& c : g.at("cases")) {
    const std::string text = c.at("text");
    SCOPED_TRACE("text: \"" + text.substr(0, 80) + "\"");
    const auto plain = tok.encode(text, false);
    EXPECT_EQ(plain, ids_of(c.at("ids_no_special"))) << show(plain);
    const auto with = tok.encode(text, true);
    EXPECT_EQ(with, ids_of(c.at("ids_with_special"))) << show(with);
    EXPECT_EQ(with, ids_of(c.at("hf_ids_default")));
    EXPECT_EQ(tok.decode(with, true), c.at("decode_skip_special").get<std::string>());
    EXPECT_EQ(tok.decode(with, false), c.at("decode_keep_special").get<std::string>());
  }
}

}  // namespace
}  // namespace lowbit
