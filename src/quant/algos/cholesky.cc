#include "quant/algos/cholesky.h"

#include <algorithm>
#include <cmath>

namespace lowbit::quant::detail {

namespace {

constexpr int64_t kBlock = 64;  // panel width of the blocked algorithms
constexpr int64_t kRows = 4;    // rows updated together (each loaded operand used four times)

inline double dot(const double* x, const double* y, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t p = 0; p < n; ++p) s += x[p] * y[p];
  return s;
}

// Unblocked factorization of the diagonal block [k0, k1): earlier blocks are already subtracted.
bool factor_diagonal(double* a, int64_t n, int64_t k0, int64_t k1) {
  for (int64_t j = k0; j < k1; ++j) {
    double* rj = a + j * n;
    const double d = rj[j] - dot(rj + k0, rj + k0, j - k0);
    if (!(d > 0.0)) return false;
    rj[j] = std::sqrt(d);
    for (int64_t i = j + 1; i < k1; ++i) {
      double* ri = a + i * n;
      ri[j] = (ri[j] - dot(ri + k0, rj + k0, j - k0)) / rj[j];
    }
  }
  return true;
}

// rows[q][j] += coef[q] · t[j] for j in [j0, j1), four rows at once.
inline void axpy4(double* const* rows, const double* coef, const double* t, int64_t j0,
                  int64_t j1) {
  double* r0 = rows[0];
  double* r1 = rows[1];
  double* r2 = rows[2];
  double* r3 = rows[3];
  const double c0 = coef[0], c1 = coef[1], c2 = coef[2], c3 = coef[3];
#pragma omp simd
  for (int64_t j = j0; j < j1; ++j) {
    r0[j] += c0 * t[j];
    r1[j] += c1 * t[j];
    r2[j] += c2 * t[j];
    r3[j] += c3 * t[j];
  }
}

}  // namespace

void syrk_lower(double* c, int64_t ldc, const double* at, int64_t m, int64_t k, double alpha) {
  constexpr int64_t kChunk = 256;
  const int64_t row_blocks = (m + kRows - 1) / kRows;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t i0 = rb * kRows, nr = std::min(kRows, m - i0);
    double* rows[kRows];
    for (int64_t q = 0; q < kRows; ++q) rows[q] = c + (i0 + q) * ldc;
    double coef[kRows];
    if (nr == kRows) {
      // Columns [0, i0] lie in the triangle for every row of the block; chunks stay in L1.
      for (int64_t j0 = 0; j0 <= i0; j0 += kChunk) {
        const int64_t j1 = std::min(j0 + kChunk, i0 + 1);
        for (int64_t p = 0; p < k; ++p) {
          const double* t = at + p * m;
          for (int64_t q = 0; q < kRows; ++q) coef[q] = alpha * t[i0 + q];
          axpy4(rows, coef, t, j0, j1);
        }
      }
    }
    // Whatever the four-row kernel did not cover: the small triangle right of column i0, or all
    // of a last partial block.
    for (int64_t q = 0; q < nr; ++q) {
      const int64_t i = i0 + q, jstart = nr == kRows ? i0 + 1 : 0;
      for (int64_t j = jstart; j <= i; ++j) {
        double s = 0.0;
        for (int64_t p = 0; p < k; ++p) s += at[p * m + i] * at[p * m + j];
        rows[q][j] += alpha * s;
      }
    }
  }
}

bool cholesky_lower(double* a, int64_t n) {
  std::vector<double> pt;
  for (int64_t k0 = 0; k0 < n; k0 += kBlock) {
    const int64_t k1 = std::min(k0 + kBlock, n);
    if (!factor_diagonal(a, n, k0, k1)) return false;
    // Panel below the diagonal block: forward substitution against it, row by row.
#pragma omp parallel for schedule(static)
    for (int64_t i = k1; i < n; ++i) {
      double* ri = a + i * n;
      for (int64_t j = k0; j < k1; ++j) {
        const double* rj = a + j * n;
        ri[j] = (ri[j] - dot(ri + k0, rj + k0, j - k0)) / rj[j];
      }
    }
    // Trailing lower triangle: A[k1:, k1:] -= P·Pᵀ with P = L[k1:, k0:k1], packed transposed.
    const int64_t b = k1 - k0, m = n - k1;
    if (m == 0) break;
    pt.resize(static_cast<size_t>(b * m));
    for (int64_t j = 0; j < m; ++j)
      for (int64_t p = 0; p < b; ++p) pt[p * m + j] = a[(k1 + j) * n + k0 + p];
    syrk_lower(a + k1 * n + k1, n, pt.data(), m, b, -1.0);
  }
  return true;
}

