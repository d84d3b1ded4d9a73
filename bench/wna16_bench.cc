// lowbit_wna16_bench: times the weight-only integer matmul (kernels::matmul_wna16) on a model's
// linear-layer shapes and reports, from the same run: the weight bytes it streamed per second
// against this machine's STREAM triad bandwidth (decode is memory-bound), and the dense BF16
// kernels::matmul on the same shape (the ratio is the point: a 4-bit weight is a quarter of the
// bytes).
//
//   OMP_PROC_BIND=close OMP_PLACES=cores build/bin/lowbit_wna16_bench --threads 2 --m 1 512
//       --kernel avx512 avx512_bf16dot   (one command line)
//
// Weights are random (never all zero) and rotated over enough copies that every call streams them
// from DRAM, as a forward pass over a model larger than the L3 does.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/matmul.h"
#include "kernels/wna16_matmul.h"

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
    uint64_t r = bits();
    float mag = 0.1f + 0.9f * static_cast<float>(r >> 40) / 16777216.0f;
    return (r & 1) ? -mag : mag;
  }
};

struct LayerShape {
  const char* name;
  int64_t n, k;
  int per_forward;
};

std::vector<LayerShape> model_shapes(const std::string& model) {
  if (model == "llama-1b") {  // Llama-3.2-1B: hidden 2048, ffn 8192, 16 layers, kv 8×64, tied
    return {{"q/o", 2048, 2048, 32}, {"k/v", 512, 2048, 32}, {"gate/up", 8192, 2048, 32},
            {"down", 2048, 8192, 16}, {"lm_head", 128256, 2048, 1}};
  }
  if (model == "ref-19m") {
    return {{"q/o", 384, 384, 16}, {"k/v", 128, 384, 16}, {"gate/up", 1024, 384, 16},
            {"down", 384, 1024, 8}, {"lm_head", 8192, 384, 1}};
  }
  throw std::runtime_error("unknown --model " + model + " (llama-1b, ref-19m)");
}

struct Options {
  int threads = 0;
  std::string model = "llama-1b";
  std::vector<int64_t> ms = {1, 512};
  std::vector<std::string> kernels = {"best"};
  int bits = 4;
  int64_t group = 128;  // 0: per channel
  bool zeros = false;
  bool q6k_scales = false;
  double seconds = 1.0;
  int min_calls = 3;
  double rotate_mib = 256;
  double bandwidth_gib = 1.0;
  std::vector<std::string> layers = {"q/o", "k/v", "gate/up", "down"};
};

kernels::IntWeights random_int_weights(const Options& o, int64_t n, int64_t k, Random& rng) {
  kernels::IntWeights w;
  w.bits = o.bits;
  w.rows = n;
  w.cols = k;
  w.group_size = o.group > 0 ? o.group : k;
  w.codes.resize(static_cast<size_t>(n * k));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(rng.bits() >> (64 - o.bits));
  w.scales.resize(static_cast<size_t>(n * w.groups()));
  for (float& s : w.scales) s = 0.01f * std::fabs(rng.next());
  if (o.q6k_scales) {  // GGUF Q6_K's: per row and 16 groups an fp16 d (11-bit significand) x int8
    const int64_t groups = w.groups();
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t g0 = 0; g0 < groups; g0 += 16) {
        const float d = std::ldexp(static_cast<float>(1024 + rng.bits() % 1024), -24);
        for (int64_t g = g0; g < std::min(g0 + 16, groups); ++g) {
          w.scales[static_cast<size_t>(r * groups + g)] =
              d * static_cast<float>(static_cast<int>(rng.bits() % 256) - 128);
        }
      }
    }
  }
  if (o.zeros) {
    w.zeros.resize(w.scales.size());
    for (uint8_t& z : w.zeros) z = static_cast<uint8_t>(rng.bits() >> (64 - o.bits));
  }
  return w;
}

struct Timing {
  double best_s = 0, median_s = 0;
};

