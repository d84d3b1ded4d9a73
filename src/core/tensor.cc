#include "lowbit/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/float_convert.h"
#include "lowbit/error.h"

namespace lowbit {
namespace {

int64_t count_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw InvalidArgument("negative dimension in shape " + shape_to_string(shape));
    n *= d;
  }
  return n;
}

}  // namespace

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  size_t bytes = static_cast<size_t>(count_elements(shape)) * dtype_size(dtype);
  size_t padded = (bytes + 63) / 64 * 64;
  if (padded == 0) padded = 64;
  void* memory = std::aligned_alloc(64, padded);
  if (memory == nullptr) throw OutOfMemory("cannot allocate " + std::to_string(padded) + " bytes");
  std::memset(memory, 0, padded);
  std::shared_ptr<void> owner(memory, [](void* p) { std::free(p); });
  return view(dtype, std::move(shape), memory, std::move(owner));
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keep_alive) {
  count_elements(shape);  // validates
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(keep_alive);
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  int index = i < 0 ? i + n : i;
  if (index < 0 || index >= n) {
    throw Internal("dimension " + std::to_string(i) + " out of range for shape " + shape_string());
  }
  return shape_[static_cast<size_t>(index)];
}

int64_t Tensor::numel() const { return count_elements(shape_); }

std::string Tensor::shape_string() const { return shape_to_string(shape_); }

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (ndim() == 0 || begin < 0 || end < begin || end > shape_[0]) {
    throw Internal("slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of shape " +
                   shape_string());
  }
  Shape shape = shape_;
  shape[0] = end - begin;
  size_t row_bytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
  return view(dtype_, shape, static_cast<char*>(data_) + static_cast<size_t>(begin) * row_bytes,
              owner_);
}

Tensor Tensor::reshaped(Shape shape) const {
  if (count_elements(shape) != numel()) {
    throw Internal("cannot reshape " + shape_string() + " to " + shape_to_string(shape));
  }
  return view(dtype_, std::move(shape), data_, owner_);
}

Tensor Tensor::from_f32(const float* values, Shape shape, DType dtype) {
  Tensor out = zeros(dtype, std::move(shape));
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32: out.data_as<float>()[i] = values[i]; break;
      case DType::BF16: out.data_as<uint16_t>()[i] = f32_to_bf16(values[i]); break;
      case DType::F16: out.data_as<uint16_t>()[i] = f32_to_f16(values[i]); break;
      case DType::F8_E4M3: out.data_as<uint8_t>()[i] = f32_to_fp8_e4m3(values[i]); break;
      default:
        throw Internal("Tensor::from_f32: " + std::string(dtype_name(dtype)) + " is not a float dtype");
    }
  }
  return out;
}

Tensor Tensor::to_f32() const {
  Tensor out = zeros(DType::F32, shape_);
  float* dst = out.data_as<float>();
  int64_t n = numel();
  const void* src = data_;
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (dtype_) {
      case DType::F64: v = static_cast<float>(static_cast<const double*>(src)[i]); break;
      case DType::F32: v = static_cast<const float*>(src)[i]; break;
      case DType::F16: v = f16_to_f32(static_cast<const uint16_t*>(src)[i]); break;
      case DType::BF16: v = bf16_to_f32(static_cast<const uint16_t*>(src)[i]); break;
      case DType::F8_E4M3: v = fp8_e4m3_to_f32(static_cast<const uint8_t*>(src)[i]); break;
      case DType::F8_E5M2: v = fp8_e5m2_to_f32(static_cast<const uint8_t*>(src)[i]); break;
      case DType::I64: v = static_cast<float>(static_cast<const int64_t*>(src)[i]); break;
      case DType::I32: v = static_cast<float>(static_cast<const int32_t*>(src)[i]); break;
      case DType::I16: v = static_cast<float>(static_cast<const int16_t*>(src)[i]); break;
      case DType::I8: v = static_cast<float>(static_cast<const int8_t*>(src)[i]); break;
      case DType::U8: v = static_cast<float>(static_cast<const uint8_t*>(src)[i]); break;
      case DType::BOOL: v = static_cast<const uint8_t*>(src)[i] ? 1.0f : 0.0f; break;
    }
    dst[i] = v;
  }
  return out;
}

}  // namespace lowbit
