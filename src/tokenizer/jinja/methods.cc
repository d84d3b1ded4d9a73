// Attribute and item lookup, and the Python methods of str, dict and list that templates call.
#include <algorithm>
#include <charconv>
#include <cstring>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/text.h"

namespace lowbit::jinja {
namespace {

using Method = Value (*)(const Value& self, const CallArgs& args);

std::string str_arg(const ArgBinder& a, size_t i, const char* fn) {
  const Value& v = a.get(i);
  if (!v.is_string())
    fail(std::string("TypeError: ") + fn + "() argument must be str, not " + v.type_name());
  return v.as_string();
}

int64_t int_arg(const ArgBinder& a, size_t i, int64_t fallback) {
  if (!a.has(i) || a.get(i).is_none()) return fallback;
  if (!a.get(i).is_integral())
    fail("TypeError: '" + a.get(i).type_name() + "' object cannot be interpreted as an integer");
  return a.get(i).as_int();
}

Value strip_method(const Value& self, const CallArgs& args, bool left, bool right, const char* fn) {
  ArgBinder a(fn, args, {"chars"});
  if (!a.has(0) || a.get(0).is_none()) return Value(text::strip(self.as_string(), left, right));
  std::u32string chars = text::decode(str_arg(a, 0, fn));
  return Value(text::strip(self.as_string(), left, right, &chars));
}

bool affix_match(const Value& self, const CallArgs& args, bool prefix) {
  ArgBinder a(prefix ? "startswith" : "endswith", args, {"prefix", "start"});
  std::string s = self.as_string();
  if (a.has(1))
    s = text::encode(
        text::decode(s).substr(static_cast<size_t>(std::max<int64_t>(0, int_arg(a, 1, 0)))));
  ValueList options =
      a.get(0).kind() == Value::Kind::kTuple ? a.get(0).items() : ValueList{a.get(0)};
  for (const Value& o : options) {
    if (!o.is_string()) fail("TypeError: startswith first arg must be str or a tuple of str");
    const std::string& p = o.as_string();
    if (p.size() <= s.size() &&
        (prefix ? s.compare(0, p.size(), p) : s.compare(s.size() - p.size(), p.size(), p)) == 0) {
      return true;
    }
  }
  return false;
}

// Code point index of the first (or last) occurrence, -1 when absent.
int64_t find_index(const std::string& s, const std::string& sub, bool last) {
  size_t pos = last ? s.rfind(sub) : s.find(sub);
  if (pos == std::string::npos) return -1;
  return static_cast<int64_t>(text::length(s.substr(0, pos)));
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  std::u32string cps = text::decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

bool case_check(const std::string& s, bool want_lower) {
  bool cased = false;
  for (char32_t c : text::decode(s)) {
    bool up = text::is_cased_upper(c), low = text::is_cased_lower(c);
    if ((want_lower && up) || (!want_lower && low)) return false;
    cased = cased || up || low;
  }
  return cased;
}

std::string title_string(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : text::decode(s)) {
    bool cased = text::is_cased_upper(c) || text::is_cased_lower(c);
    text::append_utf8(out, previous_cased ? text::to_lower(c) : text::to_upper(c));
    previous_cased = cased;
  }
  return out;
}

Value justify(const Value& self, const CallArgs& args, const char* fn) {
  ArgBinder a(fn, args, {"width", "fillchar"});
  int64_t width = int_arg(a, 0, 0);
  std::string fill = a.has(1) ? str_arg(a, 1, fn) : " ";
  const std::string& s = self.as_string();
  auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return self;
  int64_t padding = width - len;
  int64_t left = 0;
  if (std::strcmp(fn, "rjust") == 0) left = padding;
  if (std::strcmp(fn, "center") == 0) left = padding / 2 + (padding & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < padding; ++i) out += fill;
  return Value(std::move(out));
}

// str.format with automatic ({}) or explicit ({0}, {name}) fields and !s/!r; no format specs.
Value format_method(const Value& self, const CallArgs& args) {
  const std::string& f = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if ((f[i] == '{' || f[i] == '}') && i + 1 < f.size() && f[i + 1] == f[i]) {
      out += f[i++];
      continue;
    }
    if (f[i] != '{') {
      out += f[i];
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) fail("ValueError: Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    char conversion = 's';
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = field.size() > bang + 1 ? field[bang + 1] : 's';
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos)
      fail("str.format specs are not supported in chat templates");
    const Value* v = nullptr;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      size_t idx = auto_index;
      if (field.empty())
        ++auto_index;
      else if (std::from_chars(field.data(), field.data() + field.size(), idx).ec != std::errc())
        fail("ValueError: Too many decimal digits in format string");  // Python's words
      if (idx >= args.positional.size())
        fail("IndexError: Replacement index " + std::to_string(idx) + " out of range");
      v = &args.positional[idx];
    } else {
      for (const auto& [k, kv] : args.keyword) {
        if (k == field) v = &kv;
      }
      if (v == nullptr) fail("KeyError: '" + field + "'");
    }
    out += conversion == 'r' ? to_repr(*v) : to_str(*v);
    i = close;
  }
  return Value(std::move(out));
}

