#include "eval/report_format.h"

#include <cmath>
#include <cstdio>
#include <regex>

#include "eval/svg_chart.h"

namespace lowbit::eval::report {
namespace {

std::string group_thousands(std::string digits) {
  const size_t start = digits[0] == '-' ? 1 : 0;
  for (int i = static_cast<int>(digits.size()) - 3; i > static_cast<int>(start); i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return digits;
}

// Digits after the point that leave three significant digits (at most 6).
int decimals_for_three_digits(double value) {
  const double a = std::fabs(value);
  if (a == 0 || a >= 100) return 0;
  const int magnitude = static_cast<int>(std::floor(std::log10(a)));
  return std::min(6, 2 - magnitude);
}

// Three significant digits; rounding may carry into a new digit (99.96 → 100.0, 0.99999 → 1.000),
// so the digits are counted again on the rounded value.
std::string three_digits(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals_for_three_digits(value), value);
  const double rounded = std::stod(buf);
  return svg::format_fixed(rounded, decimals_for_three_digits(rounded));
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(value) >= 1024 && unit < 4) value /= 1024, ++unit;
  if (unit == 0) return std::to_string(bytes) + " B";
  // 999.7 KiB would print as "1000 KiB": promote to the next unit instead.
  if (std::fabs(value) >= 999.5 && unit < 4) value /= 1024, ++unit;
  return three_digits(value) + " " + kUnits[unit];
}

std::string format_sig(double value) {
  if (!std::isfinite(value)) return kNotMeasured;
  if (std::fabs(value) >= 999.5) return group_thousands(svg::format_fixed(std::round(value), 0));
  return three_digits(value);
}

std::string format_signed_percent(double fraction) {
  const double percent = fraction * 100;
  const double a = std::fabs(percent);
  const int decimals = a >= 10 ? 1 : a >= 0.1 ? 2 : 3;
  std::string text = svg::format_fixed(percent, decimals);
  if (text.find_first_not_of("0.") == std::string::npos) return "0%";
  if (percent > 0) text = "+" + text;
  return text + "%";
}

std::string format_percent(double fraction, int decimals) {
  return svg::format_fixed(fraction * 100, decimals) + "%";
}

std::string format_ratio(double ratio) {
  return svg::format_fixed(ratio, ratio >= 10 ? 0 : ratio >= 1 ? 1 : 2) + "\xC3\x97";  // ×
}

std::string format_timestamp(const std::string& iso) {
  static const std::regex kIso(R"((\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(:\d{2}(\.\d+)?)?Z)");
  std::smatch m;
  if (std::regex_match(iso, m, kIso)) return m[1].str() + " " + m[2].str() + " UTC";
  return iso;
}

std::string or_dash(const std::optional<double>& value, std::string (*format)(double)) {
  return value ? format(*value) : std::string(kNotMeasured);
}

}  // namespace lowbit::eval::report
