// GPTQ on the GPU (src/quant/gpu): the device Hessian accumulation and gptq_quantize_cuda on
// Llama-3-8B's shapes, with the CPU gptq_quantize once beside it.
//
// Counting and prediction (H200: 989 TFLOP/s dense BF16 spec, ~790 measured for big GEMMs; FP64
// tensor cores ~67 TFLOP/s; fp32 CUDA cores ~67 TFLOP/s; PCIe/host copies ~20-50 GB/s pageable):
//   Hessian, 32768 tokens: the full product is 2·T·n² FLOPs; DeviceHessian computes the lower
//   triangle in 1024-row stripes: 62.5% of it for n = 4096 (0.69 TFLOP executed), 53.6% for
//   n = 14336 (7.2 TFLOP). Long-K bf16 GEMMs on cuBLAS should run at 600-750 TFLOP/s executed:
//   ~1.0 ms (4096) and ~11 ms (14336) — ~0.45 s per decoder layer for 2^20 calibration tokens
//   (q/o/gate inputs at 4096, down at 14336), ~14 s for the 32 layers. The finalize pass (mirror +
//   scale, reading 12 B and writing 4 B per entry twice over) adds ~0.2 ms / ~2 ms.
//   gptq_quantize_cuda, W4A16 group 128, actorder weight:
//     14336x4096 (gate/up): host observer over 58.7 M weights (~0.1-0.2 s, single-threaded, the
//       same code as the CPU path), weight upload + download 2 x 235 MB pageable (~20-50 ms),
//       potrf + trtri n = 4096 in double (~5-10 ms), 32 column-loop kernels (~50 µs each) and
//       GEMMs totalling rows·cols² = 0.24 TFLOP fp32 (~5-10 ms): ~0.2-0.3 s, host-bound.
//     4096x14336 (down): the same host work, potrf + trtri n = 14336 (2·n³/3 = 2 TFLOP fp64,
//       ~40-80 ms), 112 column-loop kernels + GEMMs of 0.84 TFLOP fp32 (~25-40 ms): ~0.3-0.4 s.
//   CPU gptq_quantize 14336x4096 on the GPU host's cores: a few seconds (the lazy-update GEMMs
//   and the scalar column loop); the GPU should be >= 10x faster end to end.
//
// Method: Hessian: CUDA events, median of 20 after 3 warm-ups (reset + add + finalize; and add
// alone; and one cuBLAS full-product GEMM of the same inputs as the vendor baseline).
// gptq_quantize_cuda: wall clock around the call (it synchronizes), median of 5 after 1 warm-up.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "quant/algos/gptq.h"
#include "quant/algos/observers.h"
#include "quant/gpu/gptq_cuda.h"
#include "quant/scheme/quant_args.h"

namespace {

using lowbit::kernels::cuda::DeviceBuffer;
using lowbit::quant::gpu::DeviceHessian;

constexpr double kSpecBf16 = 989e12;
constexpr int64_t kTokens = 32768;

// Deterministic pseudo-normal bf16 activations (sum of 4 uniforms), all on the device.
__global__ void fill_activations(uint16_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) {
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      s += (h & 0xFFFF) / 65536.0f - 0.5f;
    }
    p[i] = static_cast<uint16_t>(__float_as_uint(s) >> 16);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_events(cudaStream_t stream, F&& body) {
  cudaEvent_t start, stop;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) body();
  std::vector<double> times;
  for (int r = 0; r < 20; ++r) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(start, stream));
    body();
    LOWBIT_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(times);
}

template <typename F>
double time_wall(int reps, F&& body) {
  body();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(times);
}

double stripe_flops(int64_t tokens, int64_t n) {  // what DeviceHessian executes (kStripe 1024)
  double f = 0.0;
  for (int64_t r0 = 0; r0 < n; r0 += 1024) f += 2.0 * tokens * std::min<int64_t>(1024, n - r0) *
                                                static_cast<double>(std::min<int64_t>(r0 + 1024, n));
  return f;
}

