// Conversion between JSON documents and interpreter values, and the `tojson` filter that
// transformers installs: Python's json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), not jinja's HTML-safe variant.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace lowbit::jinja {

// Objects keep their key order (ordered_json), as Python's json.loads would.
Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  std::optional<std::string> indent;          // nullopt: one line
  std::optional<std::string> item_separator;  // default ", " one-line, "," when indented
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

std::string to_json(const Value& v, const JsonDumpOptions& options);

}  // namespace lowbit::jinja
