// GPTQ as llm-compressor runs it (ALGORITHMS.md §3): Hessian H = 2/n_seq · Σ x xᵀ accumulated from a
// Linear's inputs, then the column loop with lazy block updates, static groups (qparams fitted once
// on the original weight), optional activation order (weight / group), dead-column handling and
// relative damping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lowbit/dtype.h"
#include "quant/scheme/qparams.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// Accumulates Σ (√2·x)(√2·x)ᵀ over input rows [tokens, cols] (√2·x rounded to fp32 as torch does,
// products summed in double over the upper triangle); hessian() returns the full symmetric matrix
// divided by the number of sequences, in fp32 (llm-compressor's accumulate_hessian + prepare_batch).
class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t cols);
  // x: [tokens, cols], all from `sequences` sequences (llm-compressor counts sequences, not tokens).
  void add(const float* x, int64_t tokens, int64_t sequences);
  // Adds another accumulator's sums and counts (data-parallel calibration).
  void merge(const HessianAccumulator& other);
  int64_t cols() const { return cols_; }
  int64_t sequences() const { return sequences_; }
  // [cols, cols], H / n. Throws InvalidArgument when nothing was accumulated.
  std::vector<float> hessian() const;

 private:
  int64_t cols_;
  int64_t sequences_ = 0;
  std::vector<double> sum_;  // lower triangle of Σ (√2x)ᵀ(√2x), in double
};

struct GptqOptions {
  int64_t block_size = 128;
  double dampening_frac = 0.01;
  // llm-compressor falls back to RTN when the Cholesky factorisation fails; lowbit retries with
  // ten times the damping (up to max_damping_retries times) and says so.
  int max_damping_retries = 4;
  // tensor_group (NVFP4) only: the global scale shared by fused layers (q/k/v, gate/up), which
  // llm-compressor's fused observers take from all their weights; 0 = from this weight alone.
  float global_scale = 0.0f;
};

struct GptqResult {
  QParams qparams;              // from args' weight observer (minmax or MSE), fitted once ("static")
  std::vector<int32_t> g_idx;   // actorder=group only: group of each original column
  double loss = 0.0;            // Σ (w-q)²/d²/2, llm-compressor's logged error
  double dampening_used = 0.0;  // the dampening_frac that succeeded
  int retries = 0;
  int64_t dead_columns = 0;     // inputs with diag(H) == 0 (their weights are zeroed)
};

// w: [rows, cols] fp32, replaced by the fake-quantized weight (values on the quantization grid, in
// `compute` precision). h: the Hessian from HessianAccumulator. args.actorder decides the
// permutation (weight: columns by descending diag(H), qparams on the original order; group:
// qparams fitted on the permuted weight and g_idx returned). `compute` is the weight's dtype: the
// observer and the dequantization round to it, the column loop itself runs in fp32 as in
// llm-compressor. Throws InvalidArgument for bad shapes / a non-finite Hessian / a strategy GPTQ
// cannot handle, and Internal if the factorisation fails even after the retries.
GptqResult gptq_quantize(std::vector<float>& w, int64_t rows, int64_t cols, std::vector<float> h,
                         const QuantArgs& args, const GptqOptions& options, DType compute);

}  // namespace lowbit::quant