// Calls call(i) with i = 0, 1, 2, ... (after one warm-up) for at least `seconds` and min_calls.
Timing time_calls(const Options& o, const std::function<void(int)>& call) {
  call(0);
  std::vector<double> times;
  const auto begin = Clock::now();
  while (static_cast<int>(times.size()) < o.min_calls ||
         std::chrono::duration<double>(Clock::now() - begin).count() < o.seconds) {
    const auto start = Clock::now();
    call(static_cast<int>(times.size()) + 1);
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

int copies_for(const Options& o, double bytes) {
  return std::max(1, static_cast<int>(std::ceil(o.rotate_mib * 1048576.0 / bytes)));
}

// Relative RMS of y against ref::matmul_wna16 over rows 0 and m-1 of x and the first 64 rows of W.
double check_corner(const kernels::IntWeights& w, const std::vector<float>& x, int64_t m,
                    const std::vector<float>& y) {
  kernels::IntWeights corner;
  corner.bits = w.bits;
  corner.cols = w.cols;
  corner.group_size = w.group_size;
  corner.rows = std::min<int64_t>(w.rows, 64);
  const auto codes = static_cast<size_t>(corner.rows * w.cols);
  const auto scales = static_cast<size_t>(corner.rows * w.groups());
  corner.codes.assign(w.codes.begin(), w.codes.begin() + static_cast<std::ptrdiff_t>(codes));
  corner.scales.assign(w.scales.begin(), w.scales.begin() + static_cast<std::ptrdiff_t>(scales));
  if (!w.zeros.empty()) {
    corner.zeros.assign(w.zeros.begin(), w.zeros.begin() + static_cast<std::ptrdiff_t>(scales));
  }
  double diff2 = 0, ref2 = 0;
  std::vector<float> ref(static_cast<size_t>(corner.rows));
  for (int64_t i : {int64_t{0}, m - 1}) {
    kernels::ref::matmul_wna16(x.data() + i * w.cols, 1, corner, nullptr, ref.data());
    for (int64_t j = 0; j < corner.rows; ++j) {
      const double d = y[static_cast<size_t>(i * w.rows + j)] - ref[static_cast<size_t>(j)];
      diff2 += d * d;
      ref2 += static_cast<double>(ref[static_cast<size_t>(j)]) * ref[static_cast<size_t>(j)];
    }
  }
  return std::sqrt(diff2 / ref2);
}

kc::Wna16Kernel parse_kernel(const std::string& name) {
  if (name == "best") return kc::wna16_best_kernel();
  for (kc::Wna16Kernel k : {kc::Wna16Kernel::SCALAR, kc::Wna16Kernel::AVX2, kc::Wna16Kernel::AVX2_I16DOT,
                            kc::Wna16Kernel::AVX512, kc::Wna16Kernel::AVX512_BF16DOT}) {
    if ("wna16_" + name == kc::wna16_kernel_name(k)) return k;
  }
  throw std::runtime_error("unknown --kernel " + name +
                           " (best, scalar, avx2, avx2_i16dot, avx512, avx512_bf16dot)");
}

// Sums over one forward pass (each shape × its count per forward) of one kernel at one m.
struct Totals {
  double wna16_s = 0, dense_s = 0, bytes = 0;
};

void run_shape(const Options& o, const LayerShape& s, int64_t m, double bandwidth, Random& rng,
               std::vector<Totals>& totals) {
  // Dense BF16 on the same shape, rotated the same way.
  std::vector<Tensor> dense;
  const double dense_bytes = 2.0 * s.n * s.k;
  for (int c = 0, copies = copies_for(o, dense_bytes); c < copies; ++c) {
    dense.push_back(Tensor::zeros(DType::BF16, {s.n, s.k}));
    uint16_t* p = dense.back().data_as<uint16_t>();
    for (int64_t i = 0; i < s.n * s.k; ++i) p[i] = f32_to_bf16(rng.next());
  }
  std::vector<float> x(static_cast<size_t>(m * s.k)), y(static_cast<size_t>(m * s.n));
  for (float& v : x) v = rng.next();
  const Timing dense_t = time_calls(o, [&](int c) {
    kernels::matmul(x.data(), m, s.k, dense[static_cast<size_t>(c) % dense.size()], nullptr, y.data());
  });
  dense.clear();
  const kernels::IntWeights w = random_int_weights(o, s.n, s.k, rng);
  for (size_t ki = 0; ki < o.kernels.size(); ++ki) {
    const kc::Wna16Kernel kernel = parse_kernel(o.kernels[ki]);
    std::vector<std::shared_ptr<const kernels::Wna16Packed>> packed{kc::pack_wna16_with(kernel, w)};
    const double bytes = static_cast<double>(packed[0]->bytes());
    for (int c = 1, copies = copies_for(o, bytes); c < copies; ++c) {
      packed.push_back(kc::pack_wna16_with(kernel, w));
    }
    const Timing t = time_calls(o, [&](int c) {
      kernels::matmul_wna16(x.data(), m, *packed[static_cast<size_t>(c) % packed.size()], nullptr, y.data());
    });
    const double rms = check_corner(w, x, m, y);
    const double gbs = bytes / t.best_s / 1e9;
    std::printf("%-8s %6ld %6ld %5ld %-21s %9.3f %9.3f %7.1f %5.0f%% %9.3f %7.2fx %8.1f %8.1e\n", s.name,
                static_cast<long>(s.n), static_cast<long>(s.k), static_cast<long>(m),
                kc::wna16_kernel_name(kernel), t.best_s * 1e3, t.median_s * 1e3, gbs,
                bandwidth > 0 ? 100 * gbs / bandwidth : 0.0, dense_t.best_s * 1e3,
                dense_t.best_s / t.best_s, 2.0 * m * s.n * s.k / t.best_s / 1e9, rms);
    totals[ki].wna16_s += s.per_forward * t.best_s;
    totals[ki].dense_s += s.per_forward * dense_t.best_s;
    totals[ki].bytes += s.per_forward * bytes;
  }
}

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int threads = omp_get_max_threads();
  const char* bind = std::getenv("OMP_PROC_BIND");
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  std::printf("# lowbit_wna16_bench %s  git %s\n# cpu: %s [%s]\n", date, LOWBIT_GIT_SHA,
              kc::cpu_brand().c_str(), kc::cpu_features_string(kc::cpu_features()).c_str());
  std::printf("# W%dA16, group %s%s, threads %d, OMP_PROC_BIND=%s, dense kernel %s\n", o.bits,
              o.group > 0 ? std::to_string(o.group).c_str() : "channel",
              o.zeros ? ", zero points" : ", symmetric", threads, bind ? bind : "(unset)",
              kernels::matmul_kernel_name());
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
  std::printf("# w_GB/s: packed weight bytes (codes + scales + zeros) / best time; %%bw: of triad;\n"
              "# vs_bf16: dense BF16 matmul best time / wna16 best time; rel_rms: vs ref::matmul_wna16\n");
  std::printf("%-8s %6s %6s %5s %-21s %9s %9s %7s %6s %9s %8s %8s %8s\n", "layer", "n", "k", "m",
              "kernel", "best_ms", "median_ms", "w_GB/s", "%bw", "bf16_ms", "vs_bf16", "GFLOP/s",
              "rel_rms");
  Random rng;
  for (int64_t m : o.ms) {
    std::vector<Totals> totals(o.kernels.size());
    for (const LayerShape& s : model_shapes(o.model)) {
      if (std::find(o.layers.begin(), o.layers.end(), s.name) == o.layers.end()) continue;
      run_shape(o, s, m, bandwidth, rng, totals);
    }
    for (size_t ki = 0; ki < o.kernels.size(); ++ki) {
      const Totals& t = totals[ki];
      if (t.wna16_s <= 0) continue;
      std::printf("# %s forward (timed layers), m=%ld, %s: %.2f ms -> %.1f tok/s (dense BF16 %.2f ms,"
                  " %.2fx); weights %.1f GB/s (%.0f%% of triad)\n",
                  o.model.c_str(), static_cast<long>(m), o.kernels[ki].c_str(), t.wna16_s * 1e3,
                  m / t.wna16_s, t.dense_s * 1e3, t.dense_s / t.wna16_s, t.bytes / t.wna16_s / 1e9,
                  bandwidth > 0 ? 100 * t.bytes / t.wna16_s / 1e9 / bandwidth : 0.0);
    }
  }
  return 0;
}

}  // namespace
}  // namespace lowbit::bench

