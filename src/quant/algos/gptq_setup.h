// The host-side steps of GPTQ around its column loop, shared by the CPU implementation (gptq.cc)
// and the GPU one (src/quant/gpu/gptq_cuda.cu): argument checks, activation order, the static
// qparams and column → group map, the damping's mean diagonal and the retry messages. Both paths
// calling the same code is what makes their qparams, permutations and messages identical.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lowbit/dtype.h"
#include "quant/algos/gptq.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// gptq_quantize's argument checks in its order (InvalidArgument). h_size: how many Hessian values
// were given; h_finite: asked after the size checks whether every Hessian value is finite (a device
// Hessian answers with a reduction).
void check_gptq_inputs(const std::vector<float>& w, int64_t rows, int64_t cols, size_t h_size,
                       const std::function<bool()>& h_finite, const QuantArgs& args,
                       const GptqOptions& options);

// args.actorder, or None (with llm-compressor's warning) for actorder=group without groups.
ActOrder gptq_actorder(const QuantArgs& args);

// H's diagonal from the full row-major [n, n] matrix.
std::vector<float> hessian_diagonal(const std::vector<float>& h, int64_t n);

// apply_activation_ordering: argsort(diag(H), descending); ties keep index order (torch's argsort
// is not stable, but tied columns only ever are dead ones, whose order changes nothing).
std::vector<int64_t> activation_order(const std::vector<float>& diag);

// out[r][k] = w[r][perm[k]].
std::vector<float> permute_columns(const std::vector<float>& w, int64_t rows, int64_t cols,
                                   const std::vector<int64_t>& perm);

// The static qparams (result->qparams), the grid column of each permuted weight column
// (col_group) and, for actorder=group, result->g_idx. `observed` is what the observer sees: the
// permuted weight for actorder=group (groups are consecutive in the permuted order), else the
// original weight.
void fit_gptq_qparams(const float* observed, int64_t rows, int64_t cols, ActOrder act,
                      const std::vector<int64_t>& perm, const QuantArgs& args, DType compute,
                      float global_scale, GptqResult* result, std::vector<int32_t>* col_group);

// mean(diag H) as the damping uses it: summed in double in index order, rounded to fp32.
// h[k * stride] is the k-th diagonal value.
float mean_diagonal(const float* h, int64_t n, int64_t stride);

// The warning before a retry with ten times `frac`, and the failure after the last attempt
// (`last_frac`: the dampening_frac that failed last).
void warn_damping_retry(double frac);
[[noreturn]] void throw_factorization_failed(double last_frac, int retries);

}  // namespace lowbit::quant
