// The naive definition of matmul: one weight element decoded at a time, fp64 accumulation is NOT
// used on purpose (fp32 accumulation, like the real kernels, in k order).
#include "core/float_convert.h"
#include "kernels/matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels::ref {

namespace {
float weight_at(const Tensor& weight, int64_t index) {
  switch (weight.dtype()) {
    case DType::F32: return weight.data_as<const float>()[index];
    case DType::F16: return f16_to_f32(weight.data_as<const uint16_t>()[index]);
    case DType::BF16: return bf16_to_f32(weight.data_as<const uint16_t>()[index]);
    default:
      throw Unsupported("matmul: weight dtype " + std::string(dtype_name(weight.dtype())) +
                        " is not F32/F16/BF16");
  }
}
}  // namespace

void matmul(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias, float* y) {
  if (weight.ndim() != 2 || weight.dim(1) != k) {
    throw Internal("matmul: weight shape " + weight.shape_string() + " does not match k=" +
                   std::to_string(k));
  }
  int64_t n = weight.dim(0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t p = 0; p < k; ++p) sum += x[i * k + p] * weight_at(weight, j * k + p);
      y[i * n + j] = sum + (bias ? bias[j] : 0.0f);
    }
  }
}

}  // namespace lowbit::kernels::ref
