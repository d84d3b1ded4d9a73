// The weight-only integer matmul's entry points: which kernel packs (once, from cpu_features()),
// how x is brought into the packed column order, and which path and how many threads run.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/wna16_g16.h"
#include "kernels/cpu/wna16_kernels.h"
#include "kernels/wna16_matmul.h"
#include "lowbit/error.h"

namespace lowbit::kernels {

namespace cpu {

namespace {

using detail::kWna16BlockCols;
using detail::Wna16Layout;

// Up to this many rows of x the streaming path runs: it decodes each weight in registers once per
// pass of up to 4 rows of x, while the blocked path decodes a panel to fp32 once and reuses it for
// all rows from cache, which pays off over many rows. Measured (bench/NOTES.md, "wna16"): the
// AVX-512 streaming path stays at 90-95% of the dense kernel's FMA rate up to m = 64, the blocked
// one overtakes it beyond.
int64_t streaming_max_rows(Wna16Kernel kernel) {
  switch (kernel) {
    case Wna16Kernel::AVX512:
    case Wna16Kernel::AVX512_BF16DOT: return 64;
    case Wna16Kernel::AVX2: return 32;  // crossover measured at m = 32 (45 vs 44 GFLOP/cpu-s)
    // Its int16 GEMM does 8 products per vector operation where the streaming passes over two
    // rows of x do ~6: streaming led at m <= 8 on a Zen 3 (100-111 against 41-93 GFLOP/s, a busy
    // machine), the two were mixed at m = 16 (bench/NOTES.md, session 27).
    case Wna16Kernel::AVX2_I16DOT: return 8;
    case Wna16Kernel::SCALAR: return 4;
  }
  return 4;
}

// The bf16-dot kernel's streaming path runs up to this many rows of x (at m = 8 it still ran 1.15x
// the exact kernel in CPU time, bench/NOTES.md); beyond, where both are compute-bound and close,
// the exact AVX-512 one runs and x is not rounded.
constexpr int64_t kBf16DotMaxRows = 8;

const detail::Wna16PackedCpu& cpu_packed(const Wna16Packed& w) {
  const auto* packed = dynamic_cast<const detail::Wna16PackedCpu*>(&w);
  if (packed == nullptr) {
    throw InvalidArgument(std::string("matmul_wna16: weights packed for ") + w.kernel_name() +
                          " were not made by pack_wna16");
  }
  return *packed;
}

// Source column of packed column c, or -1 for padding.
int64_t source_column(const Wna16Layout& w, int64_t c) {
  if (w.column_of != nullptr) return w.column_of[c];
  return c < w.cols ? c : -1;
}

// x in packed column order, zero padded: [m, padded_cols]. The caller's x itself when the order is
// the identity and nothing is padded.
const float* packed_x(const Wna16Layout& w, const float* x, int64_t m) {
  if (w.column_of == nullptr && w.padded_cols == w.cols) return x;
  float* xp = detail::thread_scratch(2, static_cast<size_t>(m * w.padded_cols));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < w.padded_cols; ++c) {
      const int64_t src = source_column(w, c);
      xp[i * w.padded_cols + c] = src >= 0 ? x[i * w.cols + src] : 0.0f;
    }
  }
  return xp;
}

// x rounded to bf16 (nearest even) for the bf16-dot kernel, [m, padded_cols] in packed column
// order; with zero points also the fp32 sum of the rounded values over each group, [m, groups].
// (Kept to plain loops over contiguous columns: for a 512-row k/v projection this preparation
// was 12% of the call when it went through source_column() per element.)
void bf16_x(const Wna16Layout& w, const float* x, int64_t m, detail::Wna16Args& args) {
  const int64_t kp = w.padded_cols;
  const size_t floats = static_cast<size_t>((m * kp + 1) / 2 + (w.zeros ? m * w.groups : 0));
  float* buffer = detail::thread_scratch(2, floats);
  auto* xb = reinterpret_cast<uint16_t*>(buffer);
  float* xsum = w.zeros ? buffer + (m * kp + 1) / 2 : nullptr;
  for (int64_t i = 0; i < m; ++i) {
    const float* src = x + i * w.cols;
    uint16_t* out = xb + i * kp;
    if (w.column_of == nullptr) {
      for (int64_t c = 0; c < w.cols; ++c) out[c] = f32_to_bf16(src[c]);
      std::fill(out + w.cols, out + kp, uint16_t{0});
    } else {
      for (int64_t c = 0; c < kp; ++c) {
        out[c] = w.column_of[c] >= 0 ? f32_to_bf16(src[w.column_of[c]]) : uint16_t{0};
      }
    }
    if (xsum == nullptr) continue;
    for (int64_t g = 0; g < w.groups; ++g) {
      float sum = 0.0f;
      for (int64_t c = w.group_blocks[g] * kWna16BlockCols; c < w.group_blocks[g + 1] * kWna16BlockCols; ++c) {
        sum += bf16_to_f32(out[c]);
      }
      xsum[i * w.groups + g] = sum;
    }
  }
  args.xb = xb;
  args.xsum = xsum;
}

// Calls fn(cb0, cb1, index) for each segment of the i16-dot kernels, in the order they walk them:
// each group's column blocks in runs of kWna16I16SegmentBlocks, groups in order.
template <typename Fn>
void for_each_i16_segment(const Wna16Layout& w, Fn fn) {
  int64_t index = 0;
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t end = w.group_blocks[g + 1];
    for (int64_t cb = w.group_blocks[g]; cb < end; cb += detail::kWna16I16SegmentBlocks) {
      fn(cb, std::min(cb + detail::kWna16I16SegmentBlocks, end), index++);
    }
  }
}

