// gemm_bf16 (cuBLASLt, plans cached) on Llama-3-8B's linear shapes, m = 1, 16, 128, 2048 tokens.
//
// Counting (bytes = x + w + y in bf16, FLOPs = 2·m·n·k), with the ceilings this run measures
// (device-to-device copy; PERFORMANCE.md saw 4.25 TB/s) and the spec (4.8 TB/s, 989 TFLOP/s bf16;
// ~790 measured for big bf16 GEMMs):
//   shape (n×k)        weights   m=1 floor (bytes)    m=2048: FLOPs / floor at 790 TFLOP/s
//   qkv 6144×4096      50 MB     12 µs @4.25 TB/s     103 G / 130 µs
//   o 4096×4096        34 MB      8 µs                 69 G /  87 µs
//   gate_up 28672×4096 235 MB    55 µs                481 G / 609 µs
//   down 4096×14336    117 MB    28 µs                241 G / 305 µs
// Prediction: m = 1 and 16 are weight-streaming (GEMV-like) and should land at 70-90% of copy
// bandwidth in a CUDA graph (the small o/qkv shapes less: ~8-12 µs of work against a few µs of
// kernel ramp); m = 128 is still memory-bound (intensity ~120 FLOP/B < 206) so about the m = 1
// time plus a little; m = 2048 is compute-bound at ~75-80% of 989 (cuBLASLt's usual). PyTorch's
// eager numbers in PERFORMANCE.md (≈45 µs for the small shapes at m = 1) are launch gaps; the
// graph column here removes them, the eager column keeps them.
//
// Method (METHOD.md): random non-zero data, weights rotated over enough copies to exceed the 50 MB
// L2, warm-up, median of >= 20 timings; "graph" = one CUDA graph of 20 calls replayed, per-call
// time = replay median / 20; "eager" = CUDA events around each single call. Every shape's output is
// spot-checked against a double-precision dot product on the host in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm_bf16.h"

namespace {

using lowbit::kernels::cuda::BlasLt;
using lowbit::kernels::cuda::DeviceBuffer;

constexpr double kSpecBandwidth = 4.8e12;  // H200 HBM3e, bytes/s
constexpr double kSpecBf16 = 989e12;       // dense BF16 tensor-core FLOP/s
constexpr int kGraphCalls = 20;
constexpr int kReps = 25;

// Uniform in ±scale from a hash of the index: deterministic, non-zero almost everywhere.
__global__ void fill_random_bf16(uint16_t* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = (h & 0xFFFFFF) / 16777216.0f - 0.5f;
    p[i] = static_cast<uint16_t>(__float_as_uint(2.0f * scale * u) >> 16);
  }
}

