// The filters with more than a line of logic, jinja2 3.1 semantics (filters.py); the name table
// is in filter_table.cc.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "tokenizer/jinja/filter_helpers.h"
#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"

namespace lowbit::jinja::filters {

// jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (environment.getitem).
std::function<Value(const Value&)> attr_getter(const Value& attribute, const Value* fallback,
                                               bool lower) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const Value& p : split_string(attribute.as_string(), Value("."), -1, false)) {
      const std::string& s = p.as_string();
      bool digits = !s.empty() &&
                    std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits) {
        parts.push_back(p);
        continue;
      }
      // Jinja looks a digit part up as an int. One past int64 can index no list and match no key
      // (template data keys are strings), as in Python, so it becomes INT64_MAX, not an exception.
      int64_t index = std::numeric_limits<int64_t>::max();
      std::from_chars(s.data(), s.data() + s.size(), index);
      parts.push_back(Value(index));
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  Value dflt = fallback ? *fallback : Value();
  bool has_default = fallback != nullptr && !fallback->is_none();
  return [parts, dflt, has_default, lower](const Value& item) {
    Value v = item;
    for (const Value& p : parts) {
      v = get_item(v, p);
      if (has_default && v.is_undefined()) v = dflt;
    }
    if (lower && v.is_string()) return Value(text::lower(v.as_string()));
    return v;
  };
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value select_or_reject(const Value& v, const CallArgs& args, bool select, bool by_attr) {
  ValueList out;
  if (!v.truthy()) return Value::iterator({});
  size_t off = by_attr ? 1 : 0;
  if (by_attr && args.positional.empty())
    fail("FilterArgumentError: Missing parameter for attribute name");
  std::function<Value(const Value&)> get =
      by_attr ? attr_getter(args.positional[0])
              : std::function<Value(const Value&)>([](const Value& x) { return x; });
  CallArgs test_args;
  std::string test;
  if (args.positional.size() > off) {
    test = to_str(args.positional[off]);
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(off) + 1,
                                args.positional.end());
    test_args.keyword = args.keyword;
  }
  for (const Value& item : iterate(v)) {
    Value x = get(item);
    bool pass = test.empty() ? x.truthy() : apply_test(test, x, test_args);
    if (pass == select) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value map_filter(const Value& v, const CallArgs& args) {
  if (!v.truthy()) return Value::iterator({});  // jinja: `if value:` guards the loop
  std::function<Value(const Value&)> fn;
  if (args.positional.empty()) {
    const Value* attribute = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, val] : args.keyword) {
      if (k == "attribute")
        attribute = &val;
      else if (k == "default")
        dflt = &val;
      else
        fail("FilterArgumentError: Unexpected keyword argument '" + k + "'");
    }
    if (attribute == nullptr) fail("FilterArgumentError: map requires a filter argument");
    fn = attr_getter(*attribute, dflt);
  } else {
    std::string name = to_str(args.positional[0]);
    CallArgs rest{ValueList(args.positional.begin() + 1, args.positional.end()), args.keyword};
    fn = [name, rest](const Value& x) { return apply_filter(name, x, rest); };
  }
  ValueList out;
  for (const Value& item : iterate(v)) out.push_back(fn(item));
  return Value::iterator(std::move(out));
}

