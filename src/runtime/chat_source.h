// A model path's chat template and the special tokens it reads, wherever the model keeps them: a
// GGUF file's metadata (tokenizer.chat_template, tokenizer.ggml.*_token_id), else the folder's
// chat_template.jinja / tokenizer_config.json (ChatTemplate::from_dir, special_tokens_map).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/chat_template.h"

namespace lowbit::runtime {

// nullopt when the model has no template. InvalidArgument for a malformed one (the file named).
std::optional<ChatTemplate> model_chat_template(const std::string& model_path);

// bos_token, eos_token, unk_token, pad_token as strings (absent ones left out).
nlohmann::json model_special_tokens(const std::string& model_path);

}  // namespace lowbit::runtime
