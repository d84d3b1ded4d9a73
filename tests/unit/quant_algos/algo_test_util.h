// Golden fixtures of the calibration-algorithm tests: tests/unit/quant_algos/data/*.safetensors,
// written by scripts/reference/make_algo_vectors.py from llm-compressor 0.14.0.1 itself.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "lowbit/tensor.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant::testing {

class Golden {
 public:
  explicit Golden(const std::string& file)
      : file_(formats::SafetensorsFile::open(std::string(LOWBIT_SOURCE_DIR) +
                                             "/tests/unit/quant_algos/data/" + file)) {}

  bool has(const std::string& name) const { return file_->has(name); }
  Shape shape(const std::string& name) const { return file_->get(name).shape(); }

  // Any float / int tensor as fp32 (bf16 decoded exactly).
  std::vector<float> f32(const std::string& name) const {
    const Tensor t = file_->get(name).to_f32();
    const float* p = t.data_as<float>();
    return std::vector<float>(p, p + t.numel());
  }
  // An F64 tensor at full precision (other dtypes widened from fp32).
  std::vector<double> f64(const std::string& name) const {
    const Tensor t = file_->get(name);
    if (t.dtype() != DType::F64) {
      const std::vector<float> v = f32(name);
      return std::vector<double>(v.begin(), v.end());
    }
    std::vector<double> out(static_cast<size_t>(t.numel()));
    std::memcpy(out.data(), t.data(), out.size() * sizeof(double));
    return out;
  }
  nlohmann::json cases() const { return nlohmann::json::parse(file_->metadata().at("cases")); }
  nlohmann::json meta(const std::string& key) const {
    return nlohmann::json::parse(file_->metadata().at(key));
  }

 private:
  std::shared_ptr<formats::SafetensorsFile> file_;
};

// The QuantizationArgs JSON the script dumped (model_dump_json of compressed-tensors 0.19).
inline QuantArgs args_of(const nlohmann::json& j) { return parse_quant_args(j, "golden args"); }

inline double rel_diff(double a, double b) {
  const double m = std::max(std::fabs(a), std::fabs(b));
  return m == 0.0 ? 0.0 : std::fabs(a - b) / m;
}

// Largest relative difference between two vectors (sizes must match).
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) m = std::max(m, rel_diff(a[k], b[k]));
  return m;
}

inline size_t count_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) n += a[k] != b[k];
  return n;
}

}  // namespace lowbit::quant::testing
