// GGUF tokenizer metadata → tokenizer.json text (see gguf_tokenizer.h).
#include "models/gguf_tokenizer.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "lowbit/error.h"

namespace lowbit::models {
namespace {

using nlohmann::json;

// llama.cpp's token types (llama_token_type / gguf-py TokenType).
constexpr int64_t kControl = 3;
constexpr int64_t kUserDefined = 4;

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

// TemplateProcessing that adds BOS before (and EOS after) each sequence, as llama.cpp does.
json post_processor(const std::vector<std::string>& tokens, const formats::GgufFile& file,
                    bool add_bos, bool add_eos) {
  json specials = json::object();
  auto special = [&](const char* key) -> std::string {
    const int64_t id = file.get_int(key);
    if (id < 0 || id >= static_cast<int64_t>(tokens.size())) {
      throw InvalidArgument(file.path() + ": metadata key \"" + key + "\" (" +
                            std::to_string(id) + ") is not a token id");
    }
    const std::string& token = tokens[static_cast<size_t>(id)];
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

}  // namespace

std::string gguf_tokenizer_json(const formats::GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    throw Unsupported(file.path() + ": tokenizer.ggml.model '" + model +
                      "' is not supported yet (gpt2: byte-level BPE)");
  }
  const PreTokenizer pre = pre_tokenizer(file);
  const std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  std::vector<int64_t> types;
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != tokens.size()) {
      throw InvalidArgument(file.path() + ": tokenizer.ggml.token_type has " +
                            std::to_string(types.size()) + " entries for " +
                            std::to_string(tokens.size()) + " tokens");
    }
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    vocab[tokens[id]] = id;
    const int64_t type = types.empty() ? 1 : types[id];
    if (type == kControl || type == kUserDefined) {
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == kControl}});
    }
  }
  json merges = json::array();
  if (file.find("tokenizer.ggml.merges") != nullptr) {
    for (const std::string& m : file.get_string_array("tokenizer.ggml.merges")) merges.push_back(m);
  }
  const bool add_bos = flag(file, "tokenizer.ggml.add_bos_token", pre.add_bos);
  const bool add_eos = flag(file, "tokenizer.ggml.add_eos_token", false);
  json tokenizer = {
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
  return tokenizer.dump();
}

}  // namespace lowbit::models
