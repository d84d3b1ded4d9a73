// wna16_gemm (W4A16 / W8A16, kernels/cuda/wna16_gemm.h) on Llama-3-8B's linear shapes against a
// cuBLASLt BF16 GEMM of the same shape (the speed-up quantization buys), m = 1, 4, 16, 32, 64, 128,
// 1024 (AUTO's path; at 64 and 128 both paths, to place the crossover).
//
// Counting. int4 group 128 (fp32 scales): 0.5 + 4/128 = 0.531 bytes per weight; int8 per-channel:
// ~1.0; bf16: 2. Bytes = packed weights + x + y; FLOPs = 2·m·n·k.
//   shape (n×k)          int4 g128   floor @4.8 TB/s   bf16      int8/ch
//   qkv 6144×4096        13.4 MB     2.8 µs            50.3 MB   25.2 MB   (q, k, v fused)
//   o 4096×4096          8.9 MB      1.9 µs            33.6 MB   16.8 MB
//   gate 14336×4096      31.2 MB     6.5 µs            117 MB    58.7 MB
//   gate_up 28672×4096   62.4 MB     13.0 µs           235 MB    117 MB
//   down 4096×14336      31.2 MB     6.5 µs            117 MB    58.7 MB
// First run (H200, 2026-12, the previous stream kernel): m = 1 o 6.5 µs (28% of 4.8 TB/s), gate
// 17.7 µs (37%); m = 16 ~1.1-1.4x bf16; m = 64 0.4x. Cause: each warp had only 8 chunks (= its
// register ring) and loaded x one chunk ahead, a chain of L2 round trips behind a saturated memory
// system; blocks were one-shot, so there was no steady state.
// Prediction for the cp.async ring kernel (wna16_stream.cu): per 1 KB of int4 codes (2 tiles × 1
// chunk) a warp issues ~170 instructions at m = 1 (SASS count; ~260 at m = 16), an issue ceiling
// of ~6.3 TB/s (4.1 at m = 16), so the bytes bound it: ~14 warps per SM × ~5 KB of codes in flight
// each = ~70 KB per SM. m = 1..8: gate ~9.5 µs (~68% of 4.8 TB/s, ~3.2x bf16), gate_up ~18 µs
// (~72%, ~3.1x), down ~9.5 µs (~68%), o ~4 µs (~45%: launch + one latency are half of it).
// m = 16: ~60% of bandwidth: gate ~11 µs, ~2.8x bf16. m = 32: mma.sync + dequant ~200 TFLOP/s:
// gate ~19 µs (~1.7x bf16). m = 64 / 128: 2 / 4 launches, ~1.4x / ~0.4-0.5x bf16 but still ahead
// of the dequant path (~90 µs on gate), which AUTO now takes only beyond ~128 rows. int8 per
// channel: ~1.9x the int4 bytes, same fractions.
// Block kernel (wna16_block.cu, 17..64 rows; session 28): x staged once per block of 4 warps × 2
// tiles, narrow layers split k over a cluster. Prediction: mma.sync + dequant at ~250 TFLOP/s where
// the grid fills the GPU: gate_up m = 64 ~60 µs (~1.0x bf16, against 123 µs for two stream
// launches); measured 65 µs, 231 TFLOP/s (bench/NOTES.md).
// The "split" lines time m = 1 and 16 (stream kernel: forced warps per block, the k split) and
// m = 64 (block kernel: forced shares of k, the cluster size; 16 means 8) against the automatic
// choice ("auto").
// Method (METHOD.md): random data (never zeros), weights rotated over enough copies to exceed the
// 50 MB L2 twice, warm-up, one CUDA graph of kCalls calls replayed kReps times, per-call time =
// replay median / kCalls. Each configuration's output is checked in the same run against double
// dot products of the dequantized weights (all rows at m = 1, 64 sampled rows otherwise); the
// relative error is printed (bf16 rounding of y: ~2e-3; the prefill path's bf16 weights: ~3e-3).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/wna16_gemm.h"
#include "kernels/cuda/wna16_internal.h"

