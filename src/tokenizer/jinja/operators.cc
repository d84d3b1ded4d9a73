#include "tokenizer/jinja/operators.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "tokenizer/jinja/text.h"

namespace lowbit::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (op == "+" && a.is_string())
    fail("TypeError: can only concatenate str (not \"" + b.type_name() + "\") to str");
  if (op == "+" && a.kind() == Value::Kind::kList) {
    fail("TypeError: can only concatenate list (not \"" + b.type_name() + "\") to list");
  }
  fail("TypeError: unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
       b.type_name() + "'");
}

[[noreturn]] void overflow() { fail("OverflowError: integer result does not fit in 64 bits"); }

int64_t add(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_add_overflow(x, y, &r)) overflow();
  return r;
}

int64_t sub(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_sub_overflow(x, y, &r)) overflow();
  return r;
}

int64_t mul(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_mul_overflow(x, y, &r)) overflow();
  return r;
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0)
    return seq.is_string()
               ? Value(std::string())
               : (seq.kind() == Value::Kind::kTuple ? Value::tuple({}) : Value::list({}));
  if (seq.is_string()) {
    if (seq.as_string().size() * static_cast<uint64_t>(n) > (uint64_t{1} << 30))
      fail("MemoryError: repeated string is too long");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  if (seq.items().size() * static_cast<uint64_t>(n) > (uint64_t{1} << 24))
    fail("MemoryError: repeated list is too long");
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out))
                                           : Value::list(std::move(out));
}

// Python's float floor division and modulo (Objects/floatobject.c float_divmod).
void float_divmod(double vx, double wx, double* div_out, double* mod_out) {
  if (wx == 0.0) fail("ZeroDivisionError: float floor division by zero");
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  *div_out = floordiv;
  *mod_out = mod;
}

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = mul(result, base);
    exp >>= 1;
    if (exp > 0) base = mul(base, base);
  }
  return Value(result);
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  bool ints = a.is_integral() && b.is_integral();
  int64_t x = a.as_int(), y = b.as_int();
  double fx = a.as_float(), fy = b.as_float();
  if (op == "+") return ints ? Value(add(x, y)) : Value(fx + fy);
  if (op == "-") return ints ? Value(sub(x, y)) : Value(fx - fy);
  if (op == "*") return ints ? Value(mul(x, y)) : Value(fx * fy);
  if (op == "/") {
    if (fy == 0.0) fail("ZeroDivisionError: division by zero");
    return Value(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0) fail("ZeroDivisionError: integer division or modulo by zero");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    double div, mod;
    if (fy == 0.0)
      fail(op == "//" ? "ZeroDivisionError: float floor division by zero"
                      : "ZeroDivisionError: float modulo");
    float_divmod(fx, fy, &div, &mod);
    return Value(op == "//" ? div : mod);
  }
  if (op == "**") {
    if (ints) return int_pow(x, y);
    if (fx == 0.0 && fy < 0) fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    // Python returns a complex number here; templates have no use for one.
    if (fx < 0 && fy != std::floor(fy))
      fail("ValueError: complex results are not supported in chat templates");
    return Value(std::pow(fx, fy));
  }
  unsupported(op, a, b);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  // str.__mod__ runs before Undefined could object: "%s" % undefined is "".
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_sequence() && a.kind() == b.kind() && !a.is_range() && !b.is_range()) {
      ValueList out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out))
                                             : Value::list(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || (a.is_sequence() && !a.is_range())) && b.is_integral())
      return repeat(a, b.as_int());
    if ((b.is_string() || (b.is_sequence() && !b.is_range())) && a.is_integral())
      return repeat(b, a.as_int());
  }
  unsupported(op, a, b);
}

Value negate(const Value& v) {
  require_defined(v);
  if (v.kind() == Value::Kind::kFloat) return Value(-v.as_float());
  if (v.is_integral()) return Value(sub(0, v.as_int()));
  fail("TypeError: bad operand type for unary -: '" + v.type_name() + "'");
}

Value unary_plus(const Value& v) {
  require_defined(v);
  if (v.kind() == Value::Kind::kFloat) return v;
  if (v.is_integral()) return Value(v.as_int());
  fail("TypeError: bad operand type for unary +: '" + v.type_name() + "'");
}

