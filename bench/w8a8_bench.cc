// lowbit_w8a8_bench: times the integer-activation kernels (W8A8 int8 per channel, W4A8 int4 group
// 128, both with dynamic per-row int8 activations) and the FP8 E4M3 weight-only kernel on a
// model's linear-layer shapes, beside the dense BF16 kernels::matmul on the same shape in the same
// run, and reports weight GB/s against this machine's STREAM bandwidth measured in the same run.
//
//   OMP_PROC_BIND=close OMP_PLACES=cores build/bin/lowbit_w8a8_bench --threads 2 --m 1 512
//
// Weights are random (never all zeros) and, for decode-sized m, rotated over copies totalling
// --rotate-mib so that every call streams them from DRAM. Each case also checks a corner of its
// output against the ref:: kernel (rows 0 and m-1 of x, the first 16 rows of W).
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/fp8_matmul.h"
#include "kernels/matmul.h"
#include "kernels/w8a8_matmul.h"

namespace lowbit::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace kc = kernels::cpu;

struct Random {  // xorshift64*
  uint64_t state = 0x9E3779B97F4A7C15ull;
  uint64_t bits() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Dull;
  }
  float next() {  // magnitude in [0.1, 1), random sign
    const uint64_t r = bits();
    const float mag = 0.1f + 0.9f * static_cast<float>(r >> 40) / 16777216.0f;
    return (r & 1) ? -mag : mag;
  }
};

struct LayerShape {
  const char* name;
  int64_t n, k;
  int per_forward;  // matmuls of this shape per forward pass
};

// Llama-3.2-1B: hidden 2048, ffn 8192, 16 layers, kv 8×64, tied embedding as lm_head.
const LayerShape kShapes[] = {{"q/o", 2048, 2048, 32},
                              {"k/v", 512, 2048, 32},
                              {"gate/up", 8192, 2048, 32},
                              {"down", 2048, 8192, 16},
                              {"lm_head", 128256, 2048, 1}};

struct Options {
  int threads = 0;
  std::vector<int64_t> ms = {1, 512};
  std::vector<std::string> layers = {"q/o", "gate/up", "down"};
  std::vector<std::string> kinds = {"bf16", "w8a8", "w4a8", "fp8"};
  double seconds = 0.5;
  int min_calls = 3;
  double rotate_mib = 256;
  double bandwidth_gib = 1.0;
  int bandwidth_runs = 5;
  bool json = false;
};

// One weight format on one shape: its copies, bytes per copy, and how to run and check it.
struct Operand {
  std::string kind;
  std::string kernel;  // what runs it
  double bytes = 0;
  std::function<void(int copy, const float* x, int64_t m, float* y)> run;
  // ref output for rows [0, 16) of W and the given single row of x.
  std::function<void(const float* x_row, float* y16)> ref_corner;
};

// Copies of `bytes` each that total at least `rotate_mib` (one when rotate_mib is 0).
int copies_for(double rotate_mib, double bytes) {
  return std::max(1, static_cast<int>(std::ceil(rotate_mib * 1048576.0 / bytes)));
}

Operand make_bf16(const LayerShape& s, double rotate_mib, Random& rng) {
  const int64_t n = s.n, k = s.k;
  Operand op;
  op.kind = "bf16";
  op.kernel = kernels::matmul_kernel_name();
  op.bytes = 2.0 * static_cast<double>(n * k);
  auto all = std::make_shared<std::vector<Tensor>>();
  for (int c = 0; c < copies_for(rotate_mib, op.bytes); ++c) {
    Tensor t = Tensor::zeros(DType::BF16, {n, k});
    if (c == 0) {
      for (int64_t i = 0; i < n * k; ++i)
        t.data_as<uint16_t>()[i] = f32_to_bf16(rng.next() * 0.05f);
    } else {
      std::memcpy(t.data(), (*all)[0].data(), static_cast<size_t>(n * k) * 2);
    }
    all->push_back(std::move(t));
  }
  op.run = [all, k](int c, const float* x, int64_t m, float* y) {
    kernels::matmul(x, m, k, (*all)[static_cast<size_t>(c) % all->size()], nullptr, y);
  };
  auto corner = std::make_shared<Tensor>((*all)[0].slice_rows(0, std::min<int64_t>(16, n)));
  op.ref_corner = [corner, k](const float* x, float* y) {
    kernels::ref::matmul(x, 1, k, *corner, nullptr, y);
  };
  return op;
}

