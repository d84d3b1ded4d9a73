// matmul_w8a8: quantizes the activations once per call (codes, per-row scales, per-group sums of
// the codes), then splits the output rows between OpenMP threads and runs the packed weights'
// kernel on each share.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/w8a8_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels {

namespace cpu {

namespace {

using QuantizeFn = void (*)(const float*, int64_t, int64_t, const Int8Activations&, int64_t,
                            int8_t*, float*);

// Quantizing is ~10 operations per value: below this many values one thread is faster than
// waking a team.
constexpr int64_t kMinParallelQuantize = 64 * 1024;

const detail::W8a8PackedImpl& impl_of(const W8a8Packed& w) {
  const auto* impl = dynamic_cast<const detail::W8a8PackedImpl*>(&w);
  if (impl == nullptr) throw InvalidArgument("matmul_w8a8: weights were not made by pack_w8a8");
  return *impl;
}

void check_activations(const Int8Activations& act) {
  if (act.dynamic) return;
  LOWBIT_CHECK(std::isfinite(act.static_scale) && act.static_scale > 0.0f,
               "matmul_w8a8: static activation scale " + std::to_string(act.static_scale) +
                   " is not finite and positive");
  LOWBIT_CHECK(act.static_zero >= -128 && act.static_zero <= 127,
               "matmul_w8a8: static activation zero point " + std::to_string(act.static_zero) +
                   " is outside [-128, 127]");
}

QuantizeFn quantize_fn(W8a8Kernel kernel) {
  switch (kernel) {
    case W8a8Kernel::AVX512_VNNI:
      return detail::w8a8_quantize_avx512;
    case W8a8Kernel::AVX2:
      return detail::w8a8_quantize_avx2;
    case W8a8Kernel::SCALAR:
      return detail::w8a8_quantize_scalar;
  }
  throw Internal("matmul_w8a8: unknown kernel");
}

// Per-thread buffers for the quantized activations (grown, never shrunk).
struct Scratch {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};
thread_local Scratch t_scratch;

// Runs body(thread, count) on `threads` OpenMP threads (the bodies never throw).
template <typename Body>
void parallel(int threads, Body body) {
  if (threads <= 1) {
    body(0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  body(omp_get_thread_num(), omp_get_num_threads());
}

// Quantizes x into `rows` (whose buffers come from t_scratch) and sums each group of codes.
detail::Int8Rows quantize(W8a8Kernel kernel, const float* x, int64_t m, int64_t k,
                          const Int8Activations& act, int64_t stride, int64_t group_size,
                          int64_t groups) {
  Scratch& s = t_scratch;
  const auto need = static_cast<size_t>(m * stride);
  if (s.codes.size() < need) s.codes.resize(need);
  if (s.scales.size() < static_cast<size_t>(m)) s.scales.resize(static_cast<size_t>(m));
  if (s.sums.size() < static_cast<size_t>(m * groups))
    s.sums.resize(static_cast<size_t>(m * groups));
  const QuantizeFn fn = quantize_fn(kernel);
  const int threads = m * k >= kMinParallelQuantize && !omp_in_parallel()
                          ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), m))
                          : 1;
  parallel(threads, [&](int t, int count) {
    const detail::Range r = detail::split_range(m, count, t, 1);
    if (r.end <= r.begin) return;
    fn(x + r.begin * k, r.end - r.begin, k, act, stride, s.codes.data() + r.begin * stride,
       s.scales.data() + r.begin);
    for (int64_t i = r.begin; i < r.end; ++i) {
      const int8_t* q = s.codes.data() + i * stride;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t sum = 0;
        for (int64_t c = g * group_size, end = std::min(k, c + group_size); c < end; ++c)
          sum += q[c];
        s.sums[static_cast<size_t>(i * groups + g)] = sum;
      }
    }
  });
  detail::Int8Rows rows;
  rows.m = m;
  rows.stride = stride;
  rows.codes = s.codes.data();
  rows.scales = s.scales.data();
  rows.group_sums = s.sums.data();
  rows.zero = act.dynamic ? 0 : act.static_zero;
  return rows;
}

}  // namespace

void quantize_activations_with(W8a8Kernel kernel, const float* x, int64_t m, int64_t k,
                               const Int8Activations& act, int8_t* codes, float* scales) {
  if (!w8a8_kernel_supported(kernel)) {
    throw Unsupported(std::string("quantize_activations: this CPU cannot run ") +
                      w8a8_kernel_name(kernel));
  }
  check_activations(act);
  const int64_t stride = (k + 63) / 64 * 64;
  const detail::Int8Rows rows = quantize(kernel, x, m, k, act, stride, std::max<int64_t>(k, 1), 1);
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(codes + i * k, rows.codes + i * stride, static_cast<size_t>(k));
    scales[i] = rows.scales[i];
  }
}

}  // namespace cpu

void matmul_w8a8(const float* x, int64_t m, const W8a8Packed& w, const Int8Activations& act,
                 const float* bias, float* y) {
  const cpu::detail::W8a8PackedImpl& p = cpu::impl_of(w);
  cpu::check_activations(act);
  LOWBIT_CHECK(m >= 0, "matmul_w8a8: negative m");
  if (m == 0) return;
  LOWBIT_CHECK(x != nullptr && y != nullptr, "matmul_w8a8: null x or y");
  const int64_t n = p.rows(), k = p.cols();
  const cpu::detail::Int8Rows rows =
      cpu::quantize(p.kernel(), x, m, k, act, p.x_stride(), p.group_size(), p.groups());
  const int threads = cpu::detail::matmul_thread_count(m, n, k);
  if (p.kernel() == cpu::W8a8Kernel::SCALAR) {
    const cpu::detail::W8a8Plain plain = p.plain();
    cpu::parallel(threads, [&](int t, int count) {
      cpu::detail::w8a8_rows_scalar(plain, rows, cpu::detail::split_range(n, count, t, 16), bias,
                                    y);
    });
    return;
  }
  const cpu::detail::W8a8Tiles tiles = p.tiles();
  const bool vnni = p.kernel() == cpu::W8a8Kernel::AVX512_VNNI;
  cpu::parallel(threads, [&](int t, int count) {
    const cpu::detail::Range share = cpu::detail::split_range(tiles.tiles, count, t, 1);
    if (share.end <= share.begin) return;
    if (vnni) {
      cpu::detail::w8a8_tiles_avx512(tiles, rows, share, bias, y);
    } else {
      cpu::detail::w8a8_tiles_avx2(tiles, rows, share, bias, y);
    }
  });
}

}  // namespace lowbit::kernels
