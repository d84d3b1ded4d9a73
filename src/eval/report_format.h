// How the report writes numbers: few digits, units people read, and "—" for what was not measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lowbit::eval::report {

inline constexpr const char* kNotMeasured = "\xE2\x80\x94";  // U+2014 em dash

// 36.6 MiB, 9.87 MiB, 1.43 GiB, 512 B: binary units, three significant digits.
std::string format_bytes(int64_t bytes);

// Three significant digits, thousands grouped with commas from 1,000 on: 0.00123, 12.3, 1,234.
std::string format_sig(double value);

// A signed relative change as a percentage: +1.23%, −0.42%, +12.4%, +0.012%.
std::string format_signed_percent(double fraction);

// 0.412 → "41.2%".
std::string format_percent(double fraction, int decimals = 1);

// "3.1×"; two digits below 10.
std::string format_ratio(double ratio);

// "2026-11-29T18:30:00Z" → "2026-11-29 18:30 UTC"; anything else unchanged.
std::string format_timestamp(const std::string& iso);

std::string or_dash(const std::optional<double>& value, std::string (*format)(double));

}  // namespace lowbit::eval::report
