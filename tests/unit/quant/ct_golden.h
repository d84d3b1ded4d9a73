// Access to the compressed-tensors golden data written by scripts/reference/make_ct_vectors.py
// (tests/unit/quant/data/): the weight cases, their tensors, and the JSON dumps.
#pragma once

#include <cstring>
#include <fstream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant::testing {

inline std::string data_path(const std::string& file) {
  return std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/quant/data/" + file;
}

inline nlohmann::ordered_json load_json(const std::string& file) {
  std::ifstream in(data_path(file));
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

inline const formats::SafetensorsFile& vectors() {
  static const auto file = formats::SafetensorsFile::open(data_path("ct_vectors.safetensors"));
  return *file;
}

struct GoldenCase {
  std::string key;  // tensor name prefix in ct_vectors.safetensors
  QuantScheme scheme;
  CompressionFormat format;
  int64_t rows, cols;
  DType dtype;
};

// gtest prints a failing parameter with this instead of its bytes.
inline void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.key; }

inline std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  const auto j = load_json("ct_vectors.json");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& c = it.value();
    const std::string d = c["dtype"].get<std::string>();
    const DType dtype = d == "bf16" ? DType::BF16 : d == "f16" ? DType::F16 : DType::F32;
    out.push_back({it.key(), parse_quant_scheme(nlohmann::json::parse(c["scheme"].dump()), it.key()),
                   parse_compression_format(c["format"].get<std::string>(), it.key()),
                   c["rows"].get<int64_t>(), c["cols"].get<int64_t>(), dtype});
  }
  return out;
}

inline std::vector<float> to_floats(const Tensor& t) {
  Tensor f = t.to_f32();
  return std::vector<float>(f.data_as<float>(), f.data_as<float>() + f.numel());
}

// Bitwise equality of two float vectors (so -0.0 != 0.0 and NaN == NaN); returns the first index
// that differs, or -1.
inline int64_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace lowbit::quant::testing
