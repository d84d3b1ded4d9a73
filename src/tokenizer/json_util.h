// Reading tokenizer.json with error messages that name the file and the field at fault, e.g.
// "tokenizer.json: model.merges[17]: expected 2 parts, got 4". Internal to src/tokenizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lowbit::tokenizer {

using Json = nlohmann::json;

// The location of a JSON value: a file name plus a dotted path inside it.
class JsonPath {
 public:
  explicit JsonPath(std::string file, std::string path = "", int depth = 0)
      : file_(std::move(file)), path_(std::move(path)), depth_(depth) {}

  JsonPath operator/(std::string_view key) const;  // appends ".key"
  JsonPath operator[](size_t index) const;         // appends "[index]"
  JsonPath quoted(std::string_view key) const;     // appends ["key"] (for map entries)
  std::string str() const;                         // "file: path", or "file" at the root
  const std::string& file() const { return file_; }
  // Nesting depth; parsers of recursive components (Sequence) refuse absurd depths with
  // check_depth() instead of overflowing the stack.
  int depth() const { return depth_; }
  void check_depth() const;

  [[noreturn]] void fail(const std::string& what) const;         // InvalidArgument
  [[noreturn]] void unsupported(const std::string& what) const;  // Unsupported

 private:
  std::string file_;
  std::string path_;
  int depth_ = 0;
};

std::string json_type_name(const Json& v);

// `obj[key]`, or nullptr when the key is absent or null (tokenizers treats both as "not set").
const Json* find_field(const Json& obj, std::string_view key);

// Accessors for the field `key` of the object `obj` located at `at`. Those with a default return
// it when the field is absent or null; those without fail then. A present field of the wrong type
// always fails.
const Json& require_object(const Json& v, const JsonPath& at);
const Json& require_array(const Json& v, const JsonPath& at);
const Json& get_field(const Json& obj, std::string_view key, const JsonPath& at);
bool get_bool(const Json& obj, std::string_view key, const JsonPath& at, bool def);
std::string get_string(const Json& obj, std::string_view key, const JsonPath& at);
std::optional<std::string> get_optional_string(const Json& obj, std::string_view key,
                                               const JsonPath& at);
int64_t get_int(const Json& obj, std::string_view key, const JsonPath& at, int64_t min,
                int64_t max);
int64_t get_int(const Json& obj, std::string_view key, const JsonPath& at, int64_t min,
                int64_t max, int64_t def);
// A string holding exactly one Unicode char (Rust `char` fields such as Metaspace.replacement).
char32_t get_char(const Json& obj, std::string_view key, const JsonPath& at);
// The "type" tag of a component object.
std::string get_type(const Json& obj, const JsonPath& at);
// Checks that v is an integer within [min, max] and returns it.
int64_t as_int(const Json& v, const JsonPath& at, int64_t min, int64_t max);
std::string as_string(const Json& v, const JsonPath& at);

}  // namespace lowbit::tokenizer
