// GGUF tokenizer metadata → tokenizer.json text (see gguf_tokenizer.h).
#include "models/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "lowbit/error.h"
#include "tokenizer/unicode.h"  // utf8_len only (inline): no link to lowbit_tokenizer

namespace lowbit::models {
namespace {

using nlohmann::json;

// llama.cpp's token types (llama_token_type / gguf-py TokenType).
constexpr int64_t kUnknown = 2;
constexpr int64_t kControl = 3;
constexpr int64_t kUserDefined = 4;
constexpr int64_t kByte = 6;

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Qwen2's: digits one at a time (Llama 3 takes up to three).
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct PreTokenizer {
  json config;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

PreTokenizer pre_tokenizer(const formats::GgufFile& file) {
  const std::string pre = file.find("tokenizer.ggml.pre") != nullptr
                              ? file.get_string("tokenizer.ggml.pre")
                              : std::string();
  PreTokenizer p;
  const bool llama3 = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
  // llama.cpp reads "deepseek-r1-qwen" as qwen2 too.
  const bool qwen2 = pre == "qwen2" || pre == "deepseek-r1-qwen";
  if (llama3 || qwen2) {
    p.config = {{"type", "Sequence"},
                {"pretokenizers",
                 json::array({{{"type", "Split"},
                               {"pattern", {{"Regex", llama3 ? kLlama3Regex : kQwen2Regex}}},
                               {"behavior", "Isolated"},
                               {"invert", false}},
                              {{"type", "ByteLevel"},
                               {"add_prefix_space", false},
                               {"trim_offsets", true},
                               {"use_regex", false}}})}};
    // Llama 3's tokenizer.json ignores merges for whole-word tokens; Qwen2's does not, and
    // llama.cpp adds no BOS for it.
    p.ignore_merges = llama3;
    p.add_bos = llama3;
    return p;
  }
  if (pre == "gpt-2") {
    p.config = {{"type", "ByteLevel"},
                {"add_prefix_space", false},
                {"trim_offsets", true},
                {"use_regex", true}};
    return p;
  }
  throw Unsupported(file.path() + ": tokenizer.ggml.pre '" + pre +
                    "' is not supported (llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen, gpt-2)");
}

bool flag(const formats::GgufFile& file, const std::string& key, bool fallback) {
  return file.find(key) != nullptr ? file.get_bool(key) : fallback;
}

// The id a metadata key holds, checked against the vocabulary (InvalidArgument naming the key).
size_t token_id_of(const formats::GgufFile& file, const std::vector<std::string>& tokens,
                   const std::string& key) {
  const int64_t id = file.get_int(key);
  if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
    throw InvalidArgument(file.path() + ": metadata key \"" + key + "\" (" + std::to_string(id) +
                          ") is not a token id");
  }
  return static_cast<size_t>(id);
}

// TemplateProcessing that adds BOS before (and EOS after) each sequence, as llama.cpp does.
json post_processor(const std::vector<std::string>& tokens, const formats::GgufFile& file,
                    bool add_bos, bool add_eos) {
  json specials = json::object();
  auto special = [&](const char* key) -> std::string {
    const size_t id = token_id_of(file, tokens, key);
    const std::string& token = tokens[id];
    specials[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
    return token;
  };
  const std::string bos = add_bos ? special("tokenizer.ggml.bos_token_id") : "";
  const std::string eos = add_eos ? special("tokenizer.ggml.eos_token_id") : "";
  auto sequence = [&](const char* name) {
    json out = json::array();
    if (add_bos) out.push_back({{"SpecialToken", {{"id", bos}, {"type_id", 0}}}});
    out.push_back({{"Sequence", {{"id", name}, {"type_id", 0}}}});
    if (add_eos) out.push_back({{"SpecialToken", {{"id", eos}, {"type_id", 0}}}});
    return out;
  };
  json single = sequence("A");
  json pair = single;
  for (const json& piece : sequence("B")) pair.push_back(piece);
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

// tokenizer.ggml.token_type, one per token (absent: every token normal).
std::vector<int64_t> token_types(const formats::GgufFile& file, size_t tokens) {
  std::vector<int64_t> types(tokens, 1);
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != tokens) {
      throw InvalidArgument(file.path() + ": tokenizer.ggml.token_type has " +
                            std::to_string(types.size()) + " entries for " +
                            std::to_string(tokens) + " tokens");
    }
  }
  return types;
}

// The vocabulary, and the added tokens: control (and SentencePiece's unknown) tokens special,
// user-defined ones plain.
void vocab_and_added(const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
                     json& vocab, json& added) {
  vocab = json::object();
  added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    vocab[tokens[id]] = id;
    const int64_t type = types[id];
    if (type == kControl || type == kUserDefined || type == kUnknown) {
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type != kUserDefined}});
    }
  }
}

// Byte-level BPE (tokenizer.ggml.model "gpt2").
json gpt2_tokenizer(const formats::GgufFile& file, const std::vector<std::string>& tokens) {
  const PreTokenizer pre = pre_tokenizer(file);
  json vocab, added;
  vocab_and_added(tokens, token_types(file, tokens.size()), vocab, added);
  json merges = json::array();
  if (file.find("tokenizer.ggml.merges") != nullptr) {
    for (const std::string& m : file.get_string_array("tokenizer.ggml.merges")) merges.push_back(m);
  }
  const bool add_bos = flag(file, "tokenizer.ggml.add_bos_token", pre.add_bos);
  const bool add_eos = flag(file, "tokenizer.ggml.add_eos_token", false);
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre.config},
      {"post_processor", post_processor(tokens, file, add_bos, add_eos)},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", pre.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