namespace {

struct Spec {
  std::string flags;
  int width = -1;
  int precision = -1;
  char conversion = 0;
};

std::string pad(std::string s, const Spec& spec, bool numeric) {
  auto len = static_cast<int>(text::length(s));
  if (spec.width <= len) return s;
  std::string fill(static_cast<size_t>(spec.width - len), ' ');
  if (spec.flags.find('-') != std::string::npos) return s + fill;
  if (numeric && spec.flags.find('0') != std::string::npos) {
    size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) ? 1 : 0;
    return s.substr(0, sign) + std::string(fill.size(), '0') + s.substr(sign);
  }
  return fill + s;
}

std::string format_one(const Spec& spec, const Value& arg) {
  char c = spec.conversion;
  if (c == 's' || c == 'r' || c == 'a') {
    std::string s = c == 's' ? to_str(arg) : to_repr(arg);
    if (spec.precision >= 0)
      s = text::encode(text::decode(s).substr(0, static_cast<size_t>(spec.precision)));
    return pad(s, spec, false);
  }
  if (c == 'c') {
    if (arg.is_string() && text::length(arg.as_string()) == 1)
      return pad(arg.as_string(), spec, false);
    if (!arg.is_integral()) fail("TypeError: %c requires int or char");
    std::string s;
    text::append_utf8(s, static_cast<char32_t>(arg.as_int()));
    return pad(s, spec, false);
  }
  require_defined(arg);
  if (!arg.is_number()) {
    fail(std::string("TypeError: %") + c + " format: a real number is required, not " +
         arg.type_name());
  }
  std::string cflags;
  for (char f : spec.flags) {
    if (f == '+' || f == ' ' || (f == '#' && c != 'o')) cflags += f;
  }
  std::string fmt = cat("%", cflags);
  if (spec.precision >= 0) fmt += cat(".", std::to_string(spec.precision));
  char buf[512];
  if (c == 'd' || c == 'i' || c == 'u' || c == 'x' || c == 'X' || c == 'o') {
    if (!arg.is_integral() && c != 'd' && c != 'i' && c != 'u') {
      fail(std::string("TypeError: %") + c + " format: an integer is required, not float");
    }
    long long v =
        arg.is_integral() ? arg.as_int() : static_cast<long long>(std::trunc(arg.as_float()));
    char conv = (c == 'i' || c == 'u') ? 'd' : c;
    std::snprintf(buf, sizeof(buf), (fmt + "ll" + conv).c_str(), v);
    std::string s = buf;
    if (c == 'o' && spec.flags.find('#') != std::string::npos) {
      size_t at = (!s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) ? 1 : 0;
      s.insert(at, "0o");
    }
    return pad(s, spec, true);
  }
  if (std::strchr("fFeEgG", c) == nullptr)
    fail(std::string("ValueError: unsupported format character '") + c + "'");
  if (spec.precision < 0) fmt += ".6";
  std::snprintf(buf, sizeof(buf), (fmt + c).c_str(), arg.as_float());
  return pad(buf, spec, true);
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  bool mapping = args.is_mapping() && fmt.find("%(") != std::string::npos;
  ValueList positional;
  if (!mapping) positional = args.kind() == Value::Kind::kTuple ? args.items() : ValueList{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("ValueError: incomplete format");
    Spec spec;
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) fail("TypeError: format requires a mapping");
      arg = args.dict_ref().find(fmt.substr(i + 1, close - i - 1));
      if (arg == nullptr) fail("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    while (i < fmt.size() && std::strchr("#0- +", fmt[i]) != nullptr && fmt[i] != 0)
      spec.flags += fmt[i++];
    auto number = [&](int* target) {
      if (i < fmt.size() && fmt[i] == '*') {
        if (next >= positional.size() || !positional[next].is_integral())
          fail("TypeError: * wants int");
        *target = static_cast<int>(positional[next++].as_int());
        ++i;
        return;
      }
      if (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') *target = 0;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9')
        *target = *target * 10 + (fmt[i++] - '0');
    };
    number(&spec.width);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      spec.precision = 0;
      number(&spec.precision);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) fail("ValueError: incomplete format");
    spec.conversion = fmt[i];
    if (spec.conversion == '%') {
      out += '%';
      continue;
    }
    if (arg == nullptr) {
      if (mapping) fail("TypeError: format requires a mapping");
      if (next >= positional.size()) fail("TypeError: not enough arguments for format string");
      arg = &positional[next++];
    }
    out += format_one(spec, *arg);
  }
  // Python skips this check when the argument supports item access (a list or dict).
  bool item_access = args.kind() == Value::Kind::kList || args.is_mapping() || args.is_undefined();
  if (!item_access && next < positional.size()) {
    fail("TypeError: not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace lowbit::jinja
