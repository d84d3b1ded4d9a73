// The GPU weight-only GEMM (kernels/cuda/wna16_gemm.h) against the CPU reference ref::matmul_wna16:
// both paths, 4 and 8 bits, groups of 16..128 columns, per-channel, zero points, g_idx, bias,
// awkward n and k, every stream configuration of m. The packed layout is also decoded on the host
// exactly as the kernel's fragments read it (runs without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/wna16_gemm.h"
#include "kernels/cuda/wna16_internal.h"
#include "kernels/wna16_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {
namespace {

struct Rng {  // splitmix64
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  float signed_value() {  // magnitude in [0.1, 1), random sign, rounded to bf16
    const float v = 0.1f + 0.9f * uniform();
    return bf16_to_f32(f32_to_bf16((next() & 1) ? -v : v));
  }
};

struct Shape {
  int bits;
  int64_t n, k, group;  // group 0: per channel
  bool zeros, g_idx;
};

std::string describe(const Shape& s, int64_t m) {
  return "bits=" + std::to_string(s.bits) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " group=" + (s.group ? std::to_string(s.group) : "channel") + (s.zeros ? " zeros" : "") +
         (s.g_idx ? " g_idx" : "") + " m=" + std::to_string(m);
}

IntWeights random_weights(const Shape& s, Rng& rng) {
  IntWeights w;
  w.bits = s.bits;
  w.rows = s.n;
  w.cols = s.k;
  w.group_size = s.group ? s.group : std::max<int64_t>(s.k, 1);
  const int levels = 1 << s.bits;
  w.codes.resize(static_cast<size_t>(s.n * s.k));
  for (uint8_t& c : w.codes) c = static_cast<uint8_t>(rng.next() % levels);
  // Full-precision fp32 scales over 2^-12 .. 2^0 (not bf16 values: the kernels must keep fp32).
  w.scales.resize(static_cast<size_t>(s.n * w.groups()));
  for (float& v : w.scales) v = std::ldexp(0.5f + 0.5f * rng.uniform(), -static_cast<int>(rng.next() % 13));
  if (s.zeros) {
    w.zeros.resize(w.scales.size());
    for (uint8_t& z : w.zeros) z = static_cast<uint8_t>(rng.next() % levels);
  }
  if (s.g_idx) {  // GPTQ desc_act: the i-th column in a random order belongs to group i / group_size
    std::vector<int32_t> order(static_cast<size_t>(s.k));
    for (size_t c = 0; c < order.size(); ++c) order[c] = static_cast<int32_t>(c);
    for (size_t c = order.size(); c > 1; --c) std::swap(order[c - 1], order[rng.next() % c]);
    w.g_idx.resize(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      w.g_idx[static_cast<size_t>(order[i])] = static_cast<int32_t>(static_cast<int64_t>(i) / w.group_size);
    }
  }
  return w;
}

// Tolerances. Any evaluation of a sum of N terms with per-operation relative error <= u is within
// γ(N)·Σ|terms|, γ(N) = N·u / (1 - N·u) (Higham, §3.1). ref (fp32, u = 2^-24) sums k products of
// fl(w)·x; the GPU sums the exact products (q - z)·x (bf16 · bf16 fits an fp32) on the tensor cores,
// which may truncate instead of rounding and add up to 17 terms at once, so we take u = 2^-22 for
// it, over k' + groups + 18 operations (padded columns, one fma per group, <= 16 warp partials, bias).
// y is then rounded to bf16 (unit roundoff 2^-8: 8 significant bits, round to nearest). A dropped or misplaced term of the k <= 1100 sums here
// moves y by ~Σ|w·x|/k, well above the ~k·2^-21·Σ|w·x| + 2^-9·|y| allowed (|y| ~ Σ|w·x|/√k).
double gamma(double n, int log2_u) {
  const double u = std::ldexp(1.0, log2_u);
  return n * u / (1.0 - n * u);
}

struct Problem {
  Shape shape;
  int64_t m = 0;
  IntWeights w;
  std::vector<float> x, bias;       // bf16 values
  std::vector<uint16_t> x_bits, bias_bits;
  std::vector<float> y_ref;         // ref::matmul_wna16 (fp32)
  std::vector<double> y_bf16w;      // exact sum with weights rounded to bf16 (the dequant path's model)
  std::vector<double> magnitude;    // Σ|w·x| + |b|
  std::vector<double> magnitude_bf16w;
};

Problem make_problem(const Shape& shape, int64_t m, bool with_bias, Rng& rng) {
  Problem p;
  p.shape = shape;
  p.m = m;
  p.w = random_weights(shape, rng);
  p.x.resize(static_cast<size_t>(m * shape.k));
  for (float& v : p.x) v = rng.signed_value();
  for (float v : p.x) p.x_bits.push_back(f32_to_bf16(v));
  if (with_bias) {
    p.bias.resize(static_cast<size_t>(shape.n));
    for (float& v : p.bias) v = rng.signed_value();
    for (float v : p.bias) p.bias_bits.push_back(f32_to_bf16(v));
  }
  p.y_ref.resize(static_cast<size_t>(m * shape.n));
  ref::matmul_wna16(p.x.data(), m, p.w, with_bias ? p.bias.data() : nullptr, p.y_ref.data());
  p.y_bf16w.assign(p.y_ref.size(), 0.0);
  p.magnitude.assign(p.y_ref.size(), 0.0);
  p.magnitude_bf16w.assign(p.y_ref.size(), 0.0);
  const int64_t groups = p.w.groups();
  std::vector<double> row(static_cast<size_t>(shape.k)), row_bf16(row.size());
  for (int64_t r = 0; r < shape.n; ++r) {
    for (int64_t c = 0; c < shape.k; ++c) {
      const int64_t g = p.w.group_of(c);
      const float q = static_cast<float>(p.w.codes[static_cast<size_t>(r * shape.k + c)]);
      const float weight = (q - p.w.zero(r, g)) * p.w.scales[static_cast<size_t>(r * groups + g)];
      row[static_cast<size_t>(c)] = weight;
      row_bf16[static_cast<size_t>(c)] = bf16_to_f32(f32_to_bf16(weight));
    }
    for (int64_t i = 0; i < m; ++i) {
      const auto o = static_cast<size_t>(i * shape.n + r);
      const double b = with_bias ? p.bias[static_cast<size_t>(r)] : 0.0;
      double sum = b, mag = std::fabs(b), mag16 = std::fabs(b);
      for (int64_t c = 0; c < shape.k; ++c) {
        const double xv = p.x[static_cast<size_t>(i * shape.k + c)];
        sum += row_bf16[static_cast<size_t>(c)] * xv;
        mag += std::fabs(row[static_cast<size_t>(c)] * xv);
        mag16 += std::fabs(row_bf16[static_cast<size_t>(c)] * xv);
      }
      p.y_bf16w[o] = sum;
      p.magnitude[o] = mag;
      p.magnitude_bf16w[o] = mag16;
    }
  }
  return p;
}

// Runs wna16_gemm on `path` with a poisoned y and a workspace of exactly the size asked for.
std::vector<float> run_gpu(const Problem& p, const Wna16GpuWeights& packed, Wna16GpuPath path) {
  DeviceBuffer<uint16_t> x{std::span<const uint16_t>(p.x_bits)};
  DeviceBuffer<uint16_t> bias{std::span<const uint16_t>(p.bias_bits)};
  const std::vector<uint16_t> poison(static_cast<size_t>(p.m * p.shape.n), 0xFFFF);  // bf16 NaN
  DeviceBuffer<uint16_t> y{std::span<const uint16_t>(poison)};
  DeviceBuffer<uint8_t> workspace(wna16_workspace_bytes(p.m, packed, path));
  wna16_gemm(x.data(), p.m, packed, y.data(), workspace.data(), workspace.size(), nullptr,
             p.bias.empty() ? nullptr : bias.data(), path);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out;
  for (uint16_t v : y.download()) out.push_back(bf16_to_f32(v));
  return out;
}

// Counts (and reports the first few) outputs out of tolerance.
int check(const Problem& p, const std::vector<float>& y, Wna16GpuPath path, int64_t padded_k) {
  const Shape& s = p.shape;
  const auto kp = static_cast<double>(padded_k);
  const double groups = static_cast<double>(p.w.groups());
  int failures = 0;
  for (size_t o = 0; o < y.size(); ++o) {
    const double ref_error = gamma(static_cast<double>(s.k) + 2, -24) * p.magnitude[o];
    double want = p.y_ref[o], tolerance = 0.0;
    if (path == Wna16GpuPath::STREAM) {
      const double gpu_error = gamma(kp + groups + 18, -22) * p.magnitude[o];
      tolerance = gpu_error + ref_error + std::ldexp(std::fabs(want) + gpu_error + ref_error, -8);
    } else {  // DEQUANT_GEMM and WGMMA multiply bf16((q - z)·s) weights: tight against their exact
              // sum, then the contract against ref
      const double gpu_error = gamma(kp + 10, -22) * p.magnitude_bf16w[o];
      want = p.y_bf16w[o];
      tolerance = gpu_error + std::ldexp(std::fabs(want) + gpu_error, -8);
      // With a bias, cuBLASLt's epilogue may round the product x·Wᵀ to bf16 before adding the
      // bias and rounding again (seen on the H200 for n = 37 and 45, not a multiple of 8): the
      // first rounding is relative to the product, |want - bias|, which cancellation can make far
      // larger than |want| (seen: want -0.0187, 7 bf16 ulps off).
      if (!p.bias.empty()) {
        const double product = std::fabs(want - p.bias[o % static_cast<size_t>(s.n)]);
        tolerance += std::ldexp(product + gpu_error, -8);
      }
      // The documented contract against ref: the bf16 weights add at most 2^-8·Σ|w·x| (bf16's unit
      // roundoff; the first run on the H200 showed 2^-9 was too tight: outputs were correctly rounded).
      const double contract = tolerance + ref_error + std::ldexp(p.magnitude[o], -8);
      if (!(std::fabs(y[o] - p.y_ref[o]) <= contract) && ++failures <= 5) {
        ADD_FAILURE() << "bf16-weight contract " << describe(s, p.m) << ": y[" << o / s.n << "]["
                      << o % s.n << "] = " << y[o] << ", ref " << p.y_ref[o] << " ± " << contract;
      }
    }
    if (!(std::fabs(y[o] - want) <= tolerance)) {
      if (++failures <= 5) {
        ADD_FAILURE() << (path == Wna16GpuPath::STREAM  ? "stream "
                          : path == Wna16GpuPath::WGMMA ? "wgmma "
                                                        : "dequant_gemm ")
                      << describe(s, p.m) << (p.bias.empty() ? "" : " bias") << ": y[" << o / s.n
                      << "][" << o % s.n << "] = " << y[o] << ", want " << want << " ± "
                      << tolerance;
      }
    }
  }
  return failures;
}

int run_and_check(const Shape& shape, int64_t m, bool bias, Wna16GpuPath path, Rng& rng) {
  const Problem p = make_problem(shape, m, bias, rng);
  const Wna16GpuWeights packed = pack_wna16_for_gpu(p.w);
  return check(p, run_gpu(p, packed, path), path, packed.layout.padded_cols());
}

// n, k, group: k not a multiple of 64 (padding, gather), groups of 16 (4 per chunk), 32 (2), 48
// (padded to 64), 64, 128 (2 chunks), per channel, n below a tile and not a multiple of 16.
const Shape kDims[] = {{4, 37, 296, 32, false, false},  {4, 50, 200, 64, false, false},
                       {4, 45, 328, 128, false, false}, {4, 13, 100, 0, false, false},
                       {4, 1, 77, 0, false, false},     {4, 33, 256, 16, false, false},
                       {4, 64, 512, 128, false, false}, {4, 40, 240, 48, false, false}};

// ---- The packed layout, read on the host the way the kernel's fragments read it ----------------

// __byte_perm(x, y, s) (CUDA: bytes 0..3 of x then of y, selector nibbles' low 3 bits).
uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return out;
}

