// Chat template and special tokens of a model path (see chat_source.h).
#include "runtime/chat_source.h"

#include "formats/gguf.h"
#include "lowbit/error.h"
#include "models/gguf_model.h"
#include "models/gguf_tokenizer.h"

namespace lowbit::runtime {

std::optional<ChatTemplate> model_chat_template(const std::string& model_path) {
  if (const std::optional<std::string> gguf = models::find_gguf_model(model_path)) {
    const std::optional<std::string> source = models::gguf_chat_template(*formats::GgufFile::open(*gguf));
    if (!source) return std::nullopt;
    try {
      return ChatTemplate(*source);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(*gguf + ": tokenizer.chat_template: " + e.what());
    }
  }
  return ChatTemplate::from_dir(model_path);
}

nlohmann::json model_special_tokens(const std::string& model_path) {
  if (const std::optional<std::string> gguf = models::find_gguf_model(model_path)) {
    return models::gguf_special_tokens_map(*formats::GgufFile::open(*gguf));
  }
  return special_tokens_map(model_path);
}

}  // namespace lowbit::runtime
