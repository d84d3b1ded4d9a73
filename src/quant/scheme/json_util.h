// Small typed accessors for the compressed-tensors JSON parsers: each names `where` (file and
// field path) in its error, as pydantic's validation errors do.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lowbit/error.h"

namespace lowbit::quant::json_util {

// pydantic's lax int: an integer, or a float with no fractional part (8.0).
inline int64_t get_int(const nlohmann::json& v, const std::string& where) {
  // An unsigned above INT64_MAX would wrap (2^64 - 1 to -1, group_size's "channel").
  if (v.is_number_unsigned())
    LOWBIT_CHECK(v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                 where + ": out of range, got " + v.dump());
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    LOWBIT_CHECK(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15,
                 where + ": expected an integer, got " + v.dump());
    return static_cast<int64_t>(d);
  }
  throw InvalidArgument(where + ": expected an integer, got " + v.dump());
}

inline bool get_bool(const nlohmann::json& v, const std::string& where) {
  LOWBIT_CHECK(v.is_boolean(), where + ": expected true or false, got " + v.dump());
  return v.get<bool>();
}

inline std::vector<std::string> get_string_list(const nlohmann::json& v, const std::string& where) {
  LOWBIT_CHECK(v.is_array(), where + ": expected a list of strings, got " + v.dump());
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    LOWBIT_CHECK(v[i].is_string(), where + "[" + std::to_string(i) + "]: expected a string, got " +
                                       v[i].dump());
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

}  // namespace lowbit::quant::json_util
