// Picks the matmul kernel for this CPU (once, from cpu_features()) and the path for the shape.
#include <algorithm>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels {

namespace cpu {

namespace {

// Up to this many rows of x the streaming path wins: it decodes each weight in registers and uses
// it for every row of x, while the blocked path first writes and re-reads an fp32 panel, which
// only pays off over many rows. Crossovers measured on Zen 4 for 2048×2048 and 2048×8192 BF16
// (bench/NOTES.md): AVX-512 streaming stays at ~90% of FMA peak up to m = 64 (the blocked path
// reaches 72-77% there); AVX2 (16 registers) streams at 60-77% and falls behind between m = 32
// and 64; the scalar paths cross near m = 4.
int64_t streaming_max_rows(MatmulKernel kernel) {
  switch (kernel) {
    case MatmulKernel::AVX512: return 64;
    case MatmulKernel::AVX2: return 32;
    case MatmulKernel::SCALAR: return 4;
  }
  return 4;
}

detail::MatmulArgs make_args(const float* x, int64_t m, int64_t k, const Tensor& weight,
                             const float* bias, float* y) {
  if (weight.ndim() != 2 || weight.dim(1) != k || m < 0) {
    throw Internal("matmul: weight shape " + weight.shape_string() + " does not match k=" +
                   std::to_string(k) + " (m=" + std::to_string(m) + ")");
  }
  DType dtype = weight.dtype();
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16) {
    throw Unsupported("matmul: weight dtype " + std::string(dtype_name(dtype)) +
                      " is not F32/F16/BF16");
  }
  detail::MatmulArgs args;
  args.x = x;
  args.m = m;
  args.k = k;
  args.n = weight.dim(0);
  args.w = weight.data();
  args.w_dtype = dtype;
  args.bias = bias;
  args.y = y;
  if (args.m > 0 && args.n > 0 && (y == nullptr || (k > 0 && (x == nullptr || args.w == nullptr)))) {
    throw Internal("matmul: null data pointer for weight " + weight.shape_string());
  }
  return args;
}

// Handles the shapes with nothing to sum; returns true if nothing is left to do.
bool trivial(const detail::MatmulArgs& args) {
  if (args.m == 0 || args.n == 0) return true;
  if (args.k != 0) return false;
  for (int64_t i = 0; i < args.m; ++i) {  // an empty sum: only the bias remains
    for (int64_t j = 0; j < args.n; ++j) args.y[i * args.n + j] = args.bias ? args.bias[j] : 0.0f;
  }
  return true;
}

void run(MatmulKernel kernel, MatmulPath path, const detail::MatmulArgs& args) {
  if (trivial(args)) return;
  bool streaming = path == MatmulPath::STREAMING ||
                   (path == MatmulPath::AUTO && args.m <= streaming_max_rows(kernel));
  switch (kernel) {
    case MatmulKernel::AVX512:
      streaming ? detail::gemv_avx512(args) : detail::gemm_avx512(args);
      return;
    case MatmulKernel::AVX2:
      streaming ? detail::gemv_avx2(args) : detail::gemm_avx2(args);
      return;
    case MatmulKernel::SCALAR:
      streaming ? detail::gemv_scalar(args) : detail::gemm_scalar(args);
      return;
  }
  throw Internal("matmul: unknown kernel");
}

MatmulKernel detect_best() {
  if (matmul_kernel_supported(MatmulKernel::AVX512)) return MatmulKernel::AVX512;
  if (matmul_kernel_supported(MatmulKernel::AVX2)) return MatmulKernel::AVX2;
  return MatmulKernel::SCALAR;
}

}  // namespace

const char* matmul_kernel_name(MatmulKernel kernel) {
  switch (kernel) {
    case MatmulKernel::SCALAR: return "scalar";
    case MatmulKernel::AVX2: return "avx2";
    case MatmulKernel::AVX512: return "avx512";
  }
  return "unknown";
}

bool matmul_kernel_supported(MatmulKernel kernel) {
  const CpuFeatures& f = cpu_features();
  switch (kernel) {
    case MatmulKernel::SCALAR: return true;
    case MatmulKernel::AVX2: return f.has_avx2_kernels();
    case MatmulKernel::AVX512: return f.has_avx512_kernels();
  }
  return false;
}

MatmulKernel matmul_best_kernel() {
  static const MatmulKernel best = detect_best();
  return best;
}

std::vector<MatmulKernel> matmul_supported_kernels() {
  std::vector<MatmulKernel> out;
  for (MatmulKernel k : {MatmulKernel::SCALAR, MatmulKernel::AVX2, MatmulKernel::AVX512}) {
    if (matmul_kernel_supported(k)) out.push_back(k);
  }
  return out;
}

void matmul_with(MatmulKernel kernel, MatmulPath path, const float* x, int64_t m, int64_t k,
                 const Tensor& weight, const float* bias, float* y) {
  if (!matmul_kernel_supported(kernel)) {
    throw Unsupported(std::string("matmul: this CPU cannot run the ") + matmul_kernel_name(kernel) +
                      " kernel (features: " + cpu_features_string(cpu_features()) + ")");
  }
  run(kernel, path, make_args(x, m, k, weight, bias, y));
}

bool matmul_bf16_dot_supported() {
  const CpuFeatures& f = cpu_features();
  return f.has_avx512_kernels() && f.avx512bf16;
}

void matmul_bf16_dot(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias,
                     float* y) {
  if (!matmul_bf16_dot_supported()) {
    throw Unsupported("matmul_bf16_dot: this CPU lacks AVX512_BF16 (features: " +
                      cpu_features_string(cpu_features()) + ")");
  }
  detail::MatmulArgs args = make_args(x, m, k, weight, bias, y);
  if (args.w_dtype != DType::BF16) {
    throw Unsupported("matmul_bf16_dot: weight dtype " + std::string(dtype_name(args.w_dtype)) +
                      " is not BF16");
  }
  if (!trivial(args)) detail::gemm_bf16_dot_avx512(args);
}

}  // namespace cpu

void matmul(const float* x, int64_t m, int64_t k, const Tensor& weight, const float* bias, float* y) {
  cpu::run(cpu::matmul_best_kernel(), cpu::MatmulPath::AUTO, cpu::make_args(x, m, k, weight, bias, y));
}

const char* matmul_kernel_name() { return cpu::matmul_kernel_name(cpu::matmul_best_kernel()); }

}  // namespace lowbit::kernels
