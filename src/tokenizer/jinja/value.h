// The dynamic value of the Jinja interpreter, with Python's semantics: what jinja2 computes is
// Python objects, so printing, equality, truthiness and errors follow Python (str() of None is
// "None", 1 == 1.0, "a" + 1 is a TypeError, dicts keep insertion order).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lowbit/error.h"

namespace lowbit::jinja {

class Value;
using ValueList = std::vector<Value>;

// Every failure while rendering: Python's TypeError, jinja's UndefinedError, raise_exception().
// `located` is set once the message names the template position, so outer statements keep it.
class TemplateError : public InvalidArgument {
 public:
  explicit TemplateError(const std::string& message, bool located = false)
      : InvalidArgument(message), located_(located) {}
  bool located() const { return located_; }

 private:
  bool located_;
};

[[noreturn]] void fail(const std::string& message);

// Concatenates string pieces with +=. Used where `"literal" + temporary` would trip GCC 12's
// false -Wrestrict at -O3 (GCC bug 105329).
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  ((out += parts), ...);
  return out;
}

// Keyword arguments keep their call order (Python dict semantics for **kwargs).
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

struct Dict;

// A one-shot Python iterator (generator, list_reverseiterator): jinja's select/map/reverse
// return these, so `|length` fails, the value is always true, and a second pass sees nothing.
struct IteratorState {
  ValueList items;
  size_t position = 0;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable,
    kIterator,
  };

  Value() = default;  // Undefined
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}
  Value(int i) : kind_(Kind::kInt), int_(i) {}
  Value(double f) : kind_(Kind::kFloat), float_(f) {}
  Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), str_(s) {}

  // hint is the message an UndefinedError shows when the value is used ("'x' is undefined").
  static Value undefined(std::string hint);
  static Value none();
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(std::shared_ptr<Dict> d);
  static Value empty_dict();
  static Value namespace_object(std::shared_ptr<Dict> d);
  static Value callable(std::string name, std::function<Value(const CallArgs&)> fn);
  static Value iterator(ValueList items);
  // Python's range object: a list for every purpose except printing, equality and JSON.
  static Value range(ValueList items, int64_t start, int64_t stop, int64_t step);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_mapping() const { return kind_ == Kind::kDict; }
  bool is_range() const { return is_range_; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_float() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  const std::string& undefined_hint() const { return str_; }
  const ValueList& items() const { return *list_; }
  Dict& dict_ref() const { return *dict_; }
  const Callable& callable_ref() const { return *callable_; }
  IteratorState& iterator_ref() const { return *iterator_; }
  const void* identity() const;

  // Python's bool(x); Undefined is false.
  bool truthy() const;
  // Python type name, for error messages ("str", "NoneType", "dict").
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool is_range_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string str_;  // string value, the hint of an Undefined, or the repr of a range
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> callable_;
  std::shared_ptr<IteratorState> iterator_;
};

// Insertion-ordered mapping with Python key equality (1, 1.0 and True are the same key).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
};

// Raises UndefinedError when v is Undefined: for operations that Python's jinja Undefined
// refuses (arithmetic, attribute access, calls, comparisons).
void require_defined(const Value& v);

// Python ==. Deep for lists and dicts, numeric across bool/int/float, dicts ignore order.
bool equals(const Value& a, const Value& b);
// Python <, with TypeError for unordered types.
bool less_than(const Value& a, const Value& b);
// Python `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// Python len(); TypeError for values without a length.
int64_t length(const Value& v);
// Python iteration: the items a `for` loop sees (chars of a string, keys of a dict, nothing for
// Undefined). Consumes one-shot iterators.
ValueList iterate(const Value& v);

// str() and repr() as Python prints them.
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
std::string float_repr(double d);

}  // namespace lowbit::jinja
