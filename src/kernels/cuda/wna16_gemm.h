// Weight-only integer GEMM on the GPU (W4A16 / W8A16): y = x · dequant(W)ᵀ (+ bias) with bf16
// activations x [m, k] and output y [m, n] (raw bf16 bit patterns, row-major), int weights from
// lowbit's canonical kernels::IntWeights (codes [n, k], fp32 scales [n, groups], optional zero
// points, optional GPTQ g_idx), repacked once at load by pack_wna16_for_gpu.
//
// Three paths:
//  STREAM (decode and small batches; AUTO for m <= 64 and, by a bytes-and-FLOPs model, beyond
//    while it beats the others): the packed codes are streamed once per launch of <= 64 rows of
//    x. Each thread copies its share of the codes,
//    scales, zero points and x pieces into a ring of shared memory with cp.async several chunks
//    ahead, turns each code into the exact integer (q - z) as bf16 in registers (lop3 / magic
//    numbers, no table), multiplies on the tensor cores (mma.sync m16n8k16, weights as the 16-row
//    operand, x as the 8-column one, fp32 accumulate) and applies the fp32 scale once per group to
//    the fp32 partial sum. Two kernels share that arithmetic:
//    - m <= 16, the stream kernel (wna16_stream.cu): a block owns 32 output rows; its 1..16 warps
//      split k, each with a private ring (no barrier in the loop), and reduce in shared memory in a
//      fixed order.
//    - 17..64 rows, the block kernel (wna16_block.cu): a block's 4 warps own 128 output rows and
//      walk the same chunks, so x is staged once per block and each x fragment feeds 2 tiles;
//      narrow layers split k over a thread block cluster of <= 8 blocks, reduced through
//      distributed shared memory in a fixed order.
//    Bias and the bf16 rounding at the end. No second kernel, no atomics: deterministic.
//    Accuracy: the products (q - z)·x are exact, so y = Σ_groups s·(Σ (q - z)·x) in fp32 (tensor
//    core accumulation) then rounded once to bf16: |Δ| <= γ(k' + groups + 18)·(Σ|w·x| + |b|) + the
//    bf16 rounding of y (2^-8 relative), with γ(n) ≈ n·2^-22 (the tensor cores may truncate rather
//    than round, several terms at once, while accumulating; the tests use this bound).
//  DEQUANT_GEMM (prefill, AUTO for large m): dequantizes the weights, (q - z)·s in fp32 rounded to
//    bf16, into the workspace (at most kWna16DequantSliceBytes at a time, slices of rows) and calls
//    a cuBLASLt BF16 GEMM (fp32 accumulate, bias epilogue) per slice. Correct and simple; it reads
//    and writes the weights once more than a fused kernel would. Accuracy: as a bf16 model whose
//    weights are bf16((q - z)·s): |Δ| <= 2^-8·Σ|w·x| beyond the above.
//  WGMMA (sm_90a GPUs, H100 / H200; only when asked for: AUTO never takes it): one kernel,
//    wna16_wgmma.cu: each warp dequantizes its tile's codes into the A registers of the warpgroup
//    instruction wgmma, bf16((q - z)·s) as DEQUANT_GEMM does, and multiplies them by x copied into
//    shared memory by TMA, asynchronously; the packed weights are read once per 128 rows of x and
//    never written back. The same weights as DEQUANT_GEMM, so the same accuracy bound (fp32
//    tensor-core accumulation, one bf16 rounding of y). Correct on the H200 but, as it stands,
//    slower than STREAM / DEQUANT_GEMM (bench/NOTES.md, session 30): the start of the kernel the
//    "never slower than bf16 to 128 rows" goal needs. Elsewhere: Unsupported.
//
// Column order. Columns are stably sorted by group (g_idx, GPTQ desc_act) and each group is padded
// with zero columns to a common length L (a multiple of 16; L <= 32 or a multiple of 64), so that
// every 16-column step of the tensor core lies in one group; the total is padded to a multiple of
// 64. When that order is not the identity (g_idx, a group size not a multiple of 16 or a k not a
// multiple of 64), x is gathered into that order (zero padding) in the workspace by a small kernel
// first: the sum is the same, permuted.
//
// Requirements: bits 4 or 8 (others: Unsupported); any n, k, group size (> 0) and g_idx. x must be
// 16-byte aligned (cudaMalloc'd rows with k % 8 == 0 are); y and bias 2-byte aligned. All calls are
// asynchronous on `stream`, allocate nothing and never synchronize; the workspace (device memory,
// at least wna16_workspace_bytes) is scratch, needs no initialization, and is in use until the
// stream passes the call. Calls with the same weights may run concurrently on different streams
// (with different workspaces).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/quant_weights.h"

