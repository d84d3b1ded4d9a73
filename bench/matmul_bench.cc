// lowbit_matmul_bench: times kernels::matmul on the linear-layer shapes of a model and reports each
// against this machine's limits measured in the same run: weight GB/s against STREAM triad
// bandwidth (decode, memory-bound) and GFLOP/s against an FMA-loop peak (prefill, compute-bound).
//
//   OMP_PROC_BIND=close OMP_PLACES=cores build/bin/lowbit_matmul_bench --threads 2 --model llama-1b
//
// Weights are random (never zeros) and rotated over enough copies that every call streams them
// from DRAM, as a forward pass over a model larger than the L3 does.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 AVX-512 headers, see matmul_gemm_avx512.cc
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/matmul.h"

namespace lowbit::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace kc = kernels::cpu;

// ---- peak FMA throughput -----------------------------------------------------------------------

// 16 independent accumulators cover FMA latency × throughput on current x86 cores (≤ 4 cycles ×
// 2 per cycle = 8 in flight needed).
__attribute__((target("avx512f,fma"))) float fma_loop_avx512(int64_t iterations) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < 16; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iterations) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  float out[8];
  for (int j = 1; j < 12; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  _mm256_storeu_ps(out, acc[0]);
  return out[0];
}

// fp32 GFLOP/s of `threads` threads each running a pure FMA loop (best of 7: one preempted
// thread stretches a whole run); 0 without AVX2.
double measure_fma_peak(int threads) {
  const kc::CpuFeatures& f = kc::cpu_features();
  const bool wide = f.avx512f;
  if (!wide && !f.has_avx2_kernels()) return 0.0;
  const int64_t iterations = 20'000'000;
  const double flops_per_iteration = wide ? 16.0 * 16 * 2 : 12.0 * 8 * 2;
  double best = 0.0;
  float sink = 0.0f;
  for (int run = 0; run < 7; ++run) {
    auto start = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      float r = wide ? fma_loop_avx512(iterations) : fma_loop_avx2(iterations);
#pragma omp atomic
      sink += r;
    }
    if (std::isnan(sink)) std::printf("#\n");  // keeps the loops' results observable
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, threads * iterations * flops_per_iteration / seconds / 1e9);
  }
  return best;
}

// ---- data --------------------------------------------------------------------------------------

struct Random {  // xorshift64*: fast enough to fill gigabytes, never produces zero here
  uint64_t state = 0x9E3779B97F4A7C15ull;
  float next() {  // magnitude in [0.1, 1), random sign
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    uint64_t r = state * 0x2545F4914F6CDD1Dull;
    float mag = 0.1f + 0.9f * static_cast<float>(r >> 40) / 16777216.0f;
    return (r & 1) ? -mag : mag;
  }
};

Tensor random_weight(DType dtype, int64_t n, int64_t k, Random& rng) {
  Tensor w = Tensor::zeros(dtype, {n, k});
  const int64_t count = n * k;
  if (dtype == DType::F32) {
    for (int64_t i = 0; i < count; ++i) w.data_as<float>()[i] = rng.next();
  } else {
    uint16_t* p = w.data_as<uint16_t>();
    for (int64_t i = 0; i < count; ++i) {
      p[i] = dtype == DType::BF16 ? f32_to_bf16(rng.next()) : f32_to_f16(rng.next());
    }
  }
  return w;
}

// ---- shapes ------------------------------------------------------------------------------------

struct LayerShape {
  const char* name;
  int64_t n, k;
  int per_forward;  // how many matmuls of this shape one forward pass runs
};

std::vector<LayerShape> model_shapes(const std::string& model) {
  if (model == "llama-1b") {  // Llama-3.2-1B: hidden 2048, ffn 8192, 16 layers, kv 8×64, tied
    return {{"q/o", 2048, 2048, 32}, {"k/v", 512, 2048, 32}, {"gate/up", 8192, 2048, 32},
            {"down", 2048, 8192, 16}, {"lm_head", 128256, 2048, 1}};
  }
  if (model == "ref-19m") {  // models/ref-llama-19m: hidden 384, ffn 1024, 8 layers, kv 2×64
    return {{"q/o", 384, 384, 16}, {"k/v", 128, 384, 16}, {"gate/up", 1024, 384, 16},
            {"down", 384, 1024, 8}, {"lm_head", 8192, 384, 1}};
  }
  throw std::runtime_error("unknown --model " + model + " (llama-1b, ref-19m)");
}