// SentencePiece (tokenizer.ggml.model "llama"), as llama.cpp tokenizes it: spaces become "▁", one
// is prepended (tokenizer.ggml.add_space_prefix, default true), the text's UTF-8 characters are
// merged pairwise, always the pair whose concatenation is the vocabulary token of highest score
// (tokenizer.ggml.scores), and what remains outside the vocabulary becomes <0xXX> byte tokens.
// That is BPE with byte fallback whose merges are every pair (a, b) of tokens whose concatenation
// is a token, ranked by that token's score: the form Hugging Face's converter gives Llama's
// SentencePiece models. The one difference: llama.cpp breaks a tie between two pairs that make the
// same token by position (leftmost first), BPE by the pairs' ranks (here: the left token's id).
json llama_tokenizer(const formats::GgufFile& file, const std::vector<std::string>& tokens) {
  const std::vector<int64_t> types = token_types(file, tokens.size());
  if (file.find("tokenizer.ggml.scores") == nullptr) {
    throw InvalidArgument(file.path() + ": tokenizer.ggml.model 'llama' needs tokenizer.ggml.scores");
  }
  const std::vector<double> scores = file.get_float_array("tokenizer.ggml.scores");
  if (scores.size() != tokens.size()) {
    throw InvalidArgument(file.path() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                          " entries for " + std::to_string(tokens.size()) + " tokens");
  }
  for (size_t id = 0; id < scores.size(); ++id) {
    // The merge order sorts by score: a NaN would break the ordering.
    if (!std::isfinite(scores[id])) {
      throw InvalidArgument(file.path() + ": tokenizer.ggml.scores[" + std::to_string(id) + "] is not finite");
    }
  }
  json vocab, added;
  vocab_and_added(tokens, types, vocab, added);
  std::unordered_map<std::string, size_t> id_of;
  for (size_t id = 0; id < tokens.size(); ++id) id_of.emplace(tokens[id], id);
  struct Merge {
    double score;
    size_t left, right;
  };
  std::vector<Merge> merges;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] == kByte) continue;  // <0xXX> is not text
    const std::string& token = tokens[id];
    for (size_t cut = tokenizer::utf8_len(static_cast<unsigned char>(token[0])); cut < token.size();
         cut += tokenizer::utf8_len(static_cast<unsigned char>(token[cut]))) {
      const auto left = id_of.find(token.substr(0, cut));
      const auto right = id_of.find(token.substr(cut));
      if (left != id_of.end() && right != id_of.end()) merges.push_back({scores[id], left->second, right->second});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.left < b.left;
  });
  json merge_list = json::array();
  for (const Merge& m : merges) merge_list.push_back(json::array({tokens[m.left], tokens[m.right]}));

  const bool add_space_prefix = flag(file, "tokenizer.ggml.add_space_prefix", true);
  const bool add_bos = flag(file, "tokenizer.ggml.add_bos_token", true);
  const bool add_eos = flag(file, "tokenizer.ggml.add_eos_token", false);
  const std::string space = "\xE2\x96\x81";  // ▁
  json normalizers = json::array();
  if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", space}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}});
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}});
  if (add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  std::string unk = "<unk>";
  if (file.find("tokenizer.ggml.unknown_token_id") != nullptr) {
    unk = tokens[token_id_of(file, tokens, "tokenizer.ggml.unknown_token_id")];
  }
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", post_processor(tokens, file, add_bos, add_eos)},
      {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", id_of.count(unk) ? json(unk) : json(nullptr)},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

}  // namespace

std::string gguf_tokenizer_json(const formats::GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama") {
    throw Unsupported(file.path() + ": tokenizer.ggml.model '" + model +
                      "' is not supported yet (gpt2: byte-level BPE; llama: SentencePiece)");
  }
  const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  const json tokenizer = model == "gpt2" ? gpt2_tokenizer(file, tokens) : llama_tokenizer(file, tokens);
  try {
    return tokenizer.dump();
  } catch (const json::type_error&) {
    // GGUF strings are UTF-8; tokenizer.json is JSON text. Name the first string that is not.
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
      if (file.find(key) == nullptr) continue;
      const std::vector<std::string> strings = file.get_string_array(key);
      for (size_t i = 0; i < strings.size(); ++i) {
        try {
          (void)json(strings[i]).dump();
        } catch (const json::type_error&) {
          throw InvalidArgument(file.path() + ": " + key + "[" + std::to_string(i) + "] is not valid UTF-8");
        }
      }
    }
    throw InvalidArgument(file.path() + ": the tokenizer metadata is not valid UTF-8");
  }
}

std::optional<std::string> gguf_chat_template(const formats::GgufFile& file) {
  if (file.find("tokenizer.chat_template") == nullptr) return std::nullopt;
  return file.get_string("tokenizer.chat_template");
}

nlohmann::json gguf_special_tokens_map(const formats::GgufFile& file) {
  json out = json::object();
  if (file.find("tokenizer.ggml.tokens") == nullptr) return out;
  const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  for (const auto& [name, key] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"},
                                  std::pair{"eos_token", "tokenizer.ggml.eos_token_id"},
                                  std::pair{"unk_token", "tokenizer.ggml.unknown_token_id"},
                                  std::pair{"pad_token", "tokenizer.ggml.padding_token_id"}}) {
    if (file.find(key) != nullptr) out[name] = tokens[token_id_of(file, tokens, key)];
  }
  return out;
}

}  // namespace lowbit::models
