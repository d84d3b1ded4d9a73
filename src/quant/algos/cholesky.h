// Dense symmetric linear algebra for GPTQ, in double precision, blocked and OpenMP-parallel so that
// a 4096-column Hessian is accumulated and factored in seconds on a CPU.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::quant::detail {

// c[i][j] += alpha · Σ_p at[p][i]·at[p][j] for 0 <= j <= i < m (c row-major with leading dimension
// ldc, at row-major [k, m]): the lower triangle of a symmetric rank-k update (BLAS dsyrk).
void syrk_lower(double* c, int64_t ldc, const double* at, int64_t m, int64_t k, double alpha);

// In-place lower Cholesky factor of a (row-major n x n; only the lower triangle is read and
// written). Returns false, leaving `a` partly overwritten, when a pivot is not positive (the matrix
// is not positive definite, or holds NaN) — LAPACK potrf's failure condition.
bool cholesky_lower(double* a, int64_t n);

// In-place inverse of a lower-triangular matrix with a nonzero diagonal (strict upper part is
// ignored on input and zero on output).
void invert_lower(double* l, int64_t n);

// The upper-triangular U with Uᵀ·U = H⁻¹ that GPTQ's column loop uses (torch: cholesky, then
// cholesky_inverse, then cholesky(upper=True)). Computed without forming H⁻¹: with J the reversal
// permutation, J·H·J = M·Mᵀ gives H = K·Kᵀ for the upper K = J·M·J, so U = K⁻¹ = J·M⁻¹·J (unique by
// the positive diagonal). Returns false when H is not positive definite.
bool inverse_upper_cholesky(const std::vector<double>& h, int64_t n, std::vector<float>* u);

}  // namespace lowbit::quant::detail