// Where column c of x goes for wna16_g16_rows_i16dot_avx2: in every 32 columns the 8-column chunks
// in the order 0, 2, 1, 3 (the lanes its byte unpacks give each vpmaddwd: wna16_g16_avx2.cc).
int64_t g16_position(int64_t c) {
  const int64_t chunk = (c >> 3) & 3;
  const int64_t to = chunk == 1 ? 2 : chunk == 2 ? 1 : chunk;
  return (c & ~int64_t{31}) | (to << 3) | (c & 7);
}

// x quantized to int16 for the i16-dot kernel (wna16_i16dot_avx2.cc), in packed column order: per
// row of x and segment (for_each_i16_segment), the scale sx = max|x| / 32767 and xq = round(x / sx)
// in [-32767, 32767]; with it sx · Σ xq, which the kernel multiplies by each row's zero point. A
// segment holding Inf or NaN gets sx = NaN, so that the rows it meets come out NaN, as an fp32 dot
// product's would (not some finite value). With `slivers`, also xq_pairs for the GEMM
// (wna16_kernels.h). With `g16_order`, xq in the order of the group-16 layout's kernel
// (g16_position; no slivers then).
void i16_x(const Wna16Layout& w, const float* x, int64_t m, bool slivers, detail::Wna16Args& args,
           bool g16_order = false) {
  const int64_t kp = w.padded_cols;
  int64_t segments = 0;
  for_each_i16_segment(w, [&](int64_t, int64_t, int64_t) { ++segments; });
  constexpr int64_t R = detail::kWna16I16GemmRows;
  const int64_t sliver_rows = slivers ? (m + R - 1) / R * R : 0;
  const size_t floats = static_cast<size_t>(2 * m * segments + (m * kp + 1) / 2 + sliver_rows * kp / 2);
  float* buffer = detail::thread_scratch(2, floats);
  float* scale = buffer;
  float* sum = scale + m * segments;
  auto* xq = reinterpret_cast<int16_t*>(sum + m * segments);
  auto* pairs = reinterpret_cast<int32_t*>(sum + m * segments + (m * kp + 1) / 2);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * w.cols;
    // The value at packed column c (plain loops: see bf16_x).
    auto at = [&](int64_t c) {
      if (w.column_of != nullptr) return w.column_of[c] >= 0 ? row[w.column_of[c]] : 0.0f;
      return c < w.cols ? row[c] : 0.0f;
    };
    int16_t* out = xq + i * kp;
    for_each_i16_segment(w, [&](int64_t cb0, int64_t cb1, int64_t seg) {
      const int64_t c0 = cb0 * kWna16BlockCols, c1 = cb1 * kWna16BlockCols;
      float amax = 0.0f;
      bool finite = true;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = at(c);
        amax = std::max(amax, std::fabs(v));
        finite = finite && std::isfinite(v);
      }
      const float sx = !finite ? std::numeric_limits<float>::quiet_NaN() : amax / 32767.0f;
      const float inverse = finite && amax > 0.0f ? 32767.0f / amax : 0.0f;
      int32_t total = 0;
      for (int64_t c = c0; c < c1; ++c) {
        // |row[c]| · inverse <= 32767 up to one rounding: clamp, then round to nearest even by
        // adding and subtracting 1.5 · 2^23 (exact for |v| < 2^22; no libm call per element).
        const float v = std::clamp(at(c) * inverse, -32767.0f, 32767.0f);
        const float rounded = (v + 12582912.0f) - 12582912.0f;
        const int16_t q = finite ? static_cast<int16_t>(rounded) : int16_t{0};
        out[g16_order ? g16_position(c) : c] = q;
        total += q;
      }
      scale[i * segments + seg] = sx;
      sum[i * segments + seg] = sx * static_cast<float>(total);
    });
  }
  if (slivers) {
    const int64_t count = sliver_rows / R;
    for_each_i16_segment(w, [&](int64_t cb0, int64_t cb1, int64_t) {
      const int64_t p0 = cb0 * kWna16BlockCols / 2;
      const int64_t len = (cb1 - cb0) * kWna16BlockCols / 2;
      for (int64_t i = 0; i < sliver_rows; ++i) {
        int32_t* out = pairs + (p0 * count + (i / R) * len) * R + i % R;
        if (i >= m) {
          for (int64_t j = 0; j < len; ++j) out[j * R] = 0;
          continue;
        }
        const int16_t* row = xq + i * kp + 2 * p0;
        for (int64_t j = 0; j < len; ++j) {  // low half: the even column, as vpmaddwd pairs them
          const uint32_t pair = static_cast<uint16_t>(row[2 * j]) |
                                (static_cast<uint32_t>(static_cast<uint16_t>(row[2 * j + 1])) << 16);
          out[j * R] = static_cast<int32_t>(pair);
        }
      }
    });
    args.xq_pairs = pairs;
    args.slivers = count;
  }
  args.xq = xq;
  args.xq_scale = scale;
  args.xq_sum = sum;
  args.segments = segments;
}