void fill(uint16_t* p, int64_t n, uint32_t seed, float scale) {
  fill_random_bf16<<<1024, 256>>>(p, n, seed, scale);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median of kReps event timings of `body` (seconds), after 3 warm-up runs.
template <typename F>
double time_median(cudaStream_t stream, F&& body) {
  cudaEvent_t start, stop;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) body();
  std::vector<double> times;
  for (int r = 0; r < kReps; ++r) {
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

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer<char> a(bytes), b(bytes);
  LOWBIT_CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
  const double t = time_median(stream, [&] {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * bytes / t;  // read + write
}

struct LinearShape {
  const char* name;
  int64_t n, k;
};

// Max relative error of 64 sampled outputs against double-precision dots of the same bf16 data.
double spot_check(const uint16_t* dx, const uint16_t* dw, const uint16_t* dy, int64_t m, int64_t n,
                  int64_t k) {
  std::vector<uint16_t> xr(k), wr(k);
  double worst = 0.0;
  uint64_t state = 12345;
  for (int s = 0; s < 64; ++s) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t i = static_cast<int64_t>((state >> 33) % uint64_t(m));
    const int64_t j = static_cast<int64_t>((state >> 13) % uint64_t(n));
    uint16_t y = 0;
    LOWBIT_CUDA_CHECK(cudaMemcpy(xr.data(), dx + i * k, k * 2, cudaMemcpyDeviceToHost));
    LOWBIT_CUDA_CHECK(cudaMemcpy(wr.data(), dw + j * k, k * 2, cudaMemcpyDeviceToHost));
    LOWBIT_CUDA_CHECK(cudaMemcpy(&y, dy + i * n + j, 2, cudaMemcpyDeviceToHost));
    double dot = 0.0, mag = 0.0;
    for (int64_t t = 0; t < k; ++t) {
      const double p = double(lowbit::bf16_to_f32(xr[t])) * lowbit::bf16_to_f32(wr[t]);
      dot += p;
      mag += std::fabs(p);
    }
    // Relative to Σ|x·w| (random-sign sums can be near 0; bf16 rounding is relative to |y|).
    worst = std::max(worst, std::fabs(lowbit::bf16_to_f32(y) - dot) / std::max(mag, 1e-30));
  }
  return worst;
}

void bench_shape(BlasLt& blas, cudaStream_t stream, const LinearShape& s, int64_t m,
                 double copy_bw) {
  const int64_t w_elems = s.n * s.k;
  // Rotate weights so that the set read in one graph exceeds the L2 several times (>= 200 MB).
  const int copies = static_cast<int>(std::max<int64_t>(1, (200ll << 20) / (w_elems * 2) + 1));
  std::vector<DeviceBuffer<uint16_t>> w;
  for (int c = 0; c < copies; ++c) {
    w.emplace_back(w_elems);
    fill(w.back().data(), w_elems, 17u + c, 0.05f);
  }
  DeviceBuffer<uint16_t> x(m * s.k), y(m * s.n);
  fill(x.data(), m * s.k, 3u, 1.0f);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());

  int next = 0;
  const auto call = [&] {
    lowbit::kernels::cuda::gemm_bf16(blas, x.data(), m, s.k, w[next].data(), s.n, y.data(), stream);
    next = (next + 1) % copies;
  };
  const double eager = time_median(stream, call);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphCalls; ++i) call();
  LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LOWBIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double graphed =
      time_median(stream, [&] { LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) / kGraphCalls;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // y now holds the product with weight copy (next - 1) of the last call.
  const int last = (next + copies - 1) % copies;
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const double err = spot_check(x.data(), w[last].data(), y.data(), m, s.n, s.k);

  const double flops = 2.0 * m * s.n * s.k;
  const double bytes = 2.0 * (m * s.k + w_elems + m * s.n);
  const double floor = std::max(flops / kSpecBf16, bytes / copy_bw);
  std::printf("%-8s %5lld %6lld %6lld | %9.1f %9.1f | %7.1f %5.1f%% | %7.0f %5.1f%% %5.1f%% | %6.2f | %.1e\n",
              s.name, static_cast<long long>(m), static_cast<long long>(s.n),
              static_cast<long long>(s.k), graphed * 1e6, eager * 1e6, flops / graphed * 1e-12,
              100.0 * flops / graphed / kSpecBf16, bytes / graphed * 1e-9,
              100.0 * bytes / graphed / kSpecBandwidth, 100.0 * bytes / graphed / copy_bw,
              graphed / floor, err);
}

}  // namespace

int main() {
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("gemm_bench: no CUDA device\n");
      return 0;
    }
    cudaDeviceProp props{};
    LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
    cudaStream_t stream;
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_bw = copy_bandwidth(stream);
    std::printf("device: %s, %d SMs, L2 %d MB; measured D2D copy %.2f TB/s (spec %.1f)\n",
                props.name, props.multiProcessorCount, props.l2CacheSize >> 20, copy_bw * 1e-12,
                kSpecBandwidth * 1e-12);
    std::printf("gemm_bf16 = cuBLASLt bf16 TN, fp32 accumulate, plan cached; time per call\n");
    std::printf("%-8s %5s %6s %6s | %9s %9s | %7s %6s | %7s %6s %6s | %6s | %s\n", "layer", "m",
                "n", "k", "graph us", "eager us", "TFLOP/s", "%989", "GB/s", "%4.8T", "%copy",
                "/floor", "spot err");
    BlasLt blas;
    const LinearShape shapes[] = {{"qkv", 6144, 4096},
                                  {"o", 4096, 4096},
                                  {"gate_up", 28672, 4096},
                                  {"down", 4096, 14336}};
    for (int64_t m : {1, 16, 128, 2048}) {
      for (const LinearShape& s : shapes) bench_shape(blas, stream, s, m, copy_bw);
    }
    std::printf("floor = max(FLOPs / 989 TFLOP/s, bytes / measured copy bandwidth); spot err = max "
                "|y - dot| / sum|x*w| over 64 sampled outputs (bf16 output rounding alone: <= 2e-3)\n");
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
