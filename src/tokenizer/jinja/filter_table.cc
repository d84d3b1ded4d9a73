// The filter names jinja2 knows, mapped to lowbit's implementations.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tokenizer/jinja/filter_helpers.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"

namespace lowbit::jinja {
namespace {

using Filter = std::function<Value(const Value&, const CallArgs&)>;
using namespace filters;

std::string title_filter(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char32_t c : text::decode(s)) {
    text::append_utf8(out, word_start ? text::to_upper(c) : text::to_lower(c));
    word_start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
  }
  return out;
}

Value last_item(const Value& v) {
  if (v.kind() == Value::Kind::kIterator) fail("TypeError: 'generator' object is not reversible");
  ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value dictsort(const Value& v, const CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_mapping()) fail("TypeError: dictsort needs a mapping");
  std::string by = a.has(1) ? to_str(a.get(1)) : "key";
  if (by != "key" && by != "value")
    fail("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  ValueList pairs;
  for (const auto& [k, val] : v.dict_ref().entries) pairs.push_back(Value::tuple({k, val}));
  Value index(static_cast<int64_t>(by == "key" ? 0 : 1));
  return Value::list(sorted_items(std::move(pairs), &index, a.has(0) && a.get(0).truthy(),
                                  a.has(2) && a.get(2).truthy()));
}

Value unique(const Value& v, const CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  auto key = attr_getter(a.get_or(1, Value::none()), nullptr, !(a.has(0) && a.get(0).truthy()));
  ValueList seen, out;
  for (const Value& item : iterate(v)) {
    Value k = key(item);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); }))
      continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value join(const Value& v, const CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  std::string sep = a.has(0) ? to_str(a.get(0)) : "";
  auto get = attr_getter(a.get_or(1, Value::none()));
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(a.has(1) ? get(item) : item);
  }
  return Value(std::move(out));
}

Value sum(const Value& v, const CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  Value total = a.get_or(1, Value(int64_t{0}));
  auto get = attr_getter(a.get_or(0, Value::none()));
  for (const Value& item : iterate(v)) total = binary_op("+", total, a.has(0) ? get(item) : item);
  return total;
}

Value unsupported(const std::string& name) {
  fail("the '" + name + "' filter is not supported in chat templates");
}

std::unordered_map<std::string, Filter> string_filters() {
  return {
      {"abs",
       [](const Value& v, const CallArgs& a) {
         ArgBinder("abs", a, {});
         return v.kind() == Value::Kind::kFloat
                    ? Value(std::abs(v.as_float()))
                    : (v.is_integral() && v.as_int() < 0 ? negate(v) : unary_plus(v));
       }},
      {"attr",
       [](const Value& v, const CallArgs& a) {
         ArgBinder b("attr", a, {"name"});
         return get_attr(v, to_str(b.get(0)));
       }},
      {"capitalize",
       [](const Value& v, const CallArgs& a) { return Value(capitalize_string(to_str(v))); }},
      {"center",
       [](const Value& v, const CallArgs& a) {
         ArgBinder b("center", a, {"width"});
         CallArgs c{{b.get_or(0, Value(int64_t{80}))}, {}};
         return get_attr(Value(to_str(v)), "center").callable_ref().fn(c);
       }},
      {"default",
       [](const Value& v, const CallArgs& a) {
         ArgBinder b("default", a, {"default_value", "boolean"});
         bool use_default = v.is_undefined() || (b.has(1) && b.get(1).truthy() && !v.truthy());
         return use_default ? b.get_or(0, Value("")) : v;
       }},
      {"escape", [](const Value& v, const CallArgs& a) { return Value(html_escape(to_str(v))); }},
      {"float", float_filter},
      {"format",
       [](const Value& v, const CallArgs& a) {
         if (!a.positional.empty() && !a.keyword.empty()) {
           fail(
               "FilterArgumentError: can't handle positional and keyword arguments at the same "
               "time");
         }
         if (a.keyword.empty()) return Value(percent_format(to_str(v), Value::tuple(a.positional)));
         auto d = std::make_shared<Dict>();
         for (const auto& [k, val] : a.keyword) d->set(Value(k), val);
         return Value(percent_format(to_str(v), Value::dict(d)));
       }},
      {"indent", indent_filter},
      {"int", int_filter},
      {"lower", [](const Value& v, const CallArgs& a) { return Value(text::lower(to_str(v))); }},
      {"replace",
       [](const Value& v, const CallArgs& a) {
         ArgBinder b("replace", a, {"old", "new", "count"});
         int64_t count = b.has(2) && !b.get(2).is_none() ? b.get(2).as_int() : -1;
         return Value(replace_string(to_str(v), to_str(b.get(0)), to_str(b.get(1)), count));
       }},
      {"round", round_filter},
      {"safe", [](const Value& v, const CallArgs& a) { return Value(to_str(v)); }},
      {"string", [](const Value& v, const CallArgs& a) { return Value(to_str(v)); }},
      {"title", [](const Value& v, const CallArgs& a) { return Value(title_filter(to_str(v))); }},
      {"tojson", tojson_filter},
      {"trim",
       [](const Value& v, const CallArgs& a) {
         ArgBinder b("trim", a, {"chars"});
         if (!b.has(0) || b.get(0).is_none()) return Value(text::strip(to_str(v), true, true));
         std::u32string chars = text::decode(to_str(b.get(0)));
         return Value(text::strip(to_str(v), true, true, &chars));
       }},
      {"truncate", truncate_filter},
      {"upper", [](const Value& v, const CallArgs& a) { return Value(text::upper(to_str(v))); }},
      {"wordcount",
       [](const Value& v, const CallArgs& a) {
         int64_t words = 0;
         bool in_word = false;
         for (char32_t c : text::decode(to_str(v))) {
           bool w = text::is_word(c);
           words += w && !in_word;
           in_word = w;
         }
         return Value(words);
       }},
  };
}