// Runs body(thread, count) on `threads` OpenMP threads, rethrowing the first exception here.
template <typename Body>
void parallel(int threads, Body body) {
  if (threads <= 1) {
    body(0, 1);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    try {
      body(omp_get_thread_num(), omp_get_num_threads());
    } catch (...) {
#pragma omp critical(lowbit_wna16_error)
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void run_streaming(Wna16Kernel kernel, const Wna16Layout& w, const float* x, int64_t m,
                   const float* bias, float* y, bool exact = false, bool i16_decode = false) {
  if (i16_decode && m == 1 && !exact) kernel = Wna16Kernel::AVX2_I16DOT;
  detail::Wna16Args args;
  args.w = &w;
  args.m = m;
  args.bias = bias;
  args.y = y;
  void (*rows_fn)(const detail::Wna16Args&, detail::Range) = detail::wna16_gemv_scalar;
  if (kernel == Wna16Kernel::AVX512_BF16DOT && w.nibbles && m <= kBf16DotMaxRows && !exact) {
    bf16_x(w, x, m, args);
    rows_fn = detail::wna16_gemv_bf16dot_avx512;
  } else if (kernel == Wna16Kernel::AVX2_I16DOT && !exact) {
    i16_x(w, x, m, false, args);
    rows_fn = detail::wna16_gemv_i16dot_avx2;
  } else {
    args.x = packed_x(w, x, m);
    if (kernel == Wna16Kernel::AVX512 || kernel == Wna16Kernel::AVX512_BF16DOT) {
      rows_fn = detail::wna16_gemv_avx512;
    } else if (kernel == Wna16Kernel::AVX2 || kernel == Wna16Kernel::AVX2_I16DOT) {
      rows_fn = detail::wna16_gemv_avx2;
    }
  }
  const int threads = detail::matmul_thread_count(m, w.rows, w.padded_cols);
  parallel(threads, [&](int t, int count) {
    // Two tiles = 16 rows = one 64-byte line of y: threads never share a line they write.
    rows_fn(args, detail::split_range(w.tiles, count, t, 2));
  });
}

// The group-16 layout (wna16_g16.h): x zero-padded to whole units in the form the packing kernel
// takes (bf16; int16 as the general layout's i16-dot kernel quantizes it, in runs of 128 columns;
// fp32 for the exact AVX2 kernel, and for `exact` on AVX2 packings), rows split between threads as
// run_streaming splits tiles. (`exact` keeps the AVX-512 kernel's bf16 x: 1 and 0 are exact there.)
void run_g16(const detail::Wna16G16Cpu& w, const float* x, int64_t m, const float* bias, float* y,
             bool exact = false) {
  detail::Wna16G16Args a = w.args();
  const int64_t kp = a.units * detail::kG16UnitCols;
  void (*rows_fn)(const detail::Wna16G16Args&, int64_t, int64_t) = detail::wna16_g16_rows_avx512;
  if (w.kernel() == Wna16Kernel::AVX512_BF16DOT) {
    auto* xb = reinterpret_cast<uint16_t*>(
        detail::thread_scratch(2, static_cast<size_t>((m * kp + 1) / 2)));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < w.cols(); ++c) xb[i * kp + c] = f32_to_bf16(x[i * w.cols() + c]);
      std::fill(xb + i * kp + w.cols(), xb + (i + 1) * kp, uint16_t{0});
    }
    a.xb = xb;
  } else if (w.kernel() == Wna16Kernel::AVX2_I16DOT && !exact) {
    // i16_x's runs over a layout of one group and no permutation: runs of 4 blocks of 32 columns,
    // the kernel's kG16SegmentUnits units.
    static_assert(detail::kWna16I16SegmentBlocks * kWna16BlockCols ==
                  detail::kG16SegmentUnits * detail::kG16UnitCols);
    const int64_t blocks[2] = {0, kp / kWna16BlockCols};
    Wna16Layout flat;
    flat.rows = a.rows;
    flat.cols = w.cols();
    flat.col_blocks = blocks[1];
    flat.padded_cols = kp;
    flat.groups = 1;
    flat.group_blocks = blocks;
    detail::Wna16Args q;
    i16_x(flat, x, m, false, q, /*g16_order=*/true);
    a.xq = q.xq;
    a.xq_scale = q.xq_scale;
    a.segments = q.segments;
    rows_fn = detail::wna16_g16_rows_i16dot_avx2;
  } else {
    if (kp == w.cols()) {
      a.x = x;
    } else {
      float* xp = detail::thread_scratch(2, static_cast<size_t>(m * kp));
      for (int64_t i = 0; i < m; ++i) {
        std::copy_n(x + i * w.cols(), w.cols(), xp + i * kp);
        std::fill(xp + i * kp + w.cols(), xp + (i + 1) * kp, 0.0f);
      }
      a.x = xp;
    }
    rows_fn = detail::wna16_g16_rows_avx2;
  }
  a.m = m;
  a.bias = bias;
  a.y = y;
  const int threads = detail::matmul_thread_count(m, a.rows, kp);
  parallel(threads, [&](int t, int count) {
    const detail::Range part = detail::split_range(a.rows, count, t, 16);  // 16 rows: a line of y
    rows_fn(a, part.begin, part.end);
  });
}

// The i16-dot kernel's prefill: x quantized as for its decode, row tiles split between threads.
void run_i16_gemm(const Wna16Layout& w, const float* x, int64_t m, const float* bias, float* y) {
  detail::Wna16Args args;
  args.w = &w;
  args.m = m;
  args.bias = bias;
  args.y = y;
  i16_x(w, x, m, true, args);
  const int threads = detail::matmul_thread_count(m, w.rows, w.padded_cols);
  parallel(threads, [&](int t, int count) {
    detail::wna16_gemm_i16dot_avx2(args, detail::split_range(w.tiles, count, t, 2));
  });
}

void run_blocked(Wna16Kernel kernel, const Wna16Layout& w, const float* x, int64_t m,
                 const float* bias, float* y) {
  if (kernel == Wna16Kernel::AVX2_I16DOT) {
    run_i16_gemm(w, x, m, bias, y);
    return;
  }
  detail::MatmulArgs args;
  args.x = packed_x(w, x, m);
  args.m = m;
  args.k = w.padded_cols;
  args.n = w.rows;
  args.w = &w;
  args.w_dtype = DType::U8;
  args.bias = bias;
  args.y = y;
  detail::BlockedKernel blocked;
  switch (kernel) {
    case Wna16Kernel::AVX512:
      blocked = detail::blocked_kernel_avx512();
      blocked.pack = detail::wna16_pack_panels_avx512;
      break;
    case Wna16Kernel::AVX512_BF16DOT:
      // x and the dequantized weights rounded to bf16, two k per vdpbf16ps: ~1.7x the fp32
      // blocked kernel's rate (bench/NOTES.md), with transformers' bf16 weights' precision.
      blocked = detail::blocked_kernel_bf16_dot_avx512();
      blocked.pack = detail::wna16_pack_pairs_avx512;
      break;
    case Wna16Kernel::AVX2:
    case Wna16Kernel::AVX2_I16DOT:  // (run_i16_gemm above)
      blocked = detail::blocked_kernel_avx2();
      blocked.pack = detail::wna16_pack_panels_scalar;
      break;
    case Wna16Kernel::SCALAR:
      blocked = detail::blocked_kernel_scalar();
      blocked.pack = detail::wna16_pack_panels_scalar;
      break;
  }
  detail::run_blocked(args, blocked);
}

}  // namespace

