// A YAML document as plain values, read the way llm-compressor reads recipes (PyYAML's safe_load,
// YAML 1.1 scalars: `yes`/`on` are booleans, `1e-5` without a dot is a string), plus the few Python
// tags that llm-compressor itself writes into recipe.yaml (enum members, tuples, sentinels, torch
// devices) which PyYAML's safe loader cannot read back. yaml-cpp does the syntax; everything that
// touches it lives in yaml_value.cc so callers never see a yaml-cpp type or exception.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lowbit::quant::detail {

// Integers below this magnitude are held exactly by a double, hence typed Int by the resolver and
// written back unchanged; larger ones stay approximate floats.
constexpr int64_t kExactIntLimit = int64_t{1} << 53;

struct YamlValue {
  // Sentinel: llm-compressor's "argument not provided" marker (`!!python/object/apply:...Sentinel`);
  // text_ holds its name ("not_provided").
  enum class Kind { Null, Bool, Int, Float, String, Seq, Map, Sentinel };

  Kind kind_ = Kind::Null;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string text_;                // String / Sentinel value; for every scalar its source text
  std::vector<std::string> keys_;   // Map: keys, in document order (no duplicates)
  std::vector<YamlValue> items_;    // Seq: elements; Map: values, parallel to keys_
  int line_ = 0;                    // 1-based source line, for messages

  bool is_scalar() const { return kind_ != Kind::Seq && kind_ != Kind::Map; }
  // The value under `key` of a Map, or nullptr.
  const YamlValue* find(const std::string& key) const;
  // Short human description for messages: `"abc"`, `12`, `a list`, `a mapping`, ...
  std::string describe() const;
};

// Parses exactly one YAML (or JSON) document. Throws InvalidArgument naming `where` and the line
// for syntax errors, several documents, text that is not UTF-8 or holds characters PyYAML refuses
// (control characters, also when written as escapes), duplicate keys, non-scalar keys, unknown
// tags, nesting deeper than 64 or more than 100000 values after alias expansion (so a hostile file
// cannot make the expansion explode). An empty document gives Kind::Null.
YamlValue load_yaml(const std::string& text, const std::string& where);

// The value as JSON (what the compressed-tensors parsers take). Throws InvalidArgument for a
// Sentinel, which has no JSON form.
nlohmann::ordered_json yaml_to_json(const YamlValue& v, const std::string& where);

// How PyYAML's SafeLoader resolves a plain (unquoted) scalar: fills kind/bool/int/float of `out`.
void resolve_plain_scalar(const std::string& text, YamlValue& out);

}  // namespace lowbit::quant::detail