// w8a8: int8 per channel; w8a8g32: int8 in groups of 32 (GGUF Q8_0's blocks); w4a8: int4 group
// 128; symmetric, random codes and scales.
Operand make_int(const std::string& kind, const LayerShape& s, double rotate_mib, Random& rng) {
  auto w = std::make_shared<kernels::IntWeights>();
  w->bits = kind == "w4a8" ? 4 : 8;
  w->rows = s.n;
  w->cols = s.k;
  w->group_size = kind == "w8a8" ? s.k : kind == "w8a8g32" ? 32 : 128;
  w->codes.resize(static_cast<size_t>(s.n * s.k));
  for (uint8_t& c : w->codes) c = static_cast<uint8_t>(rng.bits() >> 56) & ((1u << w->bits) - 1);
  w->scales.resize(static_cast<size_t>(s.n * w->groups()));
  for (float& v : w->scales) v = 1e-3f * (1.0f + std::fabs(rng.next()));
  Operand op;
  op.kind = kind;
  auto all = std::make_shared<std::vector<std::shared_ptr<const kernels::W8a8Packed>>>();
  all->push_back(kernels::pack_w8a8(*w));
  op.bytes = static_cast<double>(all->front()->bytes());
  op.kernel = all->front()->kernel_name();
  for (int c = 1; c < copies_for(rotate_mib, op.bytes); ++c) all->push_back(kernels::pack_w8a8(*w));
  op.run = [all](int c, const float* x, int64_t m, float* y) {
    const kernels::W8a8Packed& packed = *(*all)[static_cast<size_t>(c) % all->size()];
    kernels::matmul_w8a8(x, m, packed, kernels::Int8Activations{}, nullptr, y);
  };
  auto corner = std::make_shared<kernels::IntWeights>(*w);  // rows [0, 16)
  corner->rows = std::min<int64_t>(16, s.n);
  corner->codes.resize(static_cast<size_t>(corner->rows * s.k));
  corner->scales.resize(static_cast<size_t>(corner->rows * w->groups()));
  op.ref_corner = [corner](const float* x, float* y) {
    kernels::ref::matmul_w8a8(x, 1, *corner, kernels::Int8Activations{}, nullptr, y);
  };
  return op;
}

// fp8: E4M3, per-channel scales, every finite code.
Operand make_fp8(const LayerShape& s, double rotate_mib, Random& rng) {
  auto w = std::make_shared<kernels::Fp8Weights>();
  w->rows = s.n;
  w->cols = s.k;
  w->block_rows = 1;
  w->block_cols = s.k;
  w->codes.resize(static_cast<size_t>(s.n * s.k));
  for (uint8_t& c : w->codes) {
    c = static_cast<uint8_t>(rng.bits() >> 56);
    if ((c & 0x7F) == 0x7F) c ^= 1;
  }
  w->scales.resize(static_cast<size_t>(s.n));
  for (float& v : w->scales) v = 1e-3f * (1.0f + std::fabs(rng.next()));
  Operand op;
  op.kind = "fp8";
  auto all = std::make_shared<std::vector<std::shared_ptr<const kernels::Fp8Packed>>>();
  all->push_back(kernels::pack_fp8(*w));
  op.bytes = static_cast<double>(all->front()->bytes());
  op.kernel = all->front()->kernel_name();
  for (int c = 1; c < copies_for(rotate_mib, op.bytes); ++c) all->push_back(kernels::pack_fp8(*w));
  op.run = [all](int c, const float* x, int64_t m, float* y) {
    kernels::matmul_fp8(x, m, *(*all)[static_cast<size_t>(c) % all->size()], nullptr, y);
  };
  auto corner = std::make_shared<kernels::Fp8Weights>(*w);  // rows [0, 16)
  corner->rows = std::min<int64_t>(16, s.n);
  corner->codes.resize(static_cast<size_t>(corner->rows * s.k));
  corner->scales.resize(static_cast<size_t>(corner->rows));
  op.ref_corner = [corner](const float* x, float* y) {
    kernels::ref::matmul_fp8(x, 1, *corner, nullptr, y);
  };
  return op;
}

