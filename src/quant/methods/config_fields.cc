#include "quant/methods/config_fields.h"

#include <regex>

#include "lowbit/error.h"
#include "lowbit/quant_method.h"

namespace lowbit::quant {
namespace {

std::string key_of(const nlohmann::json& j, const std::vector<std::string>& keys) {
  if (j.is_object()) {
    for (const std::string& k : keys) {
      if (j.contains(k)) return k;
    }
  }
  return keys.front();
}

}  // namespace

bool bool_field(const nlohmann::json& j, const std::vector<std::string>& keys, bool fallback,
                const std::string& where) {
  const nlohmann::json v = get_from_keys_or(j, keys, fallback);
  if (!v.is_boolean()) {
    throw InvalidArgument(where + "." + key_of(j, keys) + " must be true or false, not " + v.dump());
  }
  return v.get<bool>();
}

std::string string_field(const nlohmann::json& j, const std::vector<std::string>& keys,
                         const std::string& fallback, const std::string& where) {
  const nlohmann::json v = get_from_keys_or(j, keys, fallback);
  if (!v.is_string()) {
    throw InvalidArgument(where + "." + key_of(j, keys) + " must be a string, not " + v.dump());
  }
  return v.get<std::string>();
}

int64_t int_field(const nlohmann::json& j, const std::vector<std::string>& keys,
                  const std::string& where) {
  const nlohmann::json v = get_from_keys(j, keys, where);
  if (!v.is_number_integer()) {
    throw InvalidArgument(where + "." + key_of(j, keys) + " must be an integer, not " + v.dump());
  }
  return v.get<int64_t>();
}

std::vector<std::string> string_list_field(const nlohmann::json& j,
                                           const std::vector<std::string>& keys,
                                           const std::string& where) {
  const nlohmann::json v = get_from_keys_or(j, keys, nullptr);
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array()) {
    throw InvalidArgument(where + "." + key_of(j, keys) + " must be a list of module names");
  }
  for (const auto& e : v) {
    if (!e.is_string()) {
      throw InvalidArgument(where + "." + key_of(j, keys) + " holds " + e.dump() +
                            ", not a module name");
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

bool glob_match(const std::string& pattern, const std::string& name) {
  std::string re;
  for (char ch : pattern) {
    if (ch == '*') {
      re += ".*";
    } else if (ch == '?') {
      re += '.';
    } else {
      if (std::string("\\^$.|+()[]{}").find(ch) != std::string::npos) re += '\\';
      re += ch;
    }
  }
  return std::regex_match(name, std::regex(re));
}

}  // namespace lowbit::quant
