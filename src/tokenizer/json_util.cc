#include "tokenizer/json_util.h"

#include "lowbit/error.h"
#include "tokenizer/unicode.h"

namespace lowbit::tokenizer {

JsonPath JsonPath::operator/(std::string_view key) const {
  return JsonPath(file_, path_.empty() ? std::string(key) : path_ + "." + std::string(key),
                  depth_ + 1);
}

JsonPath JsonPath::operator[](size_t index) const {
  return JsonPath(file_, path_ + "[" + std::to_string(index) + "]", depth_ + 1);
}

JsonPath JsonPath::quoted(std::string_view key) const {
  return JsonPath(file_, path_ + "[\"" + std::string(key) + "\"]", depth_ + 1);
}

void JsonPath::check_depth() const {
  if (depth_ > 64) fail("components nested too deeply");
}

std::string JsonPath::str() const { return path_.empty() ? file_ : file_ + ": " + path_; }

void JsonPath::fail(const std::string& what) const { throw InvalidArgument(str() + ": " + what); }

void JsonPath::unsupported(const std::string& what) const {
  throw Unsupported(str() + ": " + what);
}

std::string json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a float";
    default: return "an unsupported JSON value";
  }
}

const Json* find_field(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& require_object(const Json& v, const JsonPath& at) {
  if (!v.is_object()) at.fail("expected an object, got " + json_type_name(v));
  return v;
}

const Json& require_array(const Json& v, const JsonPath& at) {
  if (!v.is_array()) at.fail("expected an array, got " + json_type_name(v));
  return v;
}

const Json& get_field(const Json& obj, std::string_view key, const JsonPath& at) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) (at / key).fail("missing");
  return *v;
}

bool get_bool(const Json& obj, std::string_view key, const JsonPath& at, bool def) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return def;
  if (!v->is_boolean()) (at / key).fail("expected a boolean, got " + json_type_name(*v));
  return v->get<bool>();
}

std::string as_string(const Json& v, const JsonPath& at) {
  if (!v.is_string()) at.fail("expected a string, got " + json_type_name(v));
  return v.get<std::string>();
}

std::string get_string(const Json& obj, std::string_view key, const JsonPath& at) {
  return as_string(get_field(obj, key, at), at / key);
}

std::optional<std::string> get_optional_string(const Json& obj, std::string_view key,
                                               const JsonPath& at) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return std::nullopt;
  return as_string(*v, at / key);
}

int64_t as_int(const Json& v, const JsonPath& at, int64_t min, int64_t max) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) {
      at.fail(std::to_string(u) + " is out of range [" + std::to_string(min) + ", " +
              std::to_string(max) + "]");
    }
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) at.fail("expected an integer, got " + json_type_name(v));
  const auto i = v.get<int64_t>();
  if (i < min || i > max) {
    at.fail(std::to_string(i) + " is out of range [" + std::to_string(min) + ", " +
            std::to_string(max) + "]");
  }
  return i;
}

int64_t get_int(const Json& obj, std::string_view key, const JsonPath& at, int64_t min,
                int64_t max) {
  return as_int(get_field(obj, key, at), at / key, min, max);
}

int64_t get_int(const Json& obj, std::string_view key, const JsonPath& at, int64_t min,
                int64_t max, int64_t def) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) return def;
  return as_int(*v, at / key, min, max);
}

char32_t get_char(const Json& obj, std::string_view key, const JsonPath& at) {
  const std::string s = get_string(obj, key, at);
  size_t i = 0;
  if (s.empty() || (next_char(s, i), i != s.size())) {
    (at / key).fail("expected exactly one character, got \"" + s + "\"");
  }
  i = 0;
  return next_char(s, i);
}

std::string get_type(const Json& obj, const JsonPath& at) {
  require_object(obj, at);
  return get_string(obj, "type", at);
}

}  // namespace lowbit::tokenizer