Operand make_operand(const std::string& kind, const LayerShape& s, double rotate_mib, Random& rng) {
  if (kind == "bf16") return make_bf16(s, rotate_mib, rng);
  if (kind == "w8a8" || kind == "w8a8g32" || kind == "w4a8") return make_int(kind, s, rotate_mib, rng);
  if (kind == "fp8") return make_fp8(s, rotate_mib, rng);
  throw std::runtime_error("unknown kind " + kind + " (bf16, w8a8, w8a8g32, w4a8, fp8)");
}

struct Timing {
  double best_s = 0, median_s = 0;
  double error = 0;  // max |y - ref| / max |ref| over the checked corner
};

Timing time_operand(const Options& o, const Operand& op, const LayerShape& s, int64_t m,
                    const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(m * s.n));
  op.run(0, x.data(), m, y.data());  // warm-up: thread team, scratch buffers
  Timing t;
  double worst = 0, scale = 0;
  for (int64_t i : {int64_t{0}, m - 1}) {
    float ref[16];
    op.ref_corner(x.data() + i * s.k, ref);
    for (int64_t j = 0; j < std::min<int64_t>(16, s.n); ++j) {
      worst = std::max(
          worst, static_cast<double>(std::fabs(y[static_cast<size_t>(i * s.n + j)] - ref[j])));
      scale = std::max(scale, static_cast<double>(std::fabs(ref[j])));
    }
  }
  t.error = worst / std::max(scale, 1e-30);
  std::vector<double> times;
  const auto begin = Clock::now();
  while (static_cast<int>(times.size()) < o.min_calls ||
         std::chrono::duration<double>(Clock::now() - begin).count() < o.seconds) {
    const auto start = Clock::now();
    op.run(static_cast<int>(times.size()) + 1, x.data(), m, y.data());
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  t.best_s = times.front();
  t.median_s = times[times.size() / 2];
  return t;
}

