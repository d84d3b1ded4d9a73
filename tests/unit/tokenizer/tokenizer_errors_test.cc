// Malformed or unsupported tokenizer.json files give one clear lowbit error naming the file and the
// field, never a crash; bad input text and missing files too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lowbit/error.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace lowbit {
namespace {

using nlohmann::json;

// A small valid byte-level BPE tokenizer: vocab a, b, c, ab, abc, and two merges.
json valid_doc() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 5, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed",
                      "invert": false},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [5], "tokens": ["<s>"]}}},
    "decoder": {"type": "Fuse"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4},
              "merges": ["a b", ["ab", "c"]]}
  })");
}

// The message of the lowbit error E that loading `doc` throws ("" and a test failure otherwise).
template <typename E>
std::string load_error(const std::string& text) {
  try {
    Tokenizer::from_json_string(text, "tokenizer.json");
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "loaded without error";
  return "";
}

template <typename E = InvalidArgument>
std::string load_error(const json& doc) {
  return load_error<E>(doc.dump());
}

TEST(TokenizerErrorsTest, ValidDocumentLoads) {
  const Tokenizer tok = Tokenizer::from_json_string(valid_doc().dump(), "tokenizer.json");
  EXPECT_EQ(tok.encode("abc ab c<s>"), (std::vector<int32_t>{5, 4, 3, 2, 5}));
  EXPECT_EQ(tok.decode({5, 4, 3}, true), "abcab");
}

TEST(TokenizerErrorsTest, MalformedJson) {
  EXPECT_NE(load_error<InvalidArgument>(std::string("{\"model\": ")).find("tokenizer.json: invalid JSON"),
            std::string::npos);
  EXPECT_NE(load_error<InvalidArgument>(std::string("[1, 2]")).find("tokenizer.json: expected an object"),
            std::string::npos);
}

TEST(TokenizerErrorsTest, MissingModelAndBadVersion) {
  json doc = valid_doc();
  doc.erase("model");
  EXPECT_EQ(load_error(doc), "tokenizer.json: model: missing");
  doc = valid_doc();
  doc["version"] = "2.0";
  EXPECT_EQ(load_error(doc), "tokenizer.json: version: unknown tokenizer.json version '2.0'");
}

TEST(TokenizerErrorsTest, UnknownComponentTypesAreUnsupported) {
  json doc = valid_doc();
  doc["model"]["type"] = "Unigram";
  EXPECT_NE(load_error<Unsupported>(doc).find("tokenizer.json: model: model type 'Unigram'"),
            std::string::npos);
  doc = valid_doc();
  doc["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"},
                                      {"type": "Precompiled", "precompiled_charsmap": ""}]})");
  EXPECT_EQ(load_error<Unsupported>(doc), "tokenizer.json: normalizer.normalizers[1].type: "
                                          "normalizer type 'Precompiled' is not supported");
  doc = valid_doc();
  doc["pre_tokenizer"] = json::parse(R"({"type": "UnicodeScripts"})");
  EXPECT_EQ(load_error<Unsupported>(doc),
            "tokenizer.json: pre_tokenizer.type: pre_tokenizer type 'UnicodeScripts' is not supported");
  doc = valid_doc();
  doc["decoder"] = json::parse(R"({"type": "CTC"})");
  EXPECT_EQ(load_error<Unsupported>(doc),
            "tokenizer.json: decoder.type: decoder type 'CTC' is not supported");
  doc = valid_doc();
  doc["post_processor"] = json::parse(R"({"type": "Magic"})");
  EXPECT_EQ(load_error<Unsupported>(doc),
            "tokenizer.json: post_processor.type: post_processor type 'Magic' is not supported");
  doc = valid_doc();
  doc["model"]["dropout"] = 0.1;
  EXPECT_NE(load_error<Unsupported>(doc).find("model.dropout"), std::string::npos);
}

// The original TinyLlama tokenizer.json has merges whose pieces contain spaces ("   " splits into
// 4 parts); tokenizers refuses such a file, and so does lowbit, naming the merge.
TEST(TokenizerErrorsTest, MergeWithWrongArity) {
  json doc = valid_doc();
  json merges = json::array();
  for (int i = 0; i < 17; ++i) merges.push_back("a b");
  merges.push_back("   ");
  doc["model"]["merges"] = merges;
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.merges[17]: expected 2 parts, got 4");
  doc["model"]["merges"] = json::parse(R"([["a", "b", "c"]])");
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.merges[0]: expected 2 parts, got 3");
  doc["model"]["merges"] = json::parse(R"([42])");
  EXPECT_NE(load_error(doc).find("tokenizer.json: model.merges[0]: expected a string"), std::string::npos);
}