namespace lowbit::kernels::cuda {

enum class Wna16GpuPath : uint8_t { AUTO, STREAM, DEQUANT_GEMM, WGMMA };

// The packed layout's shape (see wna16_internal.h for the byte layout).
struct Wna16GpuLayout {
  int bits = 4;
  int64_t n = 0;               // output features (rows of W)
  int64_t k = 0;               // input features (columns of x)
  int64_t group_size = 0;      // as IntWeights (== k for per-channel scales)
  bool has_zeros = false;      // asymmetric: zero points stored; else 2^(bits-1)
  bool gather_x = false;       // x is permuted / padded into the workspace first
  int64_t tiles = 0;           // 16-row tiles, an even number: rows padded to 32
  int64_t chunks = 0;          // 64-column chunks: padded k' = 64 · chunks
  int64_t padded_groups = 0;   // scale entries per tile (= k' / L)
  int64_t steps_per_group = 1; // L / 16: 1, 2 or a multiple of 4
  int64_t padded_cols() const { return chunks * 64; }
};

// Device copy of the packed weights; owns its memory (move-only). Immutable after packing.
struct Wna16GpuWeights {
  Wna16GpuLayout layout;
  DeviceBuffer<uint32_t> codes;      // [tiles][chunks][bits/4][32 lanes][4 words]
  DeviceBuffer<float> scales;        // [tiles][padded_groups][8][2]
  DeviceBuffer<uint8_t> zeros;       // [tiles][padded_groups][8][2]; empty when symmetric
  DeviceBuffer<int32_t> column_of;   // [k']: x column of packed column p, -1 = zero; empty unless gather_x

  size_t device_bytes() const {
    return codes.bytes() + scales.bytes() + zeros.bytes() + column_of.bytes();
  }
};

// Checks and repacks on the host, uploads once (synchronously). Throws InvalidArgument for
// inconsistent weights (sizes, codes or zeros out of range, g_idx out of [0, groups), group_size
// <= 0) and Unsupported for bits other than 4 and 8.
Wna16GpuWeights pack_wna16_for_gpu(const IntWeights& weights);

// What AUTO runs for m rows.
Wna16GpuPath wna16_auto_path(int64_t m, const Wna16GpuWeights& weights);

// Scratch bytes wna16_gemm needs for m rows on `path` (0 when none).
size_t wna16_workspace_bytes(int64_t m, const Wna16GpuWeights& weights,
                             Wna16GpuPath path = Wna16GpuPath::AUTO);

// y [m, n] = x [m, k] · dequant(W)ᵀ + bias [n] (bias may be null). m == 0 does nothing.
// Throws InvalidArgument for a null or misaligned pointer or a short workspace.
void wna16_gemm(const uint16_t* x_bf16, int64_t m, const Wna16GpuWeights& weights, uint16_t* y_bf16,
                void* workspace, size_t workspace_bytes, cudaStream_t stream,
                const uint16_t* bias_bf16 = nullptr, Wna16GpuPath path = Wna16GpuPath::AUTO);

// y [m, n] (fp32, unrounded) = x · dequant(W)ᵀ + bias [n] (fp32, may be null): the LM head of a
// checkpoint that quantized it, whose logits sampling wants in fp32. Always the STREAM path (in
// launches of 64 rows: a decode step's rows, or the last row of each prefilled sequence); the
// accuracy is STREAM's without the final bf16 rounding. Workspace: wna16_workspace_bytes(m, w,
// STREAM). Same argument errors as wna16_gemm (y 4-byte aligned).
void wna16_gemm_f32out(const uint16_t* x_bf16, int64_t m, const Wna16GpuWeights& weights, float* y,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const float* bias = nullptr);

}  // namespace lowbit::kernels::cuda