const char* wna16_kernel_name(Wna16Kernel kernel) {
  switch (kernel) {
    case Wna16Kernel::SCALAR: return "wna16_scalar";
    case Wna16Kernel::AVX2: return "wna16_avx2";
    case Wna16Kernel::AVX512: return "wna16_avx512";
    case Wna16Kernel::AVX512_BF16DOT: return "wna16_avx512_bf16dot";
    case Wna16Kernel::AVX2_I16DOT: return "wna16_avx2_i16dot";
  }
  return "unknown";
}

bool wna16_kernel_supported(Wna16Kernel kernel) {
  const CpuFeatures& f = cpu_features();
  switch (kernel) {
    case Wna16Kernel::SCALAR: return true;
    case Wna16Kernel::AVX2:
    case Wna16Kernel::AVX2_I16DOT: return f.has_avx2_kernels();
    case Wna16Kernel::AVX512: return f.has_avx512_kernels();
    case Wna16Kernel::AVX512_BF16DOT: return f.has_avx512_kernels() && f.avx512bf16;
  }
  return false;
}

// The bf16-dot kernel first: 1.3-1.5x the exact AVX-512 kernel's decode speed on Zen 4
// (bench/NOTES.md), at the cost of rounding x to bf16 on that path, as the "A16" in the name and
// vLLM's kernels do. On AVX2-only CPUs the i16-dot kernel: its decode does 16 products per
// instruction where the exact one does 8 with a conversion per weight (bench/NOTES.md), with
// x's error below a bf16 rounding.
Wna16Kernel wna16_best_kernel() {
  static const Wna16Kernel best = [] {
    for (Wna16Kernel k : {Wna16Kernel::AVX512_BF16DOT, Wna16Kernel::AVX512, Wna16Kernel::AVX2_I16DOT}) {
      if (wna16_kernel_supported(k)) return k;
    }
    return Wna16Kernel::SCALAR;
  }();
  return best;
}

