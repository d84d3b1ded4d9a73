// Hugging Face chat templates: renders a conversation to the prompt string exactly as
// transformers' tokenizer.apply_chat_template(..., tokenize=False) does, with lowbit's own
// Jinja interpreter (src/tokenizer/jinja/). Tokenize the result with add_special_tokens=false:
// templates print the BOS token themselves.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace lowbit {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // Parses the template source; throws InvalidArgument with line:column on syntax errors.
  explicit ChatTemplate(std::string source);

  // The model folder's template: chat_template.jinja, else tokenizer_config.json's
  // "chat_template" (a string, or a list of {name, template} from which "default" is taken).
  // nullopt when the folder has neither. Throws InvalidArgument for unreadable or malformed ones.
  static std::optional<ChatTemplate> from_dir(const std::string& model_dir);

  // messages: a JSON array of {role, content, ...}. extra: more template variables, e.g. the
  // special tokens (see special_tokens_map), tools, documents, date_string. As in transformers,
  // `tools` and `documents` are defined (None) unless extra sets them. Objects keep their key
  // order (ordered_json), which `tojson` output depends on; a plain nlohmann::json converts
  // implicitly but arrives with its keys sorted.
  // Throws InvalidArgument when the template raises (raise_exception, TypeError, undefined use);
  // the message carries jinja's text.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
};

// bos_token, eos_token, unk_token and pad_token from tokenizer_config.json, each as a string
// (the file may hold a string or an {"content": ...} object); null or absent ones are left out,
// as in transformers' special_tokens_map. Empty object when the file is missing.
nlohmann::json special_tokens_map(const std::string& model_dir);

}  // namespace lowbit