void bench_hessian(cudaStream_t stream, int64_t n) {
  DeviceBuffer<uint16_t> x(static_cast<size_t>(kTokens * n));
  fill_activations<<<1024, 256, 0, stream>>>(x.data(), kTokens * n, 7u);
  LOWBIT_CUDA_CHECK_LAUNCH();
  DeviceHessian h(n, stream);
  const double t_all = time_events(stream, [&] {
    h.reset();
    h.add(x.data(), kTokens, n, 16);
    h.hessian();
  });
  const double t_add = time_events(stream, [&] {
    h.reset();
    h.add(x.data(), kTokens, n, 16);
  });
  // cuBLAS' full product of the same inputs (the vendor baseline: no symmetry used).
  cublasHandle_t blas;
  LOWBIT_CUBLAS_CHECK(cublasCreate(&blas));
  LOWBIT_CUBLAS_CHECK(cublasSetStream(blas, stream));
  DeviceBuffer<float> c(static_cast<size_t>(n * n));
  const float one = 1.0f;
  const double t_full = time_events(stream, [&] {
    LOWBIT_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_T, int(n), int(n), int(kTokens),
                                     &one, x.data(), CUDA_R_16BF, int(n), x.data(), CUDA_R_16BF,
                                     int(n), &one, c.data(), CUDA_R_32F, int(n),
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  cublasDestroy(blas);
  const double executed = stripe_flops(kTokens, n), full = 2.0 * kTokens * double(n) * n;
  std::printf("hessian %5lld tok x %5lld cols: add+finalize %8.3f ms (add %8.3f ms, %6.1f TFLOP/s "
              "executed = %4.1f%% of 989) | cuBLAS full product %8.3f ms (%6.1f TFLOP/s) | "
              "speedup vs full %.2fx\n",
              (long long)kTokens, (long long)n, t_all * 1e3, t_add * 1e3, executed / t_add / 1e12,
              100.0 * executed / t_add / kSpecBf16, t_full * 1e3, full / t_full / 1e12,
              t_full / t_all);
}

lowbit::quant::QuantArgs w4a16_weight_order() {
  lowbit::quant::QuantArgs a = *lowbit::quant::preset_scheme("W4A16", {"Linear"}).weights;
  a.actorder = lowbit::quant::ActOrder::Weight;  // llm-compressor's GPTQ default ("static")
  return a;
}

void bench_gptq(cudaStream_t stream, int64_t rows, int64_t cols, bool with_cpu) {
  DeviceBuffer<uint16_t> x(static_cast<size_t>(kTokens * cols));
  fill_activations<<<1024, 256, 0, stream>>>(x.data(), kTokens * cols, 11u);
  LOWBIT_CUDA_CHECK_LAUNCH();
  DeviceHessian h(cols, stream);
  h.add(x.data(), kTokens, cols, 16);
  const float* dh = h.hessian();
  std::vector<float> w0(static_cast<size_t>(rows * cols));
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& v : w0) v = nd(gen);
  const lowbit::quant::QuantArgs args = w4a16_weight_order();
  const lowbit::quant::GptqOptions opt;
  lowbit::quant::GptqResult r;
  const double t_gpu = time_wall(5, [&] {
    std::vector<float> w = w0;
    r = lowbit::quant::gpu::gptq_quantize_cuda(w, rows, cols, dh, args, opt,
                                               lowbit::DType::BF16, stream);
  });
  const double t_obs = time_wall(3, [&] {
    lowbit::quant::observe_weight(w0.data(), rows, cols, args, lowbit::DType::BF16);
  });
  std::printf("gptq_quantize_cuda %5lld x %5lld W4A16 g128 actorder=weight: %7.3f s (host "
              "observer alone %6.3f s) loss %.4g retries %d\n",
              (long long)rows, (long long)cols, t_gpu, t_obs, r.loss, r.retries);
  if (!with_cpu) return;
  const std::vector<float> hh = h.download();
  std::vector<float> w = w0;
  const auto t0 = std::chrono::steady_clock::now();
  const lowbit::quant::GptqResult rc =
      lowbit::quant::gptq_quantize(w, rows, cols, hh, args, opt, lowbit::DType::BF16);
  const double t_cpu = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gptq_quantize (CPU)  %5lld x %5lld, one run: %7.3f s loss %.4g -> GPU speedup %.1fx\n",
              (long long)rows, (long long)cols, t_cpu, rc.loss, t_cpu / t_gpu);
}

}  // namespace

int main() {
  try {
    if (!lowbit::kernels::cuda::device_available()) {
      std::printf("no CUDA device\n");
      return 0;
    }
    cudaStream_t stream;
    LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream));
    bench_hessian(stream, 4096);
    bench_hessian(stream, 14336);
    bench_gptq(stream, 14336, 4096, /*with_cpu=*/true);
    bench_gptq(stream, 4096, 14336, /*with_cpu=*/false);
    std::printf("(CPU gptq_quantize for 4096x14336 not run: its n = 14336 double factorization "
                "and 0.84 TFLOP of fp32 updates take minutes on the host)\n");
    LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gptq_bench: %s\n", e.what());
    return 1;
  }
}