// Searching, testing and padding methods of str.
Value call_str_query_method(const std::string& name, const Value& self, const CallArgs& args) {
  const std::string& s = self.as_string();
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    ArgBinder a(name, args, {"sub"});
    int64_t idx = find_index(s, str_arg(a, 0, name.c_str()), name[0] == 'r');
    if (idx < 0 && name.find("index") != std::string::npos) fail("ValueError: substring not found");
    return Value(idx);
  }
  if (name == "count") {
    ArgBinder a(name, args, {"sub"});
    std::string sub = str_arg(a, 0, "count");
    if (sub.empty()) return Value(static_cast<int64_t>(text::length(s) + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    ArgBinder a(name, args, {"iterable"});
    std::string out;
    ValueList items = iterate(a.get(0));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        fail("TypeError: sequence item " + std::to_string(i) + ": expected str instance, " +
             items[i].type_name() + " found");
      }
      if (i) out += s;
      out += items[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    ArgBinder a(name, args, {"sep"});
    std::string sep = str_arg(a, 0, name.c_str());
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")})
                                 : Value::tuple({Value(""), Value(""), Value(s)});
    }
    return Value::tuple({Value(s.substr(0, p)), Value(sep), Value(s.substr(p + sep.size()))});
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value(all_chars(s, text::is_digit));
  if (name == "isalpha") return Value(all_chars(s, text::is_alpha));
  if (name == "isalnum")
    return Value(all_chars(s, [](char32_t c) { return text::is_alpha(c) || text::is_digit(c); }));
  if (name == "isspace") return Value(all_chars(s, text::is_space));
  if (name == "islower") return Value(case_check(s, true));
  if (name == "isupper") return Value(case_check(s, false));
  if (name == "zfill") {
    ArgBinder a(name, args, {"width"});
    int64_t pad = int_arg(a, 0, 0) - static_cast<int64_t>(text::length(s));
    if (pad <= 0) return self;
    size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(static_cast<size_t>(pad), '0') + s.substr(sign));
  }
  if (name == "ljust" || name == "rjust" || name == "center")
    return justify(self, args, name.c_str());
  if (name == "format") return format_method(self, args);
  fail("internal: unknown str method " + name);
}