std::unordered_map<std::string, Filter> sequence_filters() {
  return {
      {"batch", [](const Value& v, const CallArgs& a) { return batch_or_slice(v, a, true); }},
      {"count", [](const Value& v, const CallArgs& a) { return Value(length(v)); }},
      {"dictsort", dictsort},
      {"first", [](const Value& v, const CallArgs& a) { return first_item(v); }},
      {"items",
       [](const Value& v, const CallArgs& a) {
         if (v.is_undefined()) return Value::iterator({});
         if (!v.is_mapping()) fail("TypeError: Can only get item pairs from a mapping.");
         ValueList pairs;
         for (const auto& [k, val] : v.dict_ref().entries) pairs.push_back(Value::tuple({k, val}));
         return Value::iterator(std::move(pairs));
       }},
      {"join", join},
      {"last", [](const Value& v, const CallArgs& a) { return last_item(v); }},
      {"length", [](const Value& v, const CallArgs& a) { return Value(length(v)); }},
      {"list", [](const Value& v, const CallArgs& a) { return Value::list(iterate(v)); }},
      {"map", map_filter},
      {"max", [](const Value& v, const CallArgs& a) { return min_max(v, a, true); }},
      {"min", [](const Value& v, const CallArgs& a) { return min_max(v, a, false); }},
      {"reject",
       [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, false, false); }},
      {"rejectattr",
       [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, false, true); }},
      {"reverse", [](const Value& v, const CallArgs& a) { return reverse_filter(v); }},
      {"select",
       [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, true, false); }},
      {"selectattr",
       [](const Value& v, const CallArgs& a) { return select_or_reject(v, a, true, true); }},
      {"slice", [](const Value& v, const CallArgs& a) { return batch_or_slice(v, a, false); }},
      {"sort",
       [](const Value& v, const CallArgs& a) {
         ArgBinder b("sort", a, {"reverse", "case_sensitive", "attribute"});
         Value attr = b.get_or(2, Value::none());
         return Value::list(sorted_items(iterate(v), &attr, b.has(1) && b.get(1).truthy(),
                                         b.has(0) && b.get(0).truthy()));
       }},
      {"sum", sum},
      {"unique", unique},
  };
}

const std::unordered_map<std::string, Filter>& table() {
  static const std::unordered_map<std::string, Filter> kFilters = [] {
    std::unordered_map<std::string, Filter> m = string_filters();
    m.merge(sequence_filters());
    m["d"] = m.at("default");
    m["e"] = m.at("escape");
    m["forceescape"] = m.at("escape");
    for (const char* name : {"filesizeformat", "groupby", "pprint", "random", "striptags",
                             "urlencode", "urlize", "wordwrap", "xmlattr"}) {
      std::string n = name;
      m[n] = [n](const Value&, const CallArgs&) { return unsupported(n); };
    }
    return m;
  }();
  return kFilters;
}

}  // namespace

bool filter_exists(const std::string& name) { return table().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args) {
  auto it = table().find(name);
  if (it == table().end()) fail("No filter named '" + name + "'.");
  return it->second(subject, args);
}

}  // namespace lowbit::jinja
