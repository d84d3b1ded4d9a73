// The two matmul paths without their ISA-specific inner loops: how work is split between OpenMP
// threads and, for the blocked path, how k and n are blocked so packed operands stay in cache.
#include <omp.h>

#include <algorithm>
#include <exception>

#include "kernels/cpu/matmul_kernels.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cpu::detail {

namespace {

// One thread's share of the blocked path: rows m_range of x against rows n_range of W.
void blocked_share(const MatmulArgs& a, const BlockedKernel& kern, Range m_range, Range n_range) {
  const int64_t rows = m_range.end - m_range.begin;
  if (rows <= 0 || n_range.end <= n_range.begin) return;
  const int64_t slivers = (rows + kern.mr - 1) / kern.mr;
  float* xs = thread_scratch(0, static_cast<size_t>(slivers * kern.mr * kern.kc));
  float* wp = thread_scratch(1, static_cast<size_t>(kern.nc * kern.kc));
  for (int64_t k0 = 0; k0 < a.k; k0 += kern.kc) {
    const int64_t kc = std::min(kern.kc, a.k - k0);
    const bool first = k0 == 0;
    (kern.pack_x ? kern.pack_x : pack_activation_slivers)(a, m_range.begin, rows, k0, kc, kern.mr, xs);
    for (int64_t n0 = n_range.begin; n0 < n_range.end; n0 += kern.nc) {
      const int64_t nc = std::min(kern.nc, n_range.end - n0);
      (kern.pack ? kern.pack : pack_weight_panels)(a, n0, nc, k0, kc, kern.nr, wp);
      for (int64_t s = 0; s < slivers; ++s) {
        const int64_t i0 = m_range.begin + s * kern.mr;
        const int sliver_rows = static_cast<int>(std::min<int64_t>(kern.mr, m_range.end - i0));
        const float* x_sliver = xs + s * kern.mr * kc;
        for (int64_t j = 0; j < nc; j += kern.nr) {
          // Panel j / nr of the packed block starts at (j / nr) · kc · nr = j · kc.
          kern.micro(x_sliver, wp + j * kc, kc, a.y + i0 * a.n + n0 + j, a.n, sliver_rows, nc - j,
                     a.bias ? a.bias + n0 + j : nullptr, first);
        }
      }
    }
  }
}

// Runs body(thread, count) on `threads` OpenMP threads; an exception in any of them (the only
// source is scratch allocation) is rethrown here instead of terminating the process.
template <typename Body>
void parallel(int threads, Body body) {
  if (threads == 1) {
    body(0, 1);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    try {
      body(omp_get_thread_num(), omp_get_num_threads());
    } catch (...) {
#pragma omp critical(lowbit_matmul_error)
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

void run_blocked(const MatmulArgs& args, const BlockedKernel& kernel) {
  if (kernel.nc % kernel.nr != 0) throw Internal("matmul: nc is not a multiple of nr");
  const int threads = matmul_thread_count(args.m, args.n, args.k);
  // Split W's rows when every thread gets at least one panel (each weight decoded once overall);
  // otherwise split x's rows (each thread decodes all of the few weights). Under the W split every
  // thread packs all of x, so x's rows are split too when x is much taller than W is wide (m >= 4n:
  // a calibration pass over 64k tokens packed 100 MB of x per thread and product); then W's
  // packing is the one repeated, the smaller even for decoded weights. Both splits give each
  // output the same arithmetic.
  const bool split_n = (args.n + kernel.nr - 1) / kernel.nr >= threads && args.m < 4 * args.n;
  parallel(threads, [&](int t, int count) {
    if (split_n) {
      blocked_share(args, kernel, Range{0, args.m}, split_range(args.n, count, t, kernel.nr));
    } else {
      blocked_share(args, kernel, split_range(args.m, count, t, kernel.mr), Range{0, args.n});
    }
  });
}

void run_streaming(const MatmulArgs& args, int chunk, bool deinterleave, StreamingRows rows_fn) {
  const int64_t padded_k = (args.k + chunk - 1) / chunk * chunk;
  float* xp = thread_scratch(2, static_cast<size_t>(args.m * padded_k));
  pack_activation_rows(args, 0, args.m, chunk, deinterleave, padded_k, xp);
  parallel(matmul_thread_count(args.m, args.n, args.k), [&](int t, int count) {
    // 16 rows = one 64-byte line of y: threads never share a line they write.
    rows_fn(args, split_range(args.n, count, t, 16), xp, padded_k);
  });
}

}  // namespace lowbit::kernels::cpu::detail