// The 8 values of the A registers a0..a3 (low half, high half) that dequant_step produces for
// lane `lane`, step s, as the kernel computes them (magic numbers included).
void fragment_values(const detail::Wna16HostPacked& P, int64_t tile, int64_t chunk, int lane, int s,
                     uint32_t z0, uint32_t z1, float out[4][2]) {
  const Wna16GpuLayout& L = P.layout;
  if (L.bits == 4) {
    const uint32_t w = P.codes[static_cast<size_t>(((tile * L.chunks + chunk) * 32 + lane) * 4 + s)];
    for (int i = 0; i < 4; ++i) {
      const float zero = bf16_to_f32(static_cast<uint16_t>(0x4300 | (i % 2 ? z1 : z0)));  // 128 + z
      out[i][0] = bf16_to_f32(static_cast<uint16_t>(0x4300 | ((w >> (4 * i)) & 0xF))) - zero;
      out[i][1] = bf16_to_f32(static_cast<uint16_t>(0x4300 | ((w >> (4 * i + 16)) & 0xF))) - zero;
    }
    return;
  }
  const size_t base = static_cast<size_t>((((tile * L.chunks + chunk) * 2 + s / 2) * 32 + lane) * 4 + 2 * (s % 2));
  const uint32_t words[2] = {P.codes[base], P.codes[base + 1]};
  for (int i = 0; i < 4; ++i) {
    const float neg_zero = bits_to_f32(0xCB000000u | (i % 2 ? z1 : z0));  // -(2^23 + z)
    for (int h = 0; h < 2; ++h) {
      const uint32_t sel = 0x7440u + static_cast<uint32_t>(2 * (i % 2) + h);
      const float v = bits_to_f32(byte_perm(words[i / 2], 0x4B000000u, sel)) + neg_zero;
      out[i][h] = bf16_to_f32(static_cast<uint16_t>(f32_to_bits(v) >> 16));  // the kernel's truncation
    }
  }
}

