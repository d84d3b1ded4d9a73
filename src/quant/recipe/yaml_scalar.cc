// PyYAML's (YAML 1.1) typing of plain scalars: which unquoted texts are null, booleans, integers
// (decimal, octal, hex, binary, base 60) or floats, and their values. Hand-written matchers for
// PyYAML's resolver regexes: std::regex would recurse per character on long inputs.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "quant/recipe/yaml_value.h"

namespace lowbit::quant::detail {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Scans [digits or '_']* from s[i] with `ok` deciding the digit set; returns the new index.
template <class Pred>
size_t scan(std::string_view s, size_t i, Pred ok) {
  while (i < s.size() && (ok(s[i]) || s[i] == '_')) ++i;
  return i;
}

// `(:[0-5]?[0-9])+` starting at i; returns the end or npos when there is no such group.
size_t scan_sexagesimal_tail(std::string_view s, size_t i) {
  size_t groups = 0;
  while (i < s.size() && s[i] == ':') {
    size_t j = i + 1;
    if (j + 1 < s.size() && s[j] >= '0' && s[j] <= '5' && is_digit(s[j + 1])) {
      j += 2;
    } else if (j < s.size() && is_digit(s[j])) {
      j += 1;
    } else {
      return std::string_view::npos;
    }
    i = j;
    ++groups;
  }
  return groups > 0 ? i : std::string_view::npos;
}

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += c;
  return out;
}

// Sum of base-60 parts ("1:30" = 90), as PyYAML computes sexagesimal numbers.
double sexagesimal_value(const std::string& digits) {
  double value = 0.0;
  size_t start = 0;
  while (start <= digits.size()) {
    size_t end = digits.find(':', start);
    if (end == std::string::npos) end = digits.size();
    value = value * 60.0 + std::strtod(digits.substr(start, end - start).c_str(), nullptr);
    start = end + 1;
  }
  return value;
}

// PyYAML's int regex (bin, octal, decimal, hex, sexagesimal) on the part after the sign.
bool match_int(std::string_view r) {
  if (r.empty()) return false;
  if (r.size() > 2 && r[0] == '0' && r[1] == 'b')
    return scan(r, 2, [](char c) { return c == '0' || c == '1'; }) == r.size();
  if (r.size() > 2 && r[0] == '0' && r[1] == 'x') return scan(r, 2, is_hex) == r.size();
  if (r[0] == '0')
    return r.size() == 1 || scan(r, 1, [](char c) { return c >= '0' && c <= '7'; }) == r.size();
  if (!is_digit(r[0])) return false;
  size_t i = scan(r, 1, is_digit);
  return i == r.size() || scan_sexagesimal_tail(r, i) == r.size();
}

// PyYAML's float regex on the whole text (the sign is handled per alternative, as there).
bool match_float(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  std::string_view r = s.substr(i);
  if (r == ".inf" || r == ".Inf" || r == ".INF") return true;
  if (i == 0 && (r == ".nan" || r == ".NaN" || r == ".NAN")) return true;
  auto exponent_ok = [&](size_t j) {
    if (j == r.size()) return true;
    if (r[j] != 'e' && r[j] != 'E') return false;
    if (j + 2 > r.size() || (r[j + 1] != '+' && r[j + 1] != '-')) return false;
    size_t k = j + 2;
    while (k < r.size() && is_digit(r[k])) ++k;
    return k > j + 2 && k == r.size();
  };
  if (!r.empty() && r[0] == '.') {  // `.5`: no sign allowed
    size_t j = scan(r, 1, is_digit);
    return i == 0 && j > 1 && exponent_ok(j);
  }
  if (r.empty() || !is_digit(r[0])) return false;
  size_t j = scan(r, 1, is_digit);
  if (j < r.size() && r[j] == ':') {
    j = scan_sexagesimal_tail(r, j);
    if (j == std::string_view::npos || j >= r.size() || r[j] != '.') return false;
    return scan(r, j + 1, is_digit) == r.size();
  }
  if (j >= r.size() || r[j] != '.') return false;
  return exponent_ok(scan(r, j + 1, is_digit));
}

void set_int(std::string_view text, YamlValue& out) {
  bool negative = !text.empty() && text[0] == '-';
  std::string digits = without_underscores(text.substr((text[0] == '-' || text[0] == '+') ? 1 : 0));
  if (digits.find(':') != std::string::npos) {
    out.kind_ = YamlValue::Kind::Float;  // re-typed below when it fits an integer exactly
    out.float_ = sexagesimal_value(digits);
  } else {
    int base = 10;
    size_t start = 0;
    if (digits.size() > 1 && digits[0] == '0') {
      base = digits[1] == 'b' ? 2 : digits[1] == 'x' ? 16 : 8;
      start = base == 8 ? 1 : 2;
    }
    double approx = 0.0;
    for (size_t k = start; k < digits.size(); ++k) {
      char c = digits[k];
      int d = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
      approx = approx * base + d;
    }
    out.kind_ = YamlValue::Kind::Float;
    out.float_ = approx;
  }
  if (negative) out.float_ = -out.float_;
  // Exactly representable integers (|v| < 2^53) become Int; larger ones stay approximate floats,
  // which integer fields then reject as out of range.
  if (std::fabs(out.float_) < static_cast<double>(kExactIntLimit)) {
    out.kind_ = YamlValue::Kind::Int;
    out.int_ = static_cast<int64_t>(out.float_);
  }
}

void set_float(std::string_view text, YamlValue& out) {
  std::string v = without_underscores(text);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double sign = 1.0;
  if (!v.empty() && (v[0] == '-' || v[0] == '+')) {
    sign = v[0] == '-' ? -1.0 : 1.0;
    v.erase(0, 1);
  }
  out.kind_ = YamlValue::Kind::Float;
  if (v == ".inf") {
    out.float_ = sign * std::numeric_limits<double>::infinity();
  } else if (v == ".nan") {
    out.float_ = std::numeric_limits<double>::quiet_NaN();
  } else if (v.find(':') != std::string::npos) {
    out.float_ = sign * sexagesimal_value(v);
  } else {
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size()) {  // "._": PyYAML would fail; keep the text
      out.kind_ = YamlValue::Kind::String;
      out.text_ = std::string(text);
      return;
    }
    out.float_ = sign * x;
  }
}

}  // namespace

void resolve_plain_scalar(const std::string& text, YamlValue& out) {
  using K = YamlValue::Kind;
  out.text_ = text;
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    out.kind_ = K::Null;
    return;
  }
  static const char* const kTrue[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const char* const kFalse[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  for (const char* t : kTrue)
    if (text == t) {
      out.kind_ = K::Bool;
      out.bool_ = true;
      return;
    }
  for (const char* f : kFalse)
    if (text == f) {
      out.kind_ = K::Bool;
      out.bool_ = false;
      return;
    }
  std::string_view body(text);
  if (body[0] == '+' || body[0] == '-') body.remove_prefix(1);
  if (match_int(body)) return set_int(text, out);
  if (match_float(text)) return set_float(text, out);
  out.kind_ = K::String;
}

}  // namespace lowbit::quant::detail