int main(int argc, char** argv) {
  lowbit::bench::Options o;
  CLI::App app{"Times lowbit's weight-only integer matmul (W4A16/W8A16) against dense BF16"};
  app.add_option("--threads", o.threads, "OpenMP threads (default: OMP default)");
  app.add_option("--model", o.model, "shape set: llama-1b, ref-19m");
  app.add_option("--m", o.ms, "rows of x (tokens), e.g. --m 1 4 512");
  app.add_option("--kernel", o.kernels, "best, scalar, avx2, avx2_i16dot, avx512, avx512_bf16dot (several allowed)");
  app.add_option("--bits", o.bits, "weight bits (2..8)");
  app.add_option("--group", o.group, "group size (0 = per channel)");
  app.add_flag("--zeros", o.zeros, "asymmetric: random zero points");
  app.add_flag("--q6k-scales", o.q6k_scales,
               "scales as GGUF Q6_K stores them (fp16 d x int8 per 16 groups; --group 16 packs "
               "the group-16 layout's compact form)");
  app.add_option("--seconds", o.seconds, "timed seconds per case");
  app.add_option("--min-calls", o.min_calls, "timed calls per case at least");
  app.add_option("--rotate-mib", o.rotate_mib, "rotate weights over copies totalling this");
  app.add_option("--bandwidth-gib", o.bandwidth_gib, "STREAM array size in GiB (0 = skip)");
  app.add_option("--layers", o.layers, "layers to time (q/o k/v gate/up down lm_head)");
  CLI11_PARSE(app, argc, argv);
  try {
    return lowbit::bench::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit_wna16_bench: %s\n", e.what());
    return 1;
  }
}