// Splitting, stripping and case methods of str; the rest in call_str_query_method.
Value call_str_method(const std::string& name, const Value& self, const CallArgs& args) {
  const std::string& s = self.as_string();
  auto no_args = [&](const char* fn) { ArgBinder(fn, args, {}); };
  if (name == "strip") return strip_method(self, args, true, true, "strip");
  if (name == "lstrip") return strip_method(self, args, true, false, "lstrip");
  if (name == "rstrip") return strip_method(self, args, false, true, "rstrip");
  if (name == "split" || name == "rsplit") {
    ArgBinder a(name, args, {"sep", "maxsplit"});
    return Value::list(
        split_string(s, a.get_or(0, Value::none()), int_arg(a, 1, -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    ArgBinder a(name, args, {"keepends"});
    bool keep = a.has(0) && a.get(0).truthy();
    std::u32string cps = text::decode(s);
    ValueList lines;
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (!text::is_line_break(cps[i])) continue;
      size_t end = i;
      if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      lines.emplace_back(
          text::encode(std::u32string_view(cps).substr(start, (keep ? i + 1 : end) - start)));
      start = i + 1;
    }
    if (start < cps.size())
      lines.emplace_back(text::encode(std::u32string_view(cps).substr(start)));
    return Value::list(std::move(lines));
  }
  if (name == "startswith" || name == "endswith")
    return Value(affix_match(self, args, name == "startswith"));
  if (name == "replace") {
    ArgBinder a(name, args, {"old", "new", "count"});
    return Value(
        replace_string(s, str_arg(a, 0, "replace"), str_arg(a, 1, "replace"), int_arg(a, 2, -1)));
  }
  if (name == "upper") return no_args("upper"), Value(text::upper(s));
  if (name == "lower") return no_args("lower"), Value(text::lower(s));
  if (name == "title") return no_args("title"), Value(title_string(s));
  if (name == "capitalize") return no_args("capitalize"), Value(capitalize_string(s));
  if (name == "swapcase") {
    std::string out;
    for (char32_t c : text::decode(s))
      text::append_utf8(out, text::is_cased_upper(c) ? text::to_lower(c) : text::to_upper(c));
    return Value(std::move(out));
  }
  return call_str_query_method(name, self, args);
}

const char* const kStrMethods[] = {
    "strip",      "lstrip",  "rstrip",    "split",     "rsplit",  "splitlines", "startswith",
    "endswith",   "replace", "upper",     "lower",     "title",   "capitalize", "swapcase",
    "find",       "rfind",   "index",     "rindex",    "count",   "join",       "partition",
    "rpartition", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum",    "isspace",
    "islower",    "isupper", "zfill",     "ljust",     "rjust",   "center",     "format"};
// Python attributes that exist but that the sandbox refuses (they mutate) or lowbit lacks.
const char* const kDictOther[] = {"clear",   "copy",       "fromkeys", "pop",
                                  "popitem", "setdefault", "update"};
const char* const kListOther[] = {"append", "clear",  "copy",    "extend", "insert",
                                  "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool in_list(const char* const (&list)[N], const std::string& name) {
  return std::any_of(std::begin(list), std::end(list), [&](const char* n) { return name == n; });
}

Value bound(const Value& self, const std::string& name,
            Value (*fn)(const std::string&, const Value&, const CallArgs&)) {
  return Value::callable(name,
                         [self, name, fn](const CallArgs& args) { return fn(name, self, args); });
}

Value call_dict_method(const std::string& name, const Value& self, const CallArgs& args) {
  const Dict& d = self.dict_ref();
  if (name == "get") {
    ArgBinder a("get", args, {"key", "default"});
    const Value* v = d.find(a.get(0));
    return v ? *v : a.get_or(1, Value::none());
  }
  ArgBinder(name, args, {});
  ValueList out;
  for (const auto& [k, v] : d.entries) {
    if (name == "items")
      out.push_back(Value::tuple({k, v}));
    else
      out.push_back(name == "keys" ? k : v);
  }
  return Value::list(std::move(out));
}

Value call_list_method(const std::string& name, const Value& self, const CallArgs& args) {
  ArgBinder a(name, args, {"value"});
  const ValueList& items = self.items();
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], a.get(0))) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") fail("ValueError: " + to_repr(a.get(0)) + " is not in list");
  return Value(count);
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("SecurityError: access to attribute '" + name + "' of '" +
                          obj.type_name() + "' object is unsafe.");
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(cat("'", obj.type_name(), " object' has no attribute '", name, "'"));
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      require_defined(obj);
      break;
    case Value::Kind::kString:
      if (in_list(kStrMethods, name)) return bound(obj, name, call_str_method);
      break;
    case Value::Kind::kDict:
      if (name == "items" || name == "keys" || name == "values" || name == "get")
        return bound(obj, name, call_dict_method);
      if (in_list(kDictOther, name)) return unsafe(obj, name);
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.dict_ref().find(name)) return *v;
      break;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      if (name == "index" || name == "count") return bound(obj, name, call_list_method);
      if (obj.kind() == Value::Kind::kList && in_list(kListOther, name)) return unsafe(obj, name);
      break;
    default:
      break;
  }
  return no_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.kind() == Value::Kind::kDict) {
    if (const Value* v = obj.dict_ref().find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && key.is_integral()) {
    int64_t n = length(obj);
    int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i >= 0 && i < n) {
      if (obj.is_sequence()) return obj.items()[static_cast<size_t>(i)];
      std::string out;
      text::append_utf8(out, text::decode(obj.as_string())[static_cast<size_t>(i)]);
      return Value(std::move(out));
    }
    return Value::undefined(obj.type_name() + " object has no element " +
                            std::to_string(key.as_int()));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(cat("'", obj.type_name(), " object' has no element ", to_repr(key)));
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  require_defined(obj);
  for (const Value* b : {&start_v, &stop_v, &step_v}) {
    if (!b->is_none() && !b->is_integral())
      return Value::undefined("slice indices must be integers or None");
  }
  if (!obj.is_sequence() && !obj.is_string())
    return Value::undefined(cat("'", obj.type_name(), "' object is not subscriptable"));
  int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) fail("ValueError: slice step cannot be zero");
  int64_t n = length(obj);
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  std::vector<size_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::u32string cps = text::decode(obj.as_string());
    std::u32string out;
    for (size_t i : picks) out.push_back(cps[i]);
    return Value(text::encode(out));
  }
  ValueList out;
  for (size_t i : picks) out.push_back(obj.items()[i]);
  return obj.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out))
                                           : Value::list(std::move(out));
}

}  // namespace lowbit::jinja
