// Tensor: a typed, shaped view of contiguous row-major memory, optionally owning it.
//
// Ownership: a Tensor holds a shared_ptr to whatever keeps its bytes alive (a heap buffer, or a
// memory-mapped safetensors file). Copying a Tensor copies the view, not the data, so tensors read
// from a checkpoint stay zero-copy while the mapping lives as long as any tensor uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lowbit/dtype.h"

namespace lowbit {

using Shape = std::vector<int64_t>;

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled tensor that owns its (64-byte aligned) memory.
  static Tensor zeros(DType dtype, Shape shape);

  // A view of existing memory; `keep_alive` owns it (may be null for caller-managed memory).
  static Tensor view(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keep_alive);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;  // negative i counts from the end
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return data_ == nullptr; }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }

  // The rows [begin, end) of dimension 0, as a view sharing this tensor's memory.
  Tensor slice_rows(int64_t begin, int64_t end) const;

  // Same bytes, another shape with the same element count.
  Tensor reshaped(Shape shape) const;

  // An fp32 copy of any float or integer tensor (bf16/f16/fp8 decoded exactly).
  Tensor to_f32() const;

  // An owned tensor of float `dtype` (F32, BF16, F16, F8_E4M3) holding `values` rounded to it
  // (round to nearest even, as torch's casts do); numel(shape) values are read.
  static Tensor from_f32(const float* values, Shape shape, DType dtype);

  // "[2, 3]" for messages.
  std::string shape_string() const;

 private:
  DType dtype_ = DType::F32;
  Shape shape_;
  void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
};

std::string shape_to_string(const Shape& shape);

}  // namespace lowbit
