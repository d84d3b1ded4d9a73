// Filter implementations shared between filters.cc (logic) and filter_table.cc (name table).
#pragma once

#include <functional>
#include <string>

#include "tokenizer/jinja/builtins.h"

namespace lowbit::jinja::filters {

// jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (item first, then attribute).
// A non-None fallback replaces Undefined results; lower lower-cases string results.
std::function<Value(const Value&)> attr_getter(const Value& attribute,
                                               const Value* fallback = nullptr, bool lower = false);
std::string html_escape(const std::string& s);

Value select_or_reject(const Value& v, const CallArgs& args, bool select, bool by_attr);
Value map_filter(const Value& v, const CallArgs& args);
// Python sorted(): stable, `<` only; attribute may be "a,b" for a multi-key sort.
ValueList sorted_items(ValueList items, const Value* attribute, bool case_sensitive, bool reverse);
Value min_max(const Value& v, const CallArgs& args, bool want_max);
Value first_item(const Value& v);
Value reverse_filter(const Value& v);
Value int_filter(const Value& v, const CallArgs& args);
Value float_filter(const Value& v, const CallArgs& args);
Value round_filter(const Value& v, const CallArgs& args);
Value indent_filter(const Value& v, const CallArgs& args);
Value tojson_filter(const Value& v, const CallArgs& args);
Value truncate_filter(const Value& v, const CallArgs& args);
Value batch_or_slice(const Value& v, const CallArgs& args, bool batch);

}  // namespace lowbit::jinja::filters
