#include "tokenizer/jinja/json_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tokenizer/jinja/text.h"

namespace lowbit::jinja {

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value(j.get<bool>());
    case T::number_integer:
      return Value(static_cast<int64_t>(j.get<int64_t>()));
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value(static_cast<double>(u));  // beyond lowbit's 64-bit ints
      }
      return Value(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value(j.get<double>());
    case T::string:
      return Value(j.get<std::string>());
    case T::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<Dict>();
      d->entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d->entries.emplace_back(Value(it.key()), from_json(it.value()));
      }
      return Value::dict(std::move(d));
    }
    default:
      fail("unsupported JSON value (binary or discarded) in the template variables");
  }
}

namespace {

void append_escaped(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    char buf[16];
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      text::append_utf8(out, c);
    }
  }
  out += '"';
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

// Python json converts these key types to strings; anything else is a TypeError.
std::string key_string(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.as_string();
    case Value::Kind::kBool:
      return key.as_bool() ? "true" : "false";
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kFloat:
      return float_json(key.as_float());
    default:
      fail("TypeError: keys must be str, int, float, bool or None, not " + key.type_name());
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& o) : opt_(o) {
    item_sep_ = o.item_separator.value_or(o.indent ? "," : ", ");
  }

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out_ += "null";
        return;
      case Value::Kind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out_ += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        out_ += float_json(v.as_float());
        return;
      case Value::Kind::kString:
        append_escaped(out_, v.as_string(), opt_.ensure_ascii);
        return;
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        if (v.is_range()) break;
        write_list(v.items(), level);
        return;
      case Value::Kind::kDict:
        write_dict(v.dict_ref(), level);
        return;
      default:
        break;
    }
    fail("TypeError: Object of type " + v.type_name() + " is not JSON serializable");
  }

  std::string take() { return std::move(out_); }

 private:
  // Opens a container; returns the separator between its items.
  std::string open(char bracket, int level) {
    out_ += bracket;
    if (!opt_.indent) return item_sep_;
    std::string newline_indent = cat("\n", repeat(level + 1));
    out_ += newline_indent;
    return item_sep_ + newline_indent;
  }

  void close(char bracket, int level) {
    if (opt_.indent) out_ += cat("\n", repeat(level));
    out_ += bracket;
  }

  std::string repeat(int level) const {
    std::string s;
    for (int i = 0; i < level; ++i) s += *opt_.indent;
    return s;
  }

  void write_list(const ValueList& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    std::string sep = open('[', level);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += sep;
      write(items[i], level + 1);
    }
    close(']', level);
  }

  void write_dict(const Dict& d, int level) {
    if (d.entries.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : d.entries) entries.push_back(&e);
    if (opt_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return less_than(a->first, b->first); });
    }
    std::string sep = open('{', level);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out_ += sep;
      append_escaped(out_, key_string(entries[i]->first), opt_.ensure_ascii);
      out_ += opt_.key_separator;
      write(entries[i]->second, level + 1);
    }
    close('}', level);
  }

  const JsonDumpOptions& opt_;
  std::string item_sep_;
  std::string out_;
};

}  // namespace

std::string to_json(const Value& v, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(v, 0);
  return writer.take();
}

}  // namespace lowbit::jinja