std::vector<Wna16Kernel> wna16_supported_kernels() {
  std::vector<Wna16Kernel> out;
  for (Wna16Kernel k : {Wna16Kernel::SCALAR, Wna16Kernel::AVX2, Wna16Kernel::AVX2_I16DOT,
                        Wna16Kernel::AVX512, Wna16Kernel::AVX512_BF16DOT}) {
    if (wna16_kernel_supported(k)) out.push_back(k);
  }
  return out;
}

std::shared_ptr<const Wna16Packed> pack_wna16_with(Wna16Kernel kernel, const IntWeights& weights) {
  if (!wna16_kernel_supported(kernel)) {
    throw Unsupported(std::string("pack_wna16: this CPU cannot run the ") +
                      wna16_kernel_name(kernel) +
                      " kernel (features: " + cpu_features_string(cpu_features()) + ")");
  }
  // 5..6-bit groups of 16 (Q6_K) would cost 2.25 bytes per weight in the general layout. (The
  // exact AVX512 kernel keeps it: AVX-512 CPUs that lack AVX512_BF16 are few.)
  if (detail::wna16_g16_has_kernel(kernel) && detail::wna16_g16_applies(weights)) {
    return std::make_shared<detail::Wna16G16Cpu>(kernel, weights);
  }
  return std::make_shared<detail::Wna16PackedCpu>(kernel, weights);
}

