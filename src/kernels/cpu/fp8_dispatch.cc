// matmul_fp8: splits the output rows between OpenMP threads and runs the packed weights' kernel
// (the streaming or the blocked path by m), then marks the rows whose weights hold a NaN code.
#include <omp.h>

#include <cmath>
#include <string>

#include "kernels/cpu/fp8_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels {

namespace cpu {

namespace {

// Up to this many rows of x the tiled kernels decode weights in registers for each group of up
// to 4 rows (the streaming path); beyond, decoding each block of W once into fp32 panels (the
// blocked path) wins. Crossovers measured at 1 thread on Zen 4, 1024×2048 (bench/NOTES.md): AVX-512
// streaming holds ~86 GFLOP/cpu-s up to m = 16 and the blocked path passes it between 16 and 32;
// AVX2 streaming (per-weight scale multiply, 16 registers) stays at ~46 and falls behind at m = 8.
int64_t streaming_max_rows(Fp8Kernel kernel) { return kernel == Fp8Kernel::AVX512 ? 16 : 4; }

const detail::Fp8PackedImpl& impl_of(const Fp8Packed& w) {
  const auto* impl = dynamic_cast<const detail::Fp8PackedImpl*>(&w);
  if (impl == nullptr) throw InvalidArgument("matmul_fp8: weights were not made by pack_fp8");
  return *impl;
}

template <typename Body>
void parallel(int threads, Body body) {
  if (threads <= 1) {
    body(0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  body(omp_get_thread_num(), omp_get_num_threads());
}

void run(const detail::Fp8PackedImpl& p, MatmulPath path, const float* x, int64_t m,
         const float* bias, float* y) {
  const int64_t n = p.rows(), k = p.cols();
  const int threads = detail::matmul_thread_count(m, n, k);
  switch (p.kernel()) {
    case Fp8Kernel::SCALAR: {
      const detail::Fp8Plain plain = p.plain();
      parallel(threads, [&](int t, int count) {
        detail::fp8_rows_scalar(plain, x, m, detail::split_range(n, count, t, 16), bias, y);
      });
      return;
    }
    case Fp8Kernel::AVX2:
    case Fp8Kernel::AVX512: {
      const bool avx512 = p.kernel() == Fp8Kernel::AVX512;
      const detail::Fp8Tiles tiles = p.tiles();
      const bool streaming = path == MatmulPath::STREAMING ||
                             (path == MatmulPath::AUTO && m <= streaming_max_rows(p.kernel()));
      if (!streaming) {
        avx512 ? detail::fp8_blocked_avx512(tiles, x, m, bias, y)
               : detail::fp8_blocked_avx2(tiles, x, m, bias, y);
        return;
      }
      parallel(threads, [&](int t, int count) {
        const detail::Range share = detail::split_range(tiles.tiles, count, t, 1);
        avx512 ? detail::fp8_stream_avx512(tiles, x, m, share, bias, y)
               : detail::fp8_stream_avx2(tiles, x, m, share, bias, y);
      });
      return;
    }
  }
  throw Internal("matmul_fp8: unknown kernel");
}

}  // namespace

void matmul_fp8_with(MatmulPath path, const float* x, int64_t m, const Fp8Packed& w,
                     const float* bias, float* y) {
  const detail::Fp8PackedImpl& p = impl_of(w);
  LOWBIT_CHECK(m >= 0, "matmul_fp8: negative m");
  if (m == 0) return;
  LOWBIT_CHECK(x != nullptr && y != nullptr, "matmul_fp8: null x or y");
  run(p, path, x, m, bias, y);
  for (int64_t r : p.nan_rows()) {  // NaN · x is NaN whatever x is, as in ref
    for (int64_t i = 0; i < m; ++i) y[i * p.rows() + r] = NAN;
  }
}

}  // namespace cpu

void matmul_fp8(const float* x, int64_t m, const Fp8Packed& w, const float* bias, float* y) {
  cpu::matmul_fp8_with(cpu::MatmulPath::AUTO, x, m, w, bias, y);
}

}  // namespace lowbit::kernels