TEST(TokenizerErrorsTest, MergeReferencingUnknownToken) {
  json doc = valid_doc();
  doc["model"]["merges"] = json::parse(R"(["a b", "b zz"])");
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.merges[1]: 'zz' is not in model.vocab");
  doc["model"]["merges"] = json::parse(R"(["a b", "b c"])");
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.merges[1]: merged token 'bc' is not in model.vocab");
}

TEST(TokenizerErrorsTest, BadVocabIds) {
  json doc = valid_doc();
  doc["model"]["vocab"]["abc"] = 9;
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.vocab[\"abc\"]: id 9 is out of range [0, 5)");
  doc = valid_doc();
  doc["model"]["vocab"]["abc"] = -1;
  EXPECT_NE(load_error(doc).find("model.vocab[\"abc\"]: -1 is out of range"), std::string::npos);
  doc = valid_doc();
  doc["model"]["vocab"]["abc"] = 3;
  doc["model"]["vocab"]["zz"] = 4;
  EXPECT_NE(load_error(doc).find("is also the id of"), std::string::npos);
  doc = valid_doc();
  doc["model"]["vocab"]["abc"] = "4";
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.vocab[\"abc\"]: expected an integer id, got a string");
}

TEST(TokenizerErrorsTest, WrongFieldTypesAndValues) {
  json doc = valid_doc();
  doc["model"]["byte_fallback"] = "yes";
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.byte_fallback: expected a boolean, got a string");
  doc = valid_doc();
  doc["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(load_error(doc), "tokenizer.json: model.unk_token: '<unk>' is not in model.vocab");
  doc = valid_doc();
  doc["pre_tokenizer"]["pattern"] = json::parse(R"({"Regex": "(unclosed"})");
  EXPECT_NE(load_error(doc).find("tokenizer.json: pre_tokenizer.pattern: invalid regex '(unclosed'"),
            std::string::npos);
  doc = valid_doc();
  doc["pre_tokenizer"]["behavior"] = "Sideways";
  EXPECT_EQ(load_error(doc), "tokenizer.json: pre_tokenizer.behavior: unknown split behavior 'Sideways'");
  doc = valid_doc();
  doc["pre_tokenizer"] = json::parse(R"({"type": "Metaspace", "replacement": "ab"})");
  EXPECT_EQ(load_error(doc),
            "tokenizer.json: pre_tokenizer.replacement: expected exactly one character, got \"ab\"");
  doc = valid_doc();
  doc["post_processor"]["single"][0]["SpecialToken"]["id"] = "<bos>";
  EXPECT_EQ(load_error(doc),
            "tokenizer.json: post_processor.single[0].SpecialToken.id: '<bos>' is not in special_tokens");
  doc = valid_doc();
  doc["added_tokens"][0].erase("content");
  EXPECT_EQ(load_error(doc), "tokenizer.json: added_tokens[0].content: missing");
}

TEST(TokenizerErrorsTest, DeepNestingIsAnErrorNotACrash) {
  json inner = json::parse(R"({"type": "Lowercase"})");
  for (int i = 0; i < 200; ++i) inner = json{{"type", "Sequence"}, {"normalizers", json::array({inner})}};
  json doc = valid_doc();
  doc["normalizer"] = inner;
  EXPECT_NE(load_error(doc).find("nested too deeply"), std::string::npos);
}

TEST(TokenizerErrorsTest, FilesAndInputs) {
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), IoError);
  EXPECT_THROW(Tokenizer::from_dir("/nonexistent"), IoError);

  const auto dir = std::filesystem::temp_directory_path() / "lowbit_tok_errors_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << valid_doc().dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": 7})";
  try {
    Tokenizer::from_dir(dir.string());
    ADD_FAILURE() << "no error for a bad tokenizer_config.json";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir / "tokenizer_config.json").string() + ": bos_token: expected a string, got an integer");
  }
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>"})";
  const Tokenizer tok = Tokenizer::from_dir(dir.string());
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.eos_token(), "</s>");
  std::filesystem::remove_all(dir);

  EXPECT_THROW(tok.encode("ab\xC3"), InvalidArgument);
  EXPECT_EQ(tok.decode({-1, 99, 0}), "a");  // unknown ids are skipped, as in HF
}

}  // namespace
}  // namespace lowbit
