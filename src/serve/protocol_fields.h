// Internal to the protocol files: typed reads of request fields that fail with ApiError naming the
// field, in OpenAI's wording for type errors ("Invalid type for 'n': expected an integer, but got a
// string instead.").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "serve/protocol.h"

namespace lowbit::serve::detail {

using Json = nlohmann::ordered_json;

// "a string", "an object", "null", ... for messages.
std::string json_kind(const Json& value);

// A double as Python's repr prints it for floats ("2.0", "0.1", "inf"), so vLLM's messages read
// the same.
std::string python_float(double value);

[[noreturn]] void throw_type_error(std::string_view param, std::string_view expected,
                                   const Json& got);

// Parses a request body: ApiError 400 naming the position for malformed JSON (saying so for
// invalid UTF-8), and when the body is not a JSON object.
Json parse_body(std::string_view body);

// Typed access to one JSON object. A field that is absent or null reads as "not given".
class Fields {
 public:
  Fields(const Json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  const Json* get(std::string_view key) const;  // nullptr: absent or null
  std::string param(std::string_view key) const { return prefix_ + std::string(key); }

  std::optional<bool> boolean(std::string_view key) const;
  // Integers; floats with an integral value are accepted as pydantic's lax mode does.
  std::optional<int64_t> integer(std::string_view key) const;
  std::optional<double> number(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;
  const Json* object(std::string_view key) const;  // nullptr when absent or null
  const Json* array(std::string_view key) const;

 private:
  const Json& object_;
  std::string prefix_;
};

// The integer in `value` (an element of an array named `param`), as Fields::integer reads one.
int64_t integer_value(const Json& value, std::string_view param);

}  // namespace lowbit::serve::detail