// ---- one case ----------------------------------------------------------------------------------

struct Options {
  int threads = 0;
  std::string model = "llama-1b";
  std::vector<int64_t> ms = {1, 512};
  std::string dtype = "BF16";
  std::string kernel = "best";
  std::string path = "auto";
  double seconds = 1.0;        // timed time per case (at least min_calls calls)
  int min_calls = 3;
  double rotate_mib = 512;     // weights rotated over copies totalling at least this
  double bandwidth_gib = 1.0;  // STREAM arrays, 0 = skip
  bool json = false;
  std::vector<std::string> layers;  // empty = all
};

struct Accuracy {
  double worst_vs_magnitude = 0;
  double relative_rms = 0;
};

struct CaseResult {
  double best_s = 0, median_s = 0, p90_s = 0;
  Accuracy accuracy;
  int calls = 0;
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Accuracy over a corner of the output (rows 0 and m-1 of x, the first 64 rows of W), against
// ref::matmul: the largest |y - ref| relative to sum |x·w| (fp32 reordering alone stays below
// ~k · 6e-8) and the relative RMS error ||y - ref|| / ||ref|| (what a logit tolerance sees).
Accuracy check_corner(const std::vector<float>& x, int64_t m, int64_t k, const Tensor& w,
                      const std::vector<float>& y) {
  const int64_t n = w.dim(0), cols = std::min<int64_t>(n, 64);
  Tensor corner = w.slice_rows(0, cols);
  Tensor corner_f32 = corner.to_f32();
  Accuracy a;
  double diff2 = 0, ref2 = 0;
  for (int64_t i : {int64_t{0}, m - 1}) {
    std::vector<float> ref(static_cast<size_t>(cols));
    kernels::ref::matmul(x.data() + i * k, 1, k, corner, nullptr, ref.data());
    for (int64_t j = 0; j < cols; ++j) {
      double scale = 0;
      const float* wj = corner_f32.data_as<float>() + j * k;
      for (int64_t p = 0; p < k; ++p) scale += std::fabs(x[i * k + p] * wj[p]);
      double diff = y[i * n + j] - ref[j];
      a.worst_vs_magnitude = std::max(a.worst_vs_magnitude, std::fabs(diff) / scale);
      diff2 += diff * diff;
      ref2 += static_cast<double>(ref[j]) * ref[j];
    }
  }
  a.relative_rms = std::sqrt(diff2 / ref2);
  return a;
}

CaseResult run_case(const Options& o, kc::MatmulKernel kernel, kc::MatmulPath path, DType dtype,
                    const LayerShape& s, int64_t m, Random& rng) {
  const double bytes = static_cast<double>(s.n * s.k) * dtype_size(dtype);
  const int copies = std::max(1, static_cast<int>(std::ceil(o.rotate_mib * 1048576.0 / bytes)));
  std::vector<Tensor> weights;
  for (int c = 0; c < copies; ++c) weights.push_back(random_weight(dtype, s.n, s.k, rng));
  std::vector<float> x(static_cast<size_t>(m * s.k)), y(static_cast<size_t>(m * s.n));
  for (float& v : x) v = rng.next();
  const bool bf16_dot = o.kernel == "bf16dot";
  auto call = [&](int c) {
    const Tensor& w = weights[static_cast<size_t>(c) % weights.size()];
    if (bf16_dot) {
      kc::matmul_bf16_dot(x.data(), m, s.k, w, nullptr, y.data());
    } else {
      kc::matmul_with(kernel, path, x.data(), m, s.k, w, nullptr, y.data());
    }
  };
  call(0);  // warm-up: thread team, scratch buffers
  CaseResult r;
  r.accuracy = check_corner(x, m, s.k, weights[0], y);
  std::vector<double> times;
  auto begin = Clock::now();
  while (static_cast<int>(times.size()) < o.min_calls ||
         seconds_between(begin, Clock::now()) < o.seconds) {
    auto start = Clock::now();
    call(static_cast<int>(times.size()) + 1);
    times.push_back(seconds_between(start, Clock::now()));
  }
  std::sort(times.begin(), times.end());
  r.calls = static_cast<int>(times.size());
  r.best_s = times.front();
  r.median_s = times[times.size() / 2];
  r.p90_s = times[std::min(times.size() - 1, times.size() * 9 / 10)];
  return r;
}

// Sums over the matmuls of one forward pass (each shape times its count per forward).
struct Totals {
  double seconds = 0, bytes = 0, flops = 0;
  void add(int count, double s, double b, double f) {
    seconds += count * s;
    bytes += count * b;
    flops += count * f;
  }
  void print(const std::string& what, int64_t m, double bandwidth, double peak) const {
    if (seconds <= 0) return;
    const double gbs = bytes / seconds / 1e9, gflops = flops / seconds / 1e9;
    std::printf("# %s, m=%ld: %.2f ms -> %.1f tok/s; weights %.1f GB/s (%.0f%% of triad); "
                "%.1f GFLOP/s (%.0f%% of peak)\n",
                what.c_str(), static_cast<long>(m), seconds * 1e3, m / seconds, gbs,
                bandwidth > 0 ? 100 * gbs / bandwidth : 0.0, gflops,
                peak > 0 ? 100 * gflops / peak : 0.0);
  }
};

kc::MatmulKernel parse_kernel(const std::string& name) {
  if (name == "best" || name == "bf16dot") return kc::matmul_best_kernel();
  for (kc::MatmulKernel k : {kc::MatmulKernel::SCALAR, kc::MatmulKernel::AVX2, kc::MatmulKernel::AVX512}) {
    if (name == kc::matmul_kernel_name(k)) return k;
  }
  throw std::runtime_error("unknown --kernel " + name + " (best, scalar, avx2, avx512, bf16dot)");
}

kc::MatmulPath parse_path(const std::string& name) {
  if (name == "auto") return kc::MatmulPath::AUTO;
  if (name == "streaming") return kc::MatmulPath::STREAMING;
  if (name == "blocked") return kc::MatmulPath::BLOCKED;
  throw std::runtime_error("unknown --path " + name + " (auto, streaming, blocked)");
}

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = omp_get_max_threads();
  DType dtype;
  if (!parse_dtype(o.dtype, &dtype)) throw std::runtime_error("unknown --dtype " + o.dtype);
  const kc::MatmulKernel kernel = parse_kernel(o.kernel);
  const kc::MatmulPath path = parse_path(o.path);
  const std::string label = o.kernel == "bf16dot" ? "bf16dot" : kc::matmul_kernel_name(kernel);
  const char* bind = std::getenv("OMP_PROC_BIND");
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  std::printf("# lowbit_matmul_bench %s  git %s\n# cpu: %s [%s]\n", date, LOWBIT_GIT_SHA,
              kc::cpu_brand().c_str(), kc::cpu_features_string(kc::cpu_features()).c_str());
  std::printf("# kernel %s, path %s, dtype %s, threads %d, OMP_PROC_BIND=%s\n",
              label.c_str(), o.path.c_str(), o.dtype.c_str(), threads,
              bind ? bind : "(unset)");
  double bandwidth = 0;
  if (o.bandwidth_gib > 0) {
    kc::MemoryBandwidthOptions bo;
    bo.total_bytes = static_cast<size_t>(o.bandwidth_gib * 1073741824.0);
    bo.threads = threads;
    kc::MemoryBandwidth bw = kc::measure_memory_bandwidth(bo);
    bandwidth = bw.triad_gb_per_s;
    std::printf("# memory bandwidth (STREAM, %.2f GiB, best of %d): copy %.1f GB/s, triad %.1f GB/s\n",
                static_cast<double>(bw.total_bytes) / 1073741824.0, bo.runs, bw.copy_gb_per_s,
                bw.triad_gb_per_s);
  }
  const double peak = measure_fma_peak(threads);
  std::printf("# fp32 FMA peak (register-only loop): %.1f GFLOP/s\n", peak);
  std::printf("%-8s %6s %6s %5s %10s %10s %8s %9s %7s %7s %8s %8s\n", "layer", "n", "k", "m",
              "best_ms", "median_ms", "w_GB/s", "GFLOP/s", "%bw", "%peak", "err/mag", "rel_rms");
  Random rng;
  for (int64_t m : o.ms) {
    Totals all, body;  // body: without lm_head (llama-bench's pp computes logits for one token)
    for (const LayerShape& s : model_shapes(o.model)) {
      if (!o.layers.empty() && std::find(o.layers.begin(), o.layers.end(), s.name) == o.layers.end()) {
        continue;
      }
      CaseResult r = run_case(o, kernel, path, dtype, s, m, rng);
      const double bytes = static_cast<double>(s.n * s.k) * dtype_size(dtype);
      const double flops = 2.0 * m * s.n * s.k;
      // Rates from the best call, like STREAM's best-of-N: on a shared machine, other processes only
      // ever make a call slower. The median is printed beside it.
      const double gbs = bytes / r.best_s / 1e9, gflops = flops / r.best_s / 1e9;
      std::printf("%-8s %6ld %6ld %5ld %10.3f %10.3f %8.1f %9.1f %6.0f%% %6.0f%% %8.1e %8.1e%s\n",
                  s.name,
                  static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m),
                  r.best_s * 1e3, r.median_s * 1e3, gbs, gflops,
                  bandwidth > 0 ? 100 * gbs / bandwidth : 0.0, peak > 0 ? 100 * gflops / peak : 0.0,
                  r.accuracy.worst_vs_magnitude, r.accuracy.relative_rms,
                  r.accuracy.worst_vs_magnitude > 1e-3 ? "  WRONG" : "");
      if (o.json) {
        std::printf("{\"op\":\"matmul\",\"layer\":\"%s\",\"n\":%ld,\"k\":%ld,\"m\":%ld,\"dtype\":\"%s\","
                    "\"kernel\":\"%s\",\"threads\":%d,\"best_s\":%.6e,\"median_s\":%.6e,\"p90_s\":%.6e,"
                    "\"gb_per_s\":%.2f,"
                    "\"gflop_per_s\":%.2f,\"bandwidth_gb_per_s\":%.2f,\"peak_gflop_per_s\":%.2f,"
                    "\"git\":\"%s\"}\n",
                    s.name, static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m),
                    o.dtype.c_str(), label.c_str(), threads, r.best_s, r.median_s, r.p90_s,
                    gbs, gflops, bandwidth, peak, LOWBIT_GIT_SHA);
      }
      all.add(s.per_forward, r.best_s, bytes, flops);
      if (std::string(s.name) != "lm_head") body.add(s.per_forward, r.best_s, bytes, flops);
    }
    all.print(o.model + " forward, all linear layers", m, bandwidth, peak);
    body.print(o.model + " forward, without lm_head", m, bandwidth, peak);
  }
  return 0;
}

}  // namespace
}  // namespace lowbit::bench