// Python sorted() with jinja's key: attribute getter(s) and lower-casing unless case_sensitive.
ValueList sorted_items(ValueList items, const Value* attribute, bool case_sensitive, bool reverse) {
  std::vector<std::function<Value(const Value&)>> keys;
  if (attribute != nullptr && attribute->is_string()) {
    for (const Value& part : split_string(attribute->as_string(), Value(","), -1, false)) {
      keys.push_back(attr_getter(part, nullptr, !case_sensitive));
    }
  } else {
    keys.push_back(attr_getter(attribute ? *attribute : Value::none(), nullptr, !case_sensitive));
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    ValueList k;
    for (auto& key : keys) k.push_back(key(item));
    keyed.emplace_back(keys.size() == 1 ? k[0] : Value::list(std::move(k)), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

Value min_max(const Value& v, const CallArgs& args, bool want_max) {
  ArgBinder a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = attr_getter(a.get_or(1, Value::none()), nullptr, !(a.has(0) && a.get(0).truthy()));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    if (want_max ? less_than(key(items[best]), key(items[i]))
                 : less_than(key(items[i]), key(items[best])))
      best = i;
  }
  return items[best];
}

Value first_item(const Value& v) {
  if (v.kind() == Value::Kind::kIterator) {
    IteratorState& it = v.iterator_ref();
    if (it.position < it.items.size()) return it.items[it.position++];
  } else {
    ValueList items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value reverse_filter(const Value& v) {
  if (v.is_string()) {
    std::u32string cps = text::decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(text::encode(cps));
  }
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed() of a sequence is a one-shot iterator; a generator is materialized into a list.
  return v.kind() == Value::Kind::kIterator ? Value::list(std::move(items))
                                            : Value::iterator(std::move(items));
}

Value int_filter(const Value& v, const CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  Value dflt = a.get_or(0, Value(int64_t{0}));
  require_defined(v);
  if (v.is_integral()) return Value(v.as_int());
  if (v.kind() == Value::Kind::kFloat)
    return std::isfinite(v.as_float()) ? Value(static_cast<int64_t>(std::trunc(v.as_float())))
                                       : dflt;
  if (!v.is_string()) return dflt;
  std::string s = text::strip(v.as_string(), true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  int base = a.has(1) ? static_cast<int>(a.get(1).as_int()) : 10;
  size_t skip = (s.size() > 2 && s[0] == '0' && base != 10 &&
                 std::string("xXoObB").find(s[1]) != std::string::npos)
                    ? 2
                    : 0;
  try {
    size_t used = 0;
    long long r = std::stoll(s.substr(skip), &used, base);
    if (used == s.size() - skip) return Value(static_cast<int64_t>(r));
  } catch (const std::exception&) {
  }
  try {
    size_t used = 0;
    double d = std::stod(s, &used);
    if (used == s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(std::trunc(d)));
  } catch (const std::exception&) {
  }
  return dflt;
}

Value float_filter(const Value& v, const CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  require_defined(v);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    std::string s = text::strip(v.as_string(), true, true);
    try {
      size_t used = 0;
      double d = std::stod(s, &used);
      if (used == s.size() && !s.empty()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return a.get_or(0, Value(0.0));
}

Value round_filter(const Value& v, const CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  int64_t precision = a.has(0) ? a.get(0).as_int() : 0;
  std::string method = a.has(1) ? to_str(a.get(1)) : "common";
  require_defined(v);
  if (!v.is_number()) fail("TypeError: type " + v.type_name() + " doesn't define __round__ method");
  double x = v.as_float();
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  if (method != "common") fail("FilterArgumentError: method must be common, ceil or floor");
  if (v.is_integral() && precision >= 0) return Value(v.as_int());
  // Python rounds the exact binary value half-to-even; printf does the same.
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)),
                x);
  double r = std::strtod(buf, nullptr);
  if (precision < 0) r = std::nearbyint(x * scale) / scale;
  return Value(r);
}

Value indent_filter(const Value& v, const CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  Value width = a.get_or(0, Value(int64_t{4}));
  std::string indent =
      width.is_string()
          ? width.as_string()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  require_defined(v);
  if (!v.is_string())
    fail("TypeError: unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  CallArgs none;
  Value lines_v = get_attr(Value(v.as_string() + "\n"), "splitlines").callable_ref().fn(none);
  ValueList lines = lines_v.items();
  std::string out;
  bool blank = a.has(2) && a.get(2).truthy();
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i > 0) {
      out += '\n';
      if (blank || !line.empty()) out += indent;
    }
    out += line;
  }
  if (a.has(1) && a.get(1).truthy()) out = indent + out;
  return Value(std::move(out));
}

Value tojson_filter(const Value& v, const CallArgs& args) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False)
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = a.has(0) && a.get(0).truthy();
  if (a.has(1) && !a.get(1).is_none()) {
    const Value& ind = a.get(1);
    o.indent = ind.is_string()
                   ? ind.as_string()
                   : std::string(static_cast<size_t>(std::max<int64_t>(0, ind.as_int())), ' ');
  }
  if (a.has(2) && !a.get(2).is_none()) {
    ValueList seps = iterate(a.get(2));
    if (seps.size() != 2)
      fail("ValueError: separators must be a (item_separator, key_separator) pair");
    o.item_separator = to_str(seps[0]);
    o.key_separator = to_str(seps[1]);
  }
  o.sort_keys = a.has(3) && a.get(3).truthy();
  return Value(to_json(v, o));
}

Value truncate_filter(const Value& v, const CallArgs& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  std::u32string s = text::decode(to_str(v));
  int64_t length = a.has(0) ? a.get(0).as_int() : 255;
  std::u32string end = text::decode(a.has(2) ? to_str(a.get(2)) : "...");
  int64_t leeway = a.has(3) && !a.get(3).is_none() ? a.get(3).as_int() : 5;
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value(text::encode(s));
  std::u32string cut = s.substr(
      0, static_cast<size_t>(std::max<int64_t>(0, length - static_cast<int64_t>(end.size()))));
  if (!(a.has(1) && a.get(1).truthy())) {
    size_t sp = cut.rfind(U' ');
    if (sp != std::u32string::npos) cut = cut.substr(0, sp);
  }
  return Value(text::encode(cut + end));
}

Value batch_or_slice(const Value& v, const CallArgs& args, bool batch) {
  ArgBinder a(batch ? "batch" : "slice", args, {batch ? "linecount" : "slices", "fill_with"});
  int64_t n = a.get(0).as_int();
  if (n <= 0) fail("ValueError: batch and slice need a positive count");
  ValueList items = iterate(v);
  ValueList groups;
  if (batch) {
    for (size_t i = 0; i < items.size(); i += static_cast<size_t>(n)) {
      ValueList g(items.begin() + static_cast<std::ptrdiff_t>(i),
                  items.begin() + static_cast<std::ptrdiff_t>(
                                      std::min(items.size(), i + static_cast<size_t>(n))));
      while (a.has(1) && !a.get(1).is_none() && g.size() < static_cast<size_t>(n))
        g.push_back(a.get(1));
      groups.push_back(Value::list(std::move(g)));
    }
    return Value::iterator(std::move(groups));
  }
  size_t per = items.size() / static_cast<size_t>(n), extra = items.size() % static_cast<size_t>(n),
         offset = 0;
  for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
    size_t take = per + (k < extra ? 1 : 0);
    ValueList g(items.begin() + static_cast<std::ptrdiff_t>(offset),
                items.begin() + static_cast<std::ptrdiff_t>(offset + take));
    offset += take;
    if (a.has(1) && !a.get(1).is_none() && k >= extra && extra > 0) g.push_back(a.get(1));
    groups.push_back(Value::list(std::move(g)));
  }
  return Value::iterator(std::move(groups));
}

}  // namespace lowbit::jinja::filters
