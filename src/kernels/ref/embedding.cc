// Embedding row gather: one stored row (F32/F16/BF16) decoded to fp32 per token.
#include <cstring>
#include <string>

#include "core/float_convert.h"
#include "kernels/ops.h"
#include "lowbit/error.h"

namespace lowbit::kernels {

void embedding_lookup(const Tensor& table, const int32_t* ids, int64_t n, float scale, float* out) {
  const DType dtype = table.dtype();
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) {
    throw Unsupported("embedding: table dtype " + std::string(dtype_name(dtype)) +
                      " is not F32/F16/BF16");
  }
  const int64_t dim = table.dim(1);
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * dim;
    const int64_t row = ids[t];
    if (dtype == DType::F32) {
      std::memcpy(o, table.data_as<const float>() + row * dim, static_cast<size_t>(dim) * 4);
    } else {
      const uint16_t* src = table.data_as<const uint16_t>() + row * dim;
      if (dtype == DType::BF16) {
        for (int64_t i = 0; i < dim; ++i) o[i] = bf16_to_f32(src[i]);
      } else {
        for (int64_t i = 0; i < dim; ++i) o[i] = f16_to_f32(src[i]);
      }
    }
    if (scale != 1.0f) {
      for (int64_t i = 0; i < dim; ++i) o[i] *= scale;
    }
  }
}

}  // namespace lowbit::kernels
