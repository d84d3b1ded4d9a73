// Typed, checked access to one JSON object of a config file (config.json, generation_config.json,
// or a nested object such as rope_scaling). Every error is an InvalidArgument that names the file
// and the dotted field path: "config.json: rope_scaling.factor must be a number, got string".
// A JSON null counts as absent for the *_or / optional getters, as transformers turns null into
// None and then applies its default; has_key() tells null and absent apart where that matters.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lowbit::models {

class ConfigReader {
 public:
  // Parses `text` (InvalidArgument "<file>: not valid JSON: ..." otherwise); the top level must be
  // an object.
  static ConfigReader parse(const std::string& text, const std::string& file);

  ConfigReader(const nlohmann::json* object, std::string file, std::string prefix);

  const std::string& file() const { return file_; }
  // "rope_scaling.factor" for key "factor" of the nested object "rope_scaling".
  std::string path(const std::string& key) const { return prefix_ + key; }

  size_t size() const { return object_->size(); }  // number of keys
  bool has_key(const std::string& key) const;      // present, even if null
  bool has(const std::string& key) const;          // present and not null

  std::optional<int64_t> optional_int(const std::string& key) const;
  std::optional<double> optional_number(const std::string& key) const;
  std::optional<bool> optional_bool(const std::string& key) const;
  std::optional<std::string> optional_string(const std::string& key) const;

  int64_t int_or(const std::string& key, int64_t fallback) const;
  double number_or(const std::string& key, double fallback) const;
  bool bool_or(const std::string& key, bool fallback) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;

  int64_t required_int(const std::string& key) const;

  // Integer list; a single integer is accepted as a list of one (eos_token_id may be either).
  std::optional<std::vector<int64_t>> optional_int_list(const std::string& key) const;
  std::optional<std::vector<double>> optional_number_list(const std::string& key) const;
  std::optional<std::vector<std::string>> optional_string_list(const std::string& key) const;

  // The nested object under `key`, if present and not null (an error if it is not an object).
  std::optional<ConfigReader> optional_object(const std::string& key) const;

  // The raw JSON value under `key` (null if absent or JSON null).
  const nlohmann::json* raw(const std::string& key) const { return find(key); }

  // "config.json: <path(key)> <what>" as an InvalidArgument.
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json* find(const std::string& key) const;  // null if absent or JSON null

  std::shared_ptr<nlohmann::json> owned_;  // the parsed document, for the top-level reader
  const nlohmann::json* object_;
  std::string file_;
  std::string prefix_;
};

}  // namespace lowbit::models