int main(int argc, char** argv) {
  lowbit::bench::Options o;
  CLI::App app{"Times lowbit's CPU matmul on a model's linear-layer shapes"};
  app.add_option("--threads", o.threads, "OpenMP threads (default: OMP default)");
  app.add_option("--model", o.model, "shape set: llama-1b, ref-19m");
  app.add_option("--m", o.ms, "rows of x (tokens) to time, e.g. --m 1 4 512");
  app.add_option("--dtype", o.dtype, "weight dtype: BF16, F16, F32");
  app.add_option("--kernel", o.kernel,
                 "best, scalar, avx2, avx512, or bf16dot (opt-in lossy: x rounded to bf16)");
  app.add_option("--path", o.path, "auto, streaming, blocked");
  app.add_option("--seconds", o.seconds, "timed seconds per case");
  app.add_option("--min-calls", o.min_calls, "timed calls per case at least");
  app.add_option("--rotate-mib", o.rotate_mib, "rotate weights over copies totalling this");
  app.add_option("--bandwidth-gib", o.bandwidth_gib, "STREAM array size in GiB (0 = skip)");
  app.add_option("--layers", o.layers, "only these layers (q/o k/v gate/up down lm_head)");
  app.add_flag("--json", o.json, "also print one JSON record per case");
  CLI11_PARSE(app, argc, argv);
  try {
    return lowbit::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit_matmul_bench: %s\n", e.what());
    return 1;
  }
}