void invert_lower(double* l, int64_t n) {
  // Row blocks top to bottom: X[i] = (e_i - Σ_{k<i} L[i][k]·X[k]) / L[i][i]. For a block of rows,
  // the Σ over the rows k above the block is a product with final rows of X (four rows of the
  // block at a time, along contiguous chunks of j; X[k][j] = 0 for j > k); the Σ over the block's
  // own rows follows row by row, in parallel over column chunks.
  std::vector<double> x(static_cast<size_t>(n * n), 0.0);
  constexpr int64_t kChunk = 128;
  for (int64_t r0 = 0; r0 < n; r0 += kBlock) {
    const int64_t r1 = std::min(r0 + kBlock, n);
    const int64_t groups = (r1 - r0 + kRows - 1) / kRows, chunks = (r0 + kChunk - 1) / kChunk;
    // Per column chunk: X's rows k in slices of kBlock, each slice used by all row groups while
    // it is in cache.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t j0 = ch * kChunk, j1 = std::min(j0 + kChunk, r0);
      for (int64_t k0 = j0; k0 < r0; k0 += kBlock) {
        const int64_t k1 = std::min(k0 + kBlock, r0);
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t i0 = r0 + g * kRows, nr = std::min(kRows, r1 - i0);
          double* rows[kRows];
          double coef[kRows];
          for (int64_t q = 0; q < kRows; ++q) rows[q] = x.data() + (i0 + std::min(q, nr - 1)) * n;
          for (int64_t k = k0; k < k1; ++k) {
            const double* t = x.data() + k * n;
            const int64_t jend = std::min(j1, k + 1);
            if (nr == kRows) {
              for (int64_t q = 0; q < kRows; ++q) coef[q] = -l[(i0 + q) * n + k];
              axpy4(rows, coef, t, j0, jend);
            } else {
              for (int64_t q = 0; q < nr; ++q)
                for (int64_t j = j0; j < jend; ++j) rows[q][j] -= l[(i0 + q) * n + k] * t[j];
            }
          }
        }
      }
    }
    const int64_t all_chunks = (r1 + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < all_chunks; ++ch) {
      const int64_t j0 = ch * kChunk, j1 = std::min(j0 + kChunk, r1);
      for (int64_t i = r0; i < r1; ++i) {
        double* xi = x.data() + i * n;
        for (int64_t k = r0; k < i; ++k) {
          const double m = l[i * n + k];
          const double* xk = x.data() + k * n;
          const int64_t jend = std::min(j1, k + 1);
#pragma omp simd
          for (int64_t j = j0; j < jend; ++j) xi[j] -= m * xk[j];
        }
        if (i >= j0 && i < j1) xi[i] += 1.0;
        const double d = l[i * n + i];
        for (int64_t j = j0; j < std::min(j1, i + 1); ++j) xi[j] /= d;
      }
    }
  }
  std::copy(x.begin(), x.end(), l);
}

bool inverse_upper_cholesky(const std::vector<double>& h, int64_t n, std::vector<float>* u) {
  std::vector<double> a(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) a[i * n + j] = h[(n - 1 - i) * n + (n - 1 - j)];
  if (!cholesky_lower(a.data(), n)) return false;
  invert_lower(a.data(), n);
  u->assign(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j)
      (*u)[i * n + j] = static_cast<float>(a[(n - 1 - i) * n + (n - 1 - j)]);
  return true;
}

}  // namespace lowbit::quant::detail