// y [m, n] (no bias) from the packed buffers by the PTX ISA's m16n8k16 fragment layouts: register
// a_i of lane (g, t) holds A rows g + 8·(i % 2), k-indices 2t + 8·(i / 2) + {0, 1}; b0 holds B
// k-indices 2t + {0, 1} and b1 2t + 8 + {0, 1} of column g, which the kernel loads from x columns
// 16·s + 4t + {0, 1} and + {2, 3}; the fp32 scale multiplies each group's partial sum.
std::vector<double> emulate(const detail::Wna16HostPacked& P, const std::vector<float>& x, int64_t m) {
  const Wna16GpuLayout& L = P.layout;
  const int64_t kp = L.padded_cols();
  std::vector<double> xp(static_cast<size_t>(m * kp), 0.0), y(static_cast<size_t>(m * L.n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < kp; ++p) {
      const int64_t c = P.column_of.empty() ? (p < L.k ? p : -1) : P.column_of[static_cast<size_t>(p)];
      if (c >= 0) xp[static_cast<size_t>(i * kp + p)] = x[static_cast<size_t>(i * L.k + c)];
    }
  }
  const uint32_t z_default = 1u << (L.bits - 1);
  for (int64_t tile = 0; tile < L.tiles; ++tile) {
    for (int64_t chunk = 0; chunk < L.chunks; ++chunk) {
      for (int s = 0; s < 4; ++s) {
        const int64_t group = (4 * chunk + s) / L.steps_per_group;
        double a[16][16] = {}, scale[16] = {};
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          const auto at = static_cast<size_t>(((tile * L.padded_groups + group) * 8 + g) * 2);
          const uint32_t z0 = P.zeros.empty() ? z_default : P.zeros[at], z1 = P.zeros.empty() ? z_default : P.zeros[at + 1];
          scale[g] = P.scales[at];
          scale[g + 8] = P.scales[at + 1];
          float values[4][2];
          fragment_values(P, tile, chunk, lane, s, z0, z1, values);
          for (int i = 0; i < 4; ++i) {
            for (int h = 0; h < 2; ++h) a[g + 8 * (i % 2)][2 * t + 8 * (i / 2) + h] = values[i][h];
          }
        }
        for (int64_t i = 0; i < m; ++i) {
          double b[16];
          for (int t = 0; t < 4; ++t) {
            for (int j = 0; j < 4; ++j) {
              b[2 * t + 8 * (j / 2) + j % 2] = xp[static_cast<size_t>(i * kp + chunk * 64 + s * 16 + 4 * t + j)];
            }
          }
          for (int r = 0; r < 16; ++r) {
            const int64_t row = tile * 16 + r;
            if (row >= L.n) continue;
            double sum = 0.0;
            for (int kk = 0; kk < 16; ++kk) sum += a[r][kk] * b[kk];
            y[static_cast<size_t>(i * L.n + row)] += scale[r] * sum;
          }
        }
      }
    }
  }
  return y;
}