namespace {

using namespace lowbit::kernels;
using namespace lowbit::kernels::cuda;

constexpr double kSpecBandwidth = 4.8e12;
constexpr double kSpecBf16 = 989e12;
constexpr int kCalls = 20;
constexpr int kReps = 25;
constexpr size_t kRotateBytes = size_t{200} << 20;  // > 2 × 50 MB L2

struct Rng {  // splitmix64
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float signed_value() {
    const float v = 0.1f + 0.9f * static_cast<float>(next() >> 40) / 16777216.0f;
    return (next() & 1) ? -v : v;
  }
};

IntWeights random_weights(int bits, int64_t n, int64_t k, int64_t group, Rng& rng) {
  IntWeights w;
  w.bits = bits;
  w.rows = n;
  w.cols = k;
  w.group_size = group;
  w.codes.resize(static_cast<size_t>(n * k));
  for (size_t i = 0; i < w.codes.size(); i += 8) {  // 8 codes per draw: packing 117 M codes fast
    uint64_t r = rng.next();
    for (size_t j = i; j < std::min(i + 8, w.codes.size()); ++j, r >>= 8) {
      w.codes[j] = static_cast<uint8_t>(r & ((1u << bits) - 1));
    }
  }
  w.scales.resize(static_cast<size_t>(n * w.groups()));
  for (float& s : w.scales) s = std::ldexp(0.5f + 0.5f * std::fabs(rng.signed_value()), -9);
  return w;
}

// A second device copy of packed weights (rotation against the L2).
Wna16GpuWeights copy_of(const Wna16GpuWeights& w) {
  Wna16GpuWeights c;
  c.layout = w.layout;
  auto dup = [](auto& dst, const auto& src) {
    using T = std::remove_reference_t<decltype(*src.data())>;
    dst = DeviceBuffer<std::remove_const_t<T>>(src.size());
    if (src.size())
      LOWBIT_CUDA_CHECK(cudaMemcpy(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice));
  };
  dup(c.codes, w.codes);
  dup(c.scales, w.scales);
  dup(c.zeros, w.zeros);
  dup(c.column_of, w.column_of);
  return c;
}

// Median per-call time (µs) of `call(i)` for i = 0..kCalls-1, captured in one graph.
template <typename Call>
double time_graph(cudaStream_t stream, Call call) {
  for (int i = 0; i < kCalls; ++i) call(i);  // warm-up (and cuBLASLt's heuristic cache)
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kCalls; ++i) call(i);
  LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LOWBIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<double> times;
  for (int r = 0; r < kReps; ++r) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(start, stream));
    LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LOWBIT_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e3 / kCalls);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, stream));
  const double us = time_graph(stream, [&](int) {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * bytes / (us * 1e-6);
}

const char* path_name(Wna16GpuPath path) {
  return path == Wna16GpuPath::STREAM  ? "stream"
         : path == Wna16GpuPath::WGMMA ? "wgmma"
                                       : "dequant";
}

struct Case {
  const char* name;
  int64_t n, k;
};

// ‖y − want‖ / ‖want‖ over the rows of x given.
double relative_error(const std::vector<uint16_t>& y, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = lowbit::bf16_to_f32(y[i]) - want[i];
    num += std::isfinite(d) ? d * d : 1e300;
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

void run_case(const Case& c, int bits, int64_t group, cudaStream_t stream, double copy_bw) {
  Rng rng{static_cast<uint64_t>(c.n * 31 + c.k + bits)};
  const IntWeights w = random_weights(bits, c.n, c.k, group, rng);
  std::vector<Wna16GpuWeights> copies;
  copies.push_back(pack_wna16_for_gpu(w));
  const size_t weight_bytes = copies[0].device_bytes();
  while (copies.size() * weight_bytes < kRotateBytes && copies.size() < 64)
    copies.push_back(copy_of(copies[0]));
  const size_t bf16_bytes = static_cast<size_t>(c.n * c.k * 2);
  const size_t bf16_copies = std::max<size_t>(2, (kRotateBytes + bf16_bytes - 1) / bf16_bytes);
  std::vector<DeviceBuffer<uint16_t>> bf16_w;
  {
    std::vector<uint16_t> host(static_cast<size_t>(c.n * c.k));
    for (auto& v : host) v = lowbit::f32_to_bf16(rng.signed_value() * 0.02f);
    for (size_t i = 0; i < bf16_copies; ++i) bf16_w.emplace_back(std::span<const uint16_t>(host));
  }
  const int64_t max_m = 1024;
  std::vector<uint16_t> x_host(static_cast<size_t>(max_m * c.k));
  for (auto& v : x_host) v = lowbit::f32_to_bf16(rng.signed_value());
  DeviceBuffer<uint16_t> x{std::span<const uint16_t>(x_host)}, y(static_cast<size_t>(max_m * c.n));
  DeviceBuffer<uint8_t> workspace(
      std::max({wna16_workspace_bytes(max_m, copies[0], Wna16GpuPath::DEQUANT_GEMM),
                wna16_workspace_bytes(max_m, copies[0], Wna16GpuPath::STREAM),
                detail::kWna16LtWorkspaceBytes}));

  // AUTO's path at each m, and the other paths from 32 rows on (to place the crossovers).
  struct Run {
    int64_t m;
    Wna16GpuPath path;
  };
  std::vector<Run> runs;
  for (int64_t m : {1, 4, 8, 16, 32, 64, 96, 128, 256, 1024}) {
    const Wna16GpuPath automatic = wna16_auto_path(m, copies[0]);
    runs.push_back({m, automatic});
    if (m < 32) continue;
    for (Wna16GpuPath other :
         {Wna16GpuPath::STREAM, Wna16GpuPath::DEQUANT_GEMM, Wna16GpuPath::WGMMA}) {
      if (other == automatic || (other == Wna16GpuPath::WGMMA && !detail::wna16_wgmma_available()))
        continue;
      if (other == Wna16GpuPath::STREAM && m > 256) continue;
      runs.push_back({m, other});
    }
  }
  for (const Run& run : runs) {
    const int64_t m = run.m;
    const Wna16GpuPath path = run.path;
    const double us = time_graph(stream, [&](int i) {
      wna16_gemm(x.data(), m, copies[static_cast<size_t>(i) % copies.size()], y.data(),
                 workspace.data(), workspace.size(), stream, nullptr, path);
    });
    // Correctness in the same run: rows of y against double dot products of the dequantized
    // weights (all rows at m = 1, 64 sampled rows otherwise).
    wna16_gemm(x.data(), m, copies[0], y.data(), workspace.data(), workspace.size(), stream,
               nullptr, path);
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<uint16_t> y_host = y.download();
    std::vector<uint16_t> got;
    std::vector<double> want;
    const int64_t row_step = m == 1 ? 1 : std::max<int64_t>(1, c.n / 64);
    const int64_t groups = w.groups();
    for (int64_t r = 0; r < c.n; r += row_step) {
      for (int64_t i = 0; i < m; i += std::max<int64_t>(1, m / 4)) {
        double sum = 0;
        for (int64_t k = 0; k < c.k; ++k) {
          const int64_t g = k / group;
          const double weight = (w.codes[static_cast<size_t>(r * c.k + k)] - w.zero(r, g)) *
                                w.scales[static_cast<size_t>(r * groups + g)];
          sum += weight * lowbit::bf16_to_f32(x_host[static_cast<size_t>(i * c.k + k)]);
        }
        want.push_back(sum);
        got.push_back(y_host[static_cast<size_t>(i * c.n + r)]);
      }
    }
    const double error = relative_error(got, want);

    const double lt_us = time_graph(stream, [&](int i) {
      detail::lt_bf16_gemm(x.data(), c.k, m, bf16_w[static_cast<size_t>(i) % bf16_w.size()].data(),
                           c.k, c.n, c.k, nullptr, y.data(), c.n, workspace.data(),
                           detail::kWna16LtWorkspaceBytes, stream);
    });
    const double bytes = static_cast<double>(weight_bytes) + 2.0 * m * (c.k + c.n);
    const double flops = 2.0 * m * c.n * c.k;
    std::printf(
        "%-8s int%d %-7s m=%-5lld %-7s %9.2f us %7.0f GB/s %5.1f%% of 4.8T %5.1f%% of copy %7.1f "
        "TFLOP/s %5.1f%% | bf16 %9.2f us %7.1f TFLOP/s | speed-up %5.2fx | rel.err %.1e%s\n",
        c.name, bits, group == c.k ? "channel" : "g128", static_cast<long long>(m), path_name(path),
        us, bytes / us * 1e-3, 100.0 * bytes / (us * 1e-6) / kSpecBandwidth,
        100.0 * bytes / (us * 1e-6) / copy_bw, flops / us * 1e-6,
        100.0 * flops / (us * 1e-6) / kSpecBf16, lt_us, flops / lt_us * 1e-6, lt_us / us, error,
        error < 1e-2 ? "" : "  <-- WRONG");
    std::fflush(stdout);
  }

  // A forced k split against the automatic one (split 0): one line of times.
  auto sweep = [&](const char* label, int64_t m, const std::vector<int>& splits, auto launch) {
    std::printf("%-8s int%d %-7s m=%-5lld %s:", c.name, bits, group == c.k ? "channel" : "g128",
                static_cast<long long>(m), label);
    for (int split : splits) {
      const double us = time_graph(
          stream, [&](int i) { launch(copies[static_cast<size_t>(i) % copies.size()], split); });
      if (split == 0) {
        std::printf("  auto %.2f us |", us);
      } else {
        std::printf("  %d: %.2f", split, us);
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  };
  // The stream kernel's warps per block (m = 1, 16) and the block kernel's cluster size (m = 64;
  // x in packed order: these shapes need no gather).
  // (The automatic split is timed first, and read 5-20 % slower than the same split forced later
  // in the line on the H200: compare forced splits with each other; bench/NOTES.md, session 31.)
  for (int64_t m : {1, 16, 64}) {
    const std::vector<int> splits = m <= detail::kWna16StreamKernelRows
                                        ? std::vector<int>{0, 1, 2, 3, 4, 6, 8, 12, 16}
                                        : std::vector<int>{0, 1, 2, 4, 8};  // clusters of <= 8
    sweep("split", m, splits, [&](const Wna16GpuWeights& w, int split) {
      detail::launch_wna16_stream(x.data(), c.k, m, w, nullptr, y.data(), stream, split);
    });
  }
  // The wgmma kernel's cluster size at m = 128 (times only: x is not rewritten in its k order).
  if (detail::wna16_wgmma_available()) {
    sweep("wgmma split", 128, {0, 1, 2, 4, 8}, [&](const Wna16GpuWeights& w, int split) {
      detail::launch_wna16_wgmma(x.data(), c.k, 128, w, nullptr, y.data(), stream, split);
    });
  }
}

}  // namespace

int main() {
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("wna16_bench: no CUDA device, nothing to measure\n");
      return 0;
    }
    cudaDeviceProp props{};
    LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
    cudaStream_t stream;
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_bw = copy_bandwidth(stream);
    std::printf(
        "%s, %d SMs; device-to-device copy %.2f TB/s (read + write); spec 4.8 TB/s, 989 TFLOP/s "
        "bf16\n",
        props.name, props.multiProcessorCount, copy_bw * 1e-12);
    const Case cases[] = {{"qkv", 6144, 4096},
                          {"o", 4096, 4096},
                          {"gate", 14336, 4096},
                          {"gate_up", 28672, 4096},
                          {"down", 4096, 14336}};
    // WNA16_BENCH_ONLY=NAME runs one shape (int4 g128 only), e.g. for a profiler.
    const char* only = std::getenv("WNA16_BENCH_ONLY");
    for (const Case& c : cases) {
      if (!only || std::string(only) == c.name) run_case(c, 4, 128, stream, copy_bw);
    }
    if (!only) {
      for (const Case& c : cases) run_case(c, 8, c.k, stream, copy_bw);
    }
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wna16_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
