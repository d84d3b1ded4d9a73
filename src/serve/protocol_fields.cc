#include "serve/protocol_fields.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace lowbit::serve::detail {

std::string json_kind(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a decimal";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, ec == std::errc() ? end : buffer);
  // Python writes a float with an integral value as "2.0" and keeps the shortest round trip
  // otherwise, as to_chars does.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

void throw_type_error(std::string_view param, std::string_view expected, const Json& got) {
  throw ApiError(400, "Invalid type for '" + std::string(param) + "': expected " +
                          std::string(expected) + ", but got " + json_kind(got) + " instead.",
                 std::string(param));
}

Json parse_body(std::string_view body) {
  Json parsed;
  try {
    parsed = Json::parse(body.begin(), body.end());
  } catch (const Json::parse_error& e) {
    // nlohmann's text ends with "; last read: '<bytes>'", which may echo invalid UTF-8 back:
    // keep only the reason.
    std::string reason = e.what();
    if (size_t colon = reason.find(": "); colon != std::string::npos) reason.erase(0, colon + 2);
    if (size_t last = reason.find("; last read"); last != std::string::npos) reason.erase(last);
    const std::string where = "at byte " + std::to_string(e.byte);
    if (reason.find("UTF-8") != std::string::npos) {
      throw ApiError(400, "The request body is not valid UTF-8 (" + where + "): " + reason);
    }
    throw ApiError(400, "The request body is not valid JSON (" + where + "): " + reason);
  } catch (const Json::exception& e) {
    // out_of_range 406: a number beyond double's range (1e999).
    std::string reason = e.what();
    if (size_t bracket = reason.find("] "); bracket != std::string::npos) reason.erase(0, bracket + 2);
    throw ApiError(400, "The request body is not valid JSON: " + reason);
  }
  if (!parsed.is_object()) {
    throw ApiError(400, "The request body must be a JSON object, but got " + json_kind(parsed) +
                            ".");
  }
  return parsed;
}

const Json* Fields::get(std::string_view key) const {
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> Fields::boolean(std::string_view key) const {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) throw_type_error(param(key), "a boolean", *value);
  return value->get<bool>();
}

int64_t integer_value(const Json& value, std::string_view param) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ApiError(400, "Invalid value for '" + std::string(param) + "': " + std::to_string(u) +
                              " is out of the 64-bit integer range.", std::string(param));
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 as a double: anything at or beyond it does not fit.
    if (std::isfinite(d) && std::floor(d) == d && d >= -9223372036854775808.0 &&
        d < 9223372036854775808.0) {
      return static_cast<int64_t>(d);
    }
    throw ApiError(400, "Invalid value for '" + std::string(param) + "': expected an integer, but got " +
                            python_float(d) + ".", std::string(param));
  }
  throw_type_error(param, "an integer", value);
}

std::optional<int64_t> Fields::integer(std::string_view key) const {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  return integer_value(*value, param(key));
}

std::optional<double> Fields::number(std::string_view key) const {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) throw_type_error(param(key), "a number", *value);
  return value->get<double>();
}

std::optional<std::string> Fields::string(std::string_view key) const {
  const Json* value = get(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) throw_type_error(param(key), "a string", *value);
  return value->get<std::string>();
}

const Json* Fields::object(std::string_view key) const {
  const Json* value = get(key);
  if (value != nullptr && !value->is_object()) throw_type_error(param(key), "an object", *value);
  return value;
}

const Json* Fields::array(std::string_view key) const {
  const Json* value = get(key);
  if (value != nullptr && !value->is_array()) throw_type_error(param(key), "an array", *value);
  return value;
}

}  // namespace lowbit::serve::detail