void check_wna16_weights(const IntWeights& weights) { detail::validate_int_weights(weights); }

void matmul_wna16_exact(const float* x, int64_t m, const Wna16Packed& packed, const float* bias,
                        float* y) {
  if (const auto* g16 = dynamic_cast<const detail::Wna16G16Cpu*>(&packed)) {
    if (m > 0 && g16->rows() > 0) run_g16(*g16, x, m, bias, y, /*exact=*/true);
    return;
  }
  const detail::Wna16PackedCpu& p = cpu_packed(packed);
  const Wna16Layout& w = p.layout();
  if (m <= 0 || w.rows == 0 || w.cols == 0) {  // the general entry's checks and empty cases
    matmul_wna16_with(MatmulPath::STREAMING, x, m, packed, bias, y);
    return;
  }
  run_streaming(p.kernel(), w, x, m, bias, y, /*exact=*/true);
}

void matmul_wna16_with(MatmulPath path, const float* x, int64_t m, const Wna16Packed& packed,
                       const float* bias, float* y) {
  LOWBIT_CHECK(m >= 0, "matmul_wna16: m = " + std::to_string(m) + " is negative");
  if (const auto* g16 = dynamic_cast<const detail::Wna16G16Cpu*>(&packed)) {
    if (m > 0 && g16->rows() > 0) run_g16(*g16, x, m, bias, y);  // one kernel for every m
    return;
  }
  const detail::Wna16PackedCpu& p = cpu_packed(packed);
  const Wna16Layout& w = p.layout();
  if (m == 0 || w.rows == 0) return;
  LOWBIT_CHECK(y != nullptr && (x != nullptr || w.cols == 0),
               "matmul_wna16: null x or y for weights " + std::to_string(w.rows) + "x" +
                   std::to_string(w.cols));
  if (w.cols == 0) {  // an empty sum: only the bias remains
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < w.rows; ++j) y[i * w.rows + j] = bias ? bias[j] : 0.0f;
    }
    return;
  }
  const bool streaming = path == MatmulPath::STREAMING ||
                         (path == MatmulPath::AUTO && m <= streaming_max_rows(p.kernel()));
  if (streaming) {
    run_streaming(p.kernel(), w, x, m, bias, y, false, p.i16_decode());
  } else {
    run_blocked(p.kernel(), w, x, m, bias, y);
  }
}

}  // namespace cpu

std::shared_ptr<const Wna16Packed> pack_wna16(const IntWeights& weights) {
  return cpu::pack_wna16_with(cpu::wna16_best_kernel(), weights);
}

void matmul_wna16(const float* x, int64_t m, const Wna16Packed& w, const float* bias, float* y) {
  cpu::matmul_wna16_with(cpu::MatmulPath::AUTO, x, m, w, bias, y);
}

}  // namespace lowbit::kernels
