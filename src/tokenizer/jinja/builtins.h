// Jinja's builtins as the chat-template environment sees them: filters, tests, globals, and the
// attribute/item lookup rules (jinja's sandboxed getattr/getitem over Python objects).
#pragma once

#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace lowbit::jinja {

// Binds call arguments to named parameters like Python does; reports unknown keywords and extra
// positional arguments as TypeErrors naming the function.
class ArgBinder {
 public:
  ArgBinder(const std::string& function, const CallArgs& args,
            std::initializer_list<const char*> names);
  bool has(size_t i) const { return slots_[i] != nullptr; }
  const Value& get(size_t i) const { return *slots_[i]; }
  Value get_or(size_t i, Value fallback) const { return has(i) ? *slots_[i] : std::move(fallback); }

 private:
  std::vector<const Value*> slots_;
};

Value apply_filter(const std::string& name, const Value& subject, const CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, const CallArgs& args);
bool filter_exists(const std::string& name);
bool test_exists(const std::string& name);

// range, dict, namespace, joiner, raise_exception (raises with its message), strftime_now.
void add_globals(std::unordered_map<std::string, Value>& vars);

// `obj.name`: Python attribute first (str/dict/list methods, bound), then the item.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: the item first, then (for string keys) the attribute. Missing gives Undefined.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on lists, tuples and strings (Python slice rules); each bound may be None.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python str methods used by filters too.
ValueList split_string(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right);
std::string replace_string(const std::string& s, const std::string& old, const std::string& repl,
                           int64_t count);
std::string capitalize_string(const std::string& s);

}  // namespace lowbit::jinja
