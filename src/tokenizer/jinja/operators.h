// Python arithmetic on interpreter values: + - * / // % ** and unary -/+, with Python's result
// types (int / int is a float, // floors, % takes the divisor's sign), its TypeErrors, and
// sequence concatenation and repetition. Integers are 64-bit; overflow is an error.
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace lowbit::jinja {

Value binary_op(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);

// Python's printf-style `fmt % args` (also the `format` filter): %s %r %d %i %f %F %e %E %g %G
// %x %X %o %c %%, with flags, width and precision; args is a tuple, a single value or a dict
// for %(name)s.
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace lowbit::jinja