void print_header(const Options& o, int threads, double* bandwidth) {
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  const char* bind = std::getenv("OMP_PROC_BIND");
  std::printf("# lowbit_w8a8_bench %s  git %s\n# cpu: %s [%s]\n# threads %d, OMP_PROC_BIND=%s\n",
              date, LOWBIT_GIT_SHA, kc::cpu_brand().c_str(),
              kc::cpu_features_string(kc::cpu_features()).c_str(), threads,
              bind ? bind : "(unset)");
  if (o.bandwidth_gib > 0) {
    kc::MemoryBandwidthOptions bo;
    bo.total_bytes = static_cast<size_t>(o.bandwidth_gib * 1073741824.0);
    bo.threads = threads;
    bo.runs = o.bandwidth_runs;
    const kc::MemoryBandwidth bw = kc::measure_memory_bandwidth(bo);
    *bandwidth = bw.triad_gb_per_s;
    std::printf(
        "# memory bandwidth (STREAM, %.2f GiB, best of %d): copy %.1f GB/s, triad %.1f GB/s\n",
        static_cast<double>(bw.total_bytes) / 1073741824.0, bo.runs, bw.copy_gb_per_s,
        bw.triad_gb_per_s);
  }
  std::printf(
      "# bf16 = kernels::matmul (%s); w8a8 = int8 per channel, w8a8g32 = int8 group 32, w4a8 =\n"
      "# int4 group 128, all with dynamic per-row int8 activations; fp8 = E4M3 weight-only, per-channel scales.\n",
      kernels::matmul_kernel_name());
  std::printf("%-8s %6s %6s %5s %-6s %-16s %9s %9s %8s %7s %6s %8s %8s %8s\n", "layer", "n", "k",
              "m", "kind", "kernel", "best_ms", "median_ms", "w_MB", "w_GB/s", "%bw", "GOP/s",
              "vs_bf16", "err");
}

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = omp_get_max_threads();
  double bandwidth = 0;
  print_header(o, threads, &bandwidth);
  Random rng;
  struct Total {
    double seconds = 0, bytes = 0;
  };
  for (int64_t m : o.ms) {
    std::vector<Total> totals(o.kinds.size());
    for (const LayerShape& s : kShapes) {
      if (std::find(o.layers.begin(), o.layers.end(), s.name) == o.layers.end()) continue;
      std::vector<float> x(static_cast<size_t>(m * s.k));
      for (float& v : x) v = rng.next();
      double bf16_best = 0;
      for (size_t ki = 0; ki < o.kinds.size(); ++ki) {
        const Operand op = make_operand(o.kinds[ki], s, m <= 16 ? o.rotate_mib : 0.0, rng);
        const Timing t = time_operand(o, op, s, m, x);
        if (op.kind == "bf16") bf16_best = t.best_s;
        const double gbs = op.bytes / t.best_s / 1e9, gops = 2.0 * m * s.n * s.k / t.best_s / 1e9;
        const std::string& kernel = op.kernel;
        std::printf(
            "%-8s %6ld %6ld %5ld %-6s %-16s %9.3f %9.3f %8.1f %7.1f %5.0f%% %8.1f %7.2fx %8.1e%s\n",
            s.name, static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m),
            op.kind.c_str(), kernel.c_str(), t.best_s * 1e3, t.median_s * 1e3, op.bytes / 1e6, gbs,
            bandwidth > 0 ? 100 * gbs / bandwidth : 0.0, gops,
            bf16_best > 0 ? bf16_best / t.best_s : 0.0, t.error, t.error > 0.05 ? "  WRONG" : "");
        if (o.json) {
          std::printf(
              "{\"op\":\"%s\",\"layer\":\"%s\",\"n\":%ld,\"k\":%ld,\"m\":%ld,\"threads\":%d,"
              "\"best_s\":%.6e,\"median_s\":%.6e,\"gb_per_s\":%.2f,\"gop_per_s\":%.2f,"
              "\"bandwidth_gb_per_s\":%.2f,\"vs_bf16\":%.3f,\"git\":\"%s\"}\n",
              op.kind.c_str(), s.name, static_cast<long>(s.n), static_cast<long>(s.k),
              static_cast<long>(m), threads, t.best_s, t.median_s, gbs, gops, bandwidth,
              bf16_best > 0 ? bf16_best / t.best_s : 0.0, LOWBIT_GIT_SHA);
        }
        totals[ki].seconds += s.per_forward * t.best_s;
        totals[ki].bytes += s.per_forward * op.bytes;
      }
    }
    for (size_t ki = 0; ki < o.kinds.size(); ++ki) {
      const Total& t = totals[ki];
      if (t.seconds <= 0) continue;
      std::printf(
          "# m=%ld %-5s selected layers × their count per Llama-3.2-1B forward: %.2f ms -> %.1f "
          "tok/s, "
          "weights %.1f GB/s (%.0f%% of triad), %.2fx bf16\n",
          static_cast<long>(m), o.kinds[ki].c_str(), t.seconds * 1e3, m / t.seconds,
          t.bytes / t.seconds / 1e9,
          bandwidth > 0 ? 100 * t.bytes / t.seconds / 1e9 / bandwidth : 0.0,
          totals[0].seconds / t.seconds);
    }
  }
  return 0;
}

}  // namespace
}  // namespace lowbit::bench

int main(int argc, char** argv) {
  lowbit::bench::Options o;
  CLI::App app{
      "Times lowbit's W8A8 / W4A8 / FP8 CPU kernels against dense BF16 on Llama-3.2-1B shapes"};
  app.add_option("--threads", o.threads, "OpenMP threads (default: OMP default)");
  app.add_option("--m", o.ms, "rows of x (tokens), e.g. --m 1 512");
  app.add_option("--layers", o.layers, "q/o k/v gate/up down lm_head");
  app.add_option("--kinds", o.kinds, "bf16 w8a8 w8a8g32 w4a8 fp8 (bf16 first for the ratios)");
  app.add_option("--seconds", o.seconds, "timed seconds per case");
  app.add_option("--min-calls", o.min_calls, "timed calls per case at least");
  app.add_option("--rotate-mib", o.rotate_mib,
                 "for m <= 16, rotate weights over copies totalling this");
  app.add_option("--bandwidth-gib", o.bandwidth_gib, "STREAM array size in GiB (0 = skip)");
  app.add_option("--bandwidth-runs", o.bandwidth_runs,
                 "STREAM runs, best taken (more on a busy machine: one disturbed run is enough "
                 "to lower all of a few)");
  app.add_flag("--json", o.json, "also print one JSON record per case");
  CLI11_PARSE(app, argc, argv);
  try {
    return lowbit::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit_w8a8_bench: %s\n", e.what());
    return 1;
  }
}
