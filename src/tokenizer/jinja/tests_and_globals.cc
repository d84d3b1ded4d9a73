// Jinja tests (`x is defined`), the global functions, and Python-style argument binding.
#include <algorithm>
#include <ctime>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"

namespace lowbit::jinja {

ArgBinder::ArgBinder(const std::string& function, const CallArgs& args,
                     std::initializer_list<const char*> names)
    : slots_(names.size(), nullptr) {
  if (args.positional.size() > names.size()) {
    fail("TypeError: " + function + "() takes at most " + std::to_string(names.size()) +
         " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) slots_[i] = &args.positional[i];
  for (const auto& entry : args.keyword) {
    // Named, not a structured binding: clang before 16 cannot capture bindings in lambdas.
    const auto& key = entry.first;
    const auto& value = entry.second;
    auto it = std::find_if(names.begin(), names.end(), [&](const char* n) { return key == n; });
    if (it == names.end())
      fail("TypeError: " + function + "() got an unexpected keyword argument '" + key + "'");
    size_t i = static_cast<size_t>(it - names.begin());
    if (slots_[i] != nullptr)
      fail("TypeError: " + function + "() got multiple values for argument '" + key + "'");
    slots_[i] = &value;
  }
}

namespace {

bool is_compare_test(const std::string& n) {
  return n == "==" || n == "eq" || n == "equalto" || n == "!=" || n == "ne" || n == ">" ||
         n == "gt" || n == "greaterthan" || n == ">=" || n == "ge" || n == "<" || n == "lt" ||
         n == "lessthan" || n == "<=" || n == "le";
}

bool compare_test(const std::string& name, const Value& a, const Value& b, bool* result) {
  if (name == "==" || name == "eq" || name == "equalto")
    *result = equals(a, b);
  else if (name == "!=" || name == "ne")
    *result = !equals(a, b);
  else if (name == ">" || name == "gt" || name == "greaterthan")
    *result = less_than(b, a);
  else if (name == ">=" || name == "ge")
    *result = !less_than(a, b);
  else if (name == "<" || name == "lt" || name == "lessthan")
    *result = less_than(a, b);
  else if (name == "<=" || name == "le")
    *result = !less_than(b, a);
  else
    return false;
  return true;
}

bool is_iterable(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kString:
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kDict:
    case Value::Kind::kIterator:
      return true;
    default:
      return false;
  }
}

// jinja's odd/even/divisibleby: `value % n == k` with Python arithmetic (1.5 % 2 is 1.5).
bool modulo_is(const Value& v, const Value& by, int64_t k) {
  return equals(binary_op("%", v, by), Value(k));
}

bool string_case_test(const Value& v, bool lower) {
  std::string s = to_str(v);
  bool cased = false;
  for (char32_t c : text::decode(s)) {
    bool up = text::is_cased_upper(c), low = text::is_cased_lower(c);
    if ((lower && up) || (!lower && low)) return false;
    cased = cased || up || low;
  }
  return cased;
}

const char* const kTests[] = {
    "odd",     "even",   "divisibleby", "defined",  "undefined", "filter", "test",    "none",
    "boolean", "false",  "true",        "integer",  "float",     "lower",  "upper",   "string",
    "mapping", "number", "sequence",    "iterable", "callable",  "sameas", "escaped", "in",
    "==",      "eq",     "equalto",     "!=",       "ne",        ">",      "gt",      "greaterthan",
    "ge",      ">=",     "<",           "lt",       "lessthan",  "<=",     "le"};

}  // namespace

bool test_exists(const std::string& name) {
  return std::any_of(std::begin(kTests), std::end(kTests),
                     [&](const char* t) { return name == t; });
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  using K = Value::Kind;
  bool result = false;
  bool one_arg = name == "sameas" || name == "divisibleby" || name == "in" || is_compare_test(name);
  if (one_arg) {
    ArgBinder a(name, args, {"other"});
    if (!a.has(0)) fail("TypeError: test '" + name + "' is missing its argument");
    if (compare_test(name, v, a.get(0), &result)) return result;
    if (name == "sameas") {
      const Value& o = a.get(0);
      return v.kind() == o.kind() &&
             (v.identity() != nullptr ? v.identity() == o.identity() : equals(v, o));
    }
    if (name == "divisibleby") return modulo_is(v, a.get(0), 0);
    return contains(a.get(0), v);
  }
  ArgBinder(name, args, {});
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_mapping();
  if (name == "sequence")
    return v.is_string() || v.is_sequence() || v.is_mapping() || v.is_undefined();
  if (name == "iterable") return is_iterable(v);
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "escaped") return false;
  if (name == "odd") return modulo_is(v, Value(int64_t{2}), 1);
  if (name == "even") return modulo_is(v, Value(int64_t{2}), 0);
  if (name == "lower") return string_case_test(v, true);
  if (name == "upper") return string_case_test(v, false);
  if (name == "filter") return v.is_string() && filter_exists(v.as_string());
  if (name == "test") return v.is_string() && test_exists(v.as_string());
  fail("No test named '" + name + "'.");
}

namespace {

// jinja's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

Value range_fn(const CallArgs& args) {
  ArgBinder a("range", args, {"start", "stop", "step"});
  for (size_t i = 0; i < 3; ++i) {
    if (a.has(i) && !a.get(i).is_integral()) {
      fail("TypeError: '" + a.get(i).type_name() + "' object cannot be interpreted as an integer");
    }
  }
  if (!a.has(0)) fail("TypeError: range expected at least 1 argument, got 0");
  int64_t start = a.has(1) ? a.get(0).as_int() : 0;
  int64_t stop = a.has(1) ? a.get(1).as_int() : a.get(0).as_int();
  int64_t step = a.has(2) ? a.get(2).as_int() : 1;
  if (step == 0) fail("ValueError: range() arg 3 must not be zero");
  int64_t count = 0;
  if (step > 0 && stop > start) count = (stop - start + step - 1) / step;
  if (step < 0 && stop < start) count = (start - stop - step - 1) / -step;
  if (count > kMaxRange) {
    fail("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  ValueList out;
  for (int64_t i = 0; i < count; ++i) out.emplace_back(start + i * step);
  return Value::range(std::move(out), start, stop, step);
}

void update_from(Dict& d, const CallArgs& args, const char* fn) {
  if (args.positional.size() > 1)
    fail(std::string("TypeError: ") + fn + " expected at most 1 argument");
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_mapping()) {
      for (const auto& [k, v] : src.dict_ref().entries) d.set(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        ValueList kv = iterate(pair);
        if (kv.size() != 2)
          fail(std::string("ValueError: ") + fn + " update sequence element has wrong length");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(Value(k), v);
}

}  // namespace

void add_globals(std::unordered_map<std::string, Value>& vars) {
  vars["range"] = Value::callable("range", range_fn);
  vars["dict"] = Value::callable("dict", [](const CallArgs& args) {
    auto d = std::make_shared<Dict>();
    update_from(*d, args, "dict");
    return Value::dict(std::move(d));
  });
  vars["namespace"] = Value::callable("namespace", [](const CallArgs& args) {
    auto d = std::make_shared<Dict>();
    update_from(*d, args, "namespace");
    return Value::namespace_object(std::move(d));
  });
  vars["joiner"] = Value::callable("joiner", [](const CallArgs& args) {
    ArgBinder a("joiner", args, {"sep"});
    std::string sep = a.has(0) ? to_str(a.get(0)) : ", ";
    auto used = std::make_shared<bool>(false);
    return Value::callable("joiner", [sep, used](const CallArgs&) {
      bool first = !*used;
      *used = true;
      return Value(first ? std::string() : sep);
    });
  });
  // transformers' raise_exception: the template aborts with exactly this message.
  vars["raise_exception"] = Value::callable("raise_exception", [](const CallArgs& args) -> Value {
    ArgBinder a("raise_exception", args, {"message"});
    fail(a.has(0) ? to_str(a.get(0)) : std::string("raise_exception() called"));
  });
  // transformers' strftime_now: datetime.now().strftime(format), in local time.
  vars["strftime_now"] = Value::callable("strftime_now", [](const CallArgs& args) {
    ArgBinder a("strftime_now", args, {"format"});
    if (!a.has(0) || !a.get(0).is_string()) fail("TypeError: strftime_now() argument must be str");
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    size_t n = std::strftime(buf, sizeof(buf), a.get(0).as_string().c_str(), &local);
    return Value(std::string(buf, n));
  });
}

}  // namespace lowbit::jinja
