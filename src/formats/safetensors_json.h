// JSON helpers shared by the safetensors reader, writer and checkpoint index. Internal to formats/.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lowbit::formats::detail {

// Parses `text` as JSON, rejecting what nlohmann would silently accept: a key repeated within one
// object (the last one would win, so two readers could disagree on which tensor a name means).
// Throws InvalidArgument "<file>: <what> ..." on any error.
nlohmann::json parse_json_strict(std::string_view text, const std::string& file,
                                 const std::string& what);

// `s` as a JSON string literal, escaped exactly as serde_json (the Python safetensors library)
// does. Throws InvalidArgument "<file>: <what> ... is not valid UTF-8" otherwise.
std::string json_quote(const std::string& s, const std::string& file, const std::string& what);

// `s` made printable for an error message (invalid UTF-8 and control bytes escaped), quoted.
std::string printable(const std::string& s);

// The JSON type name of `value` for messages: "string", "array", "number", ...
std::string json_type(const nlohmann::json& value);

}  // namespace lowbit::formats::detail