TEST(Wna16Gpu, PackedLayoutDecodesLikeTheKernel) {
  Rng rng(77);
  int failures = 0;
  for (int bits : {4, 8}) {
    for (Shape shape : kDims) {
      shape.bits = bits;
      for (bool zeros : {false, true}) {
        for (bool g_idx : {false, true}) {
          if (g_idx && shape.group == 0) continue;
          shape.zeros = zeros;
          shape.g_idx = g_idx;
          const Problem p = make_problem(shape, 3, false, rng);
          const detail::Wna16HostPacked packed = detail::pack_wna16_host(p.w);
          const std::vector<double> y = emulate(packed, p.x, p.m);
          for (size_t o = 0; o < y.size(); ++o) {
            // Exact products summed in double: only ref's fp32 error remains.
            const double tolerance = gamma(static_cast<double>(shape.k) + 2, -24) * p.magnitude[o] + 1e-30;
            if (!(std::fabs(y[o] - p.y_ref[o]) <= tolerance) && ++failures <= 5) {
              ADD_FAILURE() << describe(shape, p.m) << ": y[" << o / shape.n << "][" << o % shape.n
                            << "] = " << y[o] << ", ref " << p.y_ref[o];
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Wna16Gpu, StreamMatchesReference) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(20261201);
  int failures = 0, problems = 0;
  for (int bits : {4, 8}) {
    for (Shape shape : kDims) {
      shape.bits = bits;
      for (bool zeros : {false, true}) {
        for (bool g_idx : {false, true}) {
          if (g_idx && shape.group == 0) continue;
          shape.zeros = zeros;
          shape.g_idx = g_idx;
          // Every configuration: the stream kernel's m = 1, <= 4, <= 8, <= 16 (rows below the
          // staged count read zeroed rows: 3, 13), the block kernel's <= 32 and <= 64 (17, 20, 33,
          // 64: staged rows past m are never written), and several launches of <= 64 rows
          // (70: 2, 130: 3).
          for (int64_t m : {1, 3, 8, 13, 16, 17, 20, 33, 64, 70, 130}) {
            failures += run_and_check(shape, m, (problems++ % 2) == 1, Wna16GpuPath::STREAM, rng);
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "over " << problems << " problems";
}

// wna16_gemm_f32out (the quantized LM head's fp32 logits) is the stream kernel's sum itself: its
// bf16 rounding gives wna16_gemm's output bit for bit, and its fp32 bias is added to that sum in
// fp32 (so y_bias - bias's own fp32 addition reproduces it exactly).
TEST(Wna16Gpu, F32OutputIsTheStreamSumUnrounded) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(20261202);
  int failures = 0, problems = 0;
  for (int bits : {4, 8}) {
    for (Shape shape : kDims) {
      shape.bits = bits;
      for (bool zeros : {false, true}) {
        shape.zeros = zeros;
        shape.g_idx = zeros && shape.group != 0;  // gathered x on half the cases
        for (int64_t m : {1, 13, 33}) {
          const Problem p = make_problem(shape, m, false, rng);
          const Wna16GpuWeights packed = pack_wna16_for_gpu(p.w);
          ++problems;
          const std::vector<float> rounded = run_gpu(p, packed, Wna16GpuPath::STREAM);
          std::vector<float> bias(static_cast<size_t>(shape.n));
          for (float& b : bias) b = rng.signed_value() * 3.0f;
          DeviceBuffer<uint16_t> x{std::span<const uint16_t>(p.x_bits)};
          DeviceBuffer<float> dbias{std::span<const float>(bias)};
          DeviceBuffer<float> y(static_cast<size_t>(m * shape.n)), yb(y.size());
          DeviceBuffer<uint8_t> ws(wna16_workspace_bytes(m, packed, Wna16GpuPath::STREAM));
          wna16_gemm_f32out(x.data(), m, packed, y.data(), ws.data(), ws.size(), nullptr);
          wna16_gemm_f32out(x.data(), m, packed, yb.data(), ws.data(), ws.size(), nullptr,
                            dbias.data());
          LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> sums = y.download(), with_bias = yb.download();
          for (size_t o = 0; o < sums.size(); ++o) {
            const float b = bias[o % static_cast<size_t>(shape.n)];
            const bool ok = bf16_to_f32(f32_to_bf16(sums[o])) == rounded[o] &&
                            with_bias[o] == sums[o] + b;
            if (!ok && ++failures <= 5) {
              ADD_FAILURE() << describe(shape, m) << ": y[" << o << "] fp32 " << sums[o]
                            << " (with bias " << with_bias[o] << ", bias " << b << "), bf16 path "
                            << rounded[o];
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "over " << problems << " problems";
}

// Many chunks per warp (the register ring wraps, groups straddle the warps' shares of k).
TEST(Wna16Gpu, StreamMatchesReferenceOnLongRows) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(11);
  int failures = 0;
  for (int bits : {4, 8}) {
    for (int64_t m : {1, 7, 16, 32, 48}) {
      failures += run_and_check({bits, 300, 1100, 128, bits == 8, false}, m, true, Wna16GpuPath::STREAM, rng);
      failures += run_and_check({bits, 131, 1024, 64, bits == 4, true}, m, false, Wna16GpuPath::STREAM, rng);
      failures += run_and_check({bits, 40, 8192, 128, true, false}, m, false, Wna16GpuPath::STREAM, rng);
      failures += run_and_check({bits, 24, 4160, 32, false, false}, m, true, Wna16GpuPath::STREAM, rng);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Wna16Gpu, DequantGemmMatchesReference) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(5);
  int failures = 0, problems = 0;
  for (int bits : {4, 8}) {
    for (Shape shape : {Shape{4, 37, 296, 32, false, false}, Shape{4, 45, 328, 128, true, true},
                        Shape{4, 300, 1100, 128, false, false}, Shape{4, 13, 100, 0, true, false},
                        Shape{4, 64, 512, 64, false, true}}) {
      shape.bits = bits;
      for (int64_t m : {1, 40, 100}) {
        failures += run_and_check(shape, m, (problems++ % 2) == 0, Wna16GpuPath::DEQUANT_GEMM, rng);
      }
    }
  }
  EXPECT_EQ(failures, 0) << "over " << problems << " problems";
}

// The wgmma kernel (sm_90a): the weights it multiplies are DEQUANT_GEMM's bf16((q - z)·s), so the
// same tolerances. Every configuration of groups per chunk (16, 32, >= 64 columns), zero points,
// g_idx (gathered x), n not a multiple of 4 (scalar stores) or of 128 (a partial block), m below,
// at and past one block of 64 / 128 rows.
TEST(Wna16Gpu, WgmmaMatchesReference) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  if (!detail::wna16_wgmma_available()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  Rng rng(20261203);
  int failures = 0, problems = 0;
  for (int bits : {4, 8}) {
    for (Shape shape : kDims) {
      shape.bits = bits;
      shape.zeros = (problems % 3) == 1;
      shape.g_idx = shape.group != 0 && (problems % 4) == 2;
      for (int64_t m : {1, 40, 64, 65, 128, 200}) {
        failures += run_and_check(shape, m, (problems++ % 2) == 0, Wna16GpuPath::WGMMA, rng);
      }
    }
  }
  EXPECT_EQ(failures, 0) << "over " << problems << " problems";
}

// Long rows split over clusters of 1..8 blocks (each share a run of chunks; groups straddle
// shares), against the reference; and the shares reduce in a fixed order: the same bits each time.
TEST(Wna16Gpu, WgmmaSplitsOfK) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  if (!detail::wna16_wgmma_available()) GTEST_SKIP() << "the wgmma kernel needs an sm_90 GPU";
  Rng rng(31);
  int failures = 0;
  for (const Shape& shape :
       {Shape{4, 300, 4160, 128, true, false}, Shape{8, 136, 2048, 32, false, true}}) {
    for (int64_t m : {70, 128}) {
      const Problem p = make_problem(shape, m, true, rng);
      const Wna16GpuWeights packed = pack_wna16_for_gpu(p.w);
      DeviceBuffer<uint16_t> x{std::span<const uint16_t>(p.x_bits)};
      DeviceBuffer<uint16_t> bias{std::span<const uint16_t>(p.bias_bits)};
      DeviceBuffer<uint8_t> ws(wna16_workspace_bytes(m, packed, Wna16GpuPath::WGMMA));
      auto* xp = reinterpret_cast<uint16_t*>(ws.data());
      const int64_t ldx = packed.layout.padded_cols();
      detail::launch_wna16_wgmma_x(x.data(), m, packed, xp, nullptr);
      for (int split : {1, 2, 3, 5, 8}) {
        const std::vector<uint16_t> poison(static_cast<size_t>(m * shape.n), 0xFFFF);
        DeviceBuffer<uint16_t> y{std::span<const uint16_t>(poison)};
        std::vector<uint16_t> first;
        for (int run = 0; run < 2; ++run) {
          detail::launch_wna16_wgmma(xp, ldx, m, packed, bias.data(), y.data(), nullptr, split);
          LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<uint16_t> bits = y.download();
          if (run == 0) {
            first = bits;
            std::vector<float> out;
            for (uint16_t v : bits) out.push_back(bf16_to_f32(v));
            failures += check(p, out, Wna16GpuPath::WGMMA, packed.layout.padded_cols());
          } else {
            EXPECT_EQ(bits, first)
                << describe(shape, m) << " split " << split << ": not deterministic";
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// Rows beyond one dequantized slice (kWna16DequantSliceBytes): two slices, the second partial.
TEST(Wna16Gpu, DequantGemmOverSeveralSlices) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(9);
  const int64_t k = 960;  // 15 groups of 64: no padding
  const int64_t slice_rows = static_cast<int64_t>(detail::kWna16DequantSliceBytes / (16 * k * 2)) * 16;
  EXPECT_EQ(run_and_check({4, slice_rows + 1000, k, 64, true, false}, 3, true, Wna16GpuPath::DEQUANT_GEMM, rng), 0);
}

// The prefill path's dequantization alone, bit for bit: bf16((q - z)·s) as ref's fp32 weight.
TEST(Wna16Gpu, DequantKernelIsExact) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(6);
  for (const Shape& shape : {Shape{4, 45, 328, 128, true, true}, Shape{8, 37, 296, 32, true, false}}) {
    const IntWeights w = random_weights(shape, rng);
    const detail::Wna16HostPacked host = detail::pack_wna16_host(w);
    const Wna16GpuWeights packed = pack_wna16_for_gpu(w);
    const int64_t kp = packed.layout.padded_cols();
    DeviceBuffer<uint16_t> out(static_cast<size_t>(packed.layout.tiles * 16 * kp));
    detail::launch_wna16_dequant(packed, 0, packed.layout.tiles, out.data(), nullptr);
    const std::vector<uint16_t> got = out.download();
    int mismatches = 0;
    for (int64_t r = 0; r < w.rows; ++r) {
      for (int64_t p = 0; p < kp; ++p) {
        const int64_t c = host.column_of.empty() ? (p < w.cols ? p : -1) : host.column_of[static_cast<size_t>(p)];
        if (c < 0) continue;  // padding: meets x = 0
        const int64_t g = w.group_of(c);
        const float q = static_cast<float>(w.codes[static_cast<size_t>(r * w.cols + c)]);
        const uint16_t want = f32_to_bf16((q - w.zero(r, g)) * w.scales[static_cast<size_t>(r * w.groups() + g)]);
        mismatches += got[static_cast<size_t>(r * kp + p)] != want;
      }
    }
    EXPECT_EQ(mismatches, 0) << describe(shape, 0);
  }
}

TEST(Wna16Gpu, EmptyShapes) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  IntWeights w;
  w.rows = 3;
  w.cols = 0;
  w.group_size = 128;
  const Wna16GpuWeights packed = pack_wna16_for_gpu(w);
  const std::vector<uint16_t> bias_bits = {f32_to_bf16(1.0f), f32_to_bf16(-2.0f), f32_to_bf16(3.0f)};
  DeviceBuffer<uint16_t> bias{std::span<const uint16_t>(bias_bits)};
  DeviceBuffer<uint16_t> y(6);
  for (Wna16GpuPath path :
       {Wna16GpuPath::STREAM, Wna16GpuPath::DEQUANT_GEMM, Wna16GpuPath::WGMMA}) {
    EXPECT_EQ(wna16_workspace_bytes(2, packed, path), 0u);
    wna16_gemm(nullptr, 2, packed, y.data(), nullptr, 0, nullptr, bias.data(), path);
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> out;
    for (uint16_t v : y.download()) out.push_back(bf16_to_f32(v));
    EXPECT_EQ(out, (std::vector<float>{1, -2, 3, 1, -2, 3}));
  }
  wna16_gemm(nullptr, 0, packed, nullptr, nullptr, 0, nullptr);  // m = 0: nothing to do
}

TEST(Wna16Gpu, RejectsBadArguments) {
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  Rng rng(2);
  const Wna16GpuWeights packed = pack_wna16_for_gpu(random_weights({4, 16, 100, 32, false, false}, rng));
  ASSERT_TRUE(packed.layout.gather_x);  // k = 100 is padded to 128
  DeviceBuffer<uint16_t> x(2 * 100 + 8), y(2 * 16);
  const size_t need = wna16_workspace_bytes(2, packed);
  EXPECT_GT(need, 0u);
  DeviceBuffer<uint8_t> workspace(need);
  EXPECT_THROW(wna16_gemm(x.data(), 2, packed, y.data(), workspace.data(), need - 1, nullptr), InvalidArgument);
  EXPECT_THROW(wna16_gemm(x.data() + 1, 2, packed, y.data(), workspace.data(), need, nullptr), InvalidArgument);
  EXPECT_THROW(wna16_gemm(x.data(), -1, packed, y.data(), workspace.data(), need, nullptr), InvalidArgument);
  EXPECT_NO_THROW(wna16_gemm(x.data(), 2, packed, y.data(), workspace.data(), need, nullptr));
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(Wna16Gpu, AutoPathByRows) {
  Rng rng(4);
  const detail::Wna16HostPacked host = detail::pack_wna16_host(random_weights({4, 64, 256, 128, false, false}, rng));
  EXPECT_FALSE(host.layout.gather_x);  // k a multiple of 64, groups of 128: x is read in place
  EXPECT_EQ(host.layout.tiles, 4);
  EXPECT_EQ(host.layout.chunks, 4);
  EXPECT_EQ(host.layout.steps_per_group, 8);
  if (!device_available()) GTEST_SKIP() << "no CUDA device";
  const Wna16GpuWeights packed = pack_wna16_for_gpu(random_weights({4, 64, 256, 128, false, false}, rng));
  // One launch of the stream kernel (m <= 32) always wins; thousands of rows (128 stream launches
  // against one dequantization) always go to the GEMM. WGMMA is never automatic (measured slower).
  EXPECT_EQ(wna16_auto_path(1, packed), Wna16GpuPath::STREAM);
  EXPECT_EQ(wna16_auto_path(32, packed), Wna16GpuPath::STREAM);
  EXPECT_EQ(wna16_auto_path(4096, packed), Wna16GpuPath::DEQUANT_GEMM);
  EXPECT_EQ(wna16_workspace_bytes(8, packed), 0u);  // no gather, no dequantized slice
  EXPECT_GT(wna16_workspace_bytes(4096, packed), 64u * 256 * 2);
}

TEST(Wna16Gpu, PackRejectsUnsupportedAndInconsistentWeights) {
  Rng rng(3);
  const IntWeights good = random_weights({4, 8, 96, 32, true, true}, rng);
  auto expect_invalid = [&](const char* what, auto mutate) {
    IntWeights w = good;
    mutate(w);
    EXPECT_THROW(detail::pack_wna16_host(w), InvalidArgument) << what;
  };
  for (int bits : {2, 3, 5, 6, 7}) {  // valid codes, but the GPU kernels take 4 and 8 bits only
    IntWeights w = good;
    w.bits = bits;
    EXPECT_THROW(detail::pack_wna16_host(w), Unsupported) << "bits " << bits;
  }
  expect_invalid("bits 9", [](IntWeights& w) { w.bits = 9; });
  expect_invalid("group 0", [](IntWeights& w) { w.group_size = 0; });
  expect_invalid("codes short", [](IntWeights& w) { w.codes.pop_back(); });
  expect_invalid("code 16", [](IntWeights& w) { w.codes[5] = 16; });
  expect_invalid("scales short", [](IntWeights& w) { w.scales.pop_back(); });
  expect_invalid("zeros short", [](IntWeights& w) { w.zeros.pop_back(); });
  expect_invalid("zero 16", [](IntWeights& w) { w.zeros[2] = 16; });
  expect_invalid("g_idx short", [](IntWeights& w) { w.g_idx.pop_back(); });
  expect_invalid("g_idx 3", [](IntWeights& w) { w.g_idx[7] = 3; });
  EXPECT_NO_THROW(detail::pack_wna16_host(good));
}

}  // namespace
}  // namespace lowbit::kernels::cuda
