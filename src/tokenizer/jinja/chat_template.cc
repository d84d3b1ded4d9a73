// lowbit::ChatTemplate: the model-facing wrapper around jinja::Template.
#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lowbit/error.h"
#include "tokenizer/jinja/template.h"

namespace lowbit {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open " + path.string());
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw IoError("cannot read " + path.string());
  return buf.str();
}

std::optional<nlohmann::ordered_json> read_tokenizer_config(const std::string& model_dir) {
  std::filesystem::path path = std::filesystem::path(model_dir) / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  try {
    return nlohmann::ordered_json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(path.string() + ": malformed JSON: " + e.what());
  }
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), template_(std::make_shared<const jinja::Template>(source_)) {}

std::optional<ChatTemplate> ChatTemplate::from_dir(const std::string& model_dir) {
  std::filesystem::path jinja_path = std::filesystem::path(model_dir) / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) return ChatTemplate(read_file(jinja_path));
  std::optional<nlohmann::ordered_json> config = read_tokenizer_config(model_dir);
  if (!config || !config->is_object() || !config->contains("chat_template")) return std::nullopt;
  const auto& field = (*config)["chat_template"];
  std::string where =
      (std::filesystem::path(model_dir) / "tokenizer_config.json").string() + ": chat_template";
  if (field.is_null()) return std::nullopt;
  if (field.is_string()) return ChatTemplate(field.get<std::string>());
  if (!field.is_array())
    throw InvalidArgument(where + " must be a string or a list of {name, template}");
  for (const auto& entry : field) {
    if (entry.is_object() && entry.value("name", "") == "default") {
      if (!entry.contains("template") || !entry["template"].is_string()) {
        throw InvalidArgument(where + ": the 'default' entry has no string 'template'");
      }
      return ChatTemplate(entry["template"].get<std::string>());
    }
  }
  throw InvalidArgument(where + " lists several templates but none is named 'default'");
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) throw InvalidArgument("chat template: messages must be a JSON array");
  if (!extra.is_object())
    throw InvalidArgument("chat template: extra variables must be a JSON object");
  // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
  // **kwargs)
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = messages;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  return template_->render(vars);
}

nlohmann::json special_tokens_map(const std::string& model_dir) {
  nlohmann::json out = nlohmann::json::object();
  std::optional<nlohmann::ordered_json> config = read_tokenizer_config(model_dir);
  if (!config || !config->is_object()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!config->contains(key)) continue;
    const auto& v = (*config)[key];
    if (v.is_string()) {
      out[key] = v.get<std::string>();
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      out[key] = v["content"].get<std::string>();
    } else if (!v.is_null()) {
      throw InvalidArgument(model_dir + "/tokenizer_config.json: " + key +
                            " must be a string or {\"content\": ...}");
    }
  }
  return out;
}

}  // namespace lowbit
