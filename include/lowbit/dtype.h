// Element types of tensors as they appear in safetensors files (and in memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lowbit {

enum class DType : uint8_t {
  F64,
  F32,
  F16,
  BF16,
  F8_E4M3,
  F8_E5M2,
  I64,
  I32,
  I16,
  I8,
  U8,
  BOOL,
};

// Bytes per element.
size_t dtype_size(DType dtype);

// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);

// Parses the safetensors spelling; returns false for an unknown name.
bool parse_dtype(std::string_view name, DType* out);

bool dtype_is_float(DType dtype);

}  // namespace lowbit
