// The tokenizer a GGUF file carries (tokenizer.ggml.*), as the tokenizer.json text Hugging Face's
// tokenizers would read, so that lowbit's Tokenizer::from_json_string loads it like any other.
// Lives in models/ (not tokenizer/) because it reads a formats::GgufFile and only writes JSON;
// lowbit_tokenizer does not depend on lowbit_formats.
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE) with tokenizer.ggml.pre "llama-bpe" /
// "llama3" / "llama-v3" (Llama 3's split regex; merges ignored for words already in the vocab, as
// llama.cpp does for that pre-tokenizer), "qwen2" / "deepseek-r1-qwen" (Qwen2's regex, digits one
// at a time; merges always applied, no BOS by default) or "gpt-2" (GPT-2's byte-level
// regex); and "llama" (SentencePiece: tokenizer.ggml.scores, byte fallback, a prefix space unless
// tokenizer.ggml.add_space_prefix is false, BOS by default), as llama.cpp tokenizes it.
// Tokens of type CONTROL become special added tokens (and SentencePiece's UNKNOWN), USER_DEFINED
// ones plain added tokens. BOS is prepended when tokenizer.ggml.add_bos_token says so (absent:
// llama.cpp's default for the model or pre-tokenizer); EOS appended when
// tokenizer.ggml.add_eos_token is true. Anything else (other models or pre-tokenizers) is
// Unsupported, naming the key.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "formats/gguf.h"

namespace lowbit::models {

std::string gguf_tokenizer_json(const formats::GgufFile& file);

// What a model folder's tokenizer_config.json gives, from the GGUF metadata: the chat template
// (tokenizer.chat_template; nullopt when absent) and the special tokens' strings (bos_token,
// eos_token, unk_token, pad_token from tokenizer.ggml.{bos,eos,unknown,padding}_token_id; absent
// ones left out), the variables a chat template reads.
std::optional<std::string> gguf_chat_template(const formats::GgufFile& file);
nlohmann::json gguf_special_tokens_map(const formats::GgufFile& file);

}  // namespace lowbit::models
