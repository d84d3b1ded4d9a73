// Internal to the GPU weight-only GEMM (wna16_gemm.h): the packed byte layout, the host-side
// packer (tests read its output), and the launchers of the kernels in wna16_stream.cu and
// wna16_gemm.cu. Host-compilable.
//
// Packed layout. Rows are cut into 16-row tiles (the A operand of mma.sync.m16n8k16), columns
// (in the padded group order of wna16_gemm.h) into 64-column chunks of four 16-column steps. In a
// tile, lane l of a warp (g = l / 4, t = l % 4) needs, for each step s, the fragment
//   rows r0 = 16·tile + g and r1 = r0 + 8, packed columns p = 64·chunk + 16·s + 4·t + {0, 1, 2, 3}
// (the 4·t + j order inside a step is a permutation of the mma's k index, so that the matching x
// fragment is 4 consecutive bf16 values: one 8-byte load). Each lane's codes of one (tile, chunk)
// are 16 bytes per 4 bits:
//   4-bit: codes[(tile·chunks + chunk)·32 + lane] is a uint4 whose word s holds step s, nibble j
//          (bits 4j..4j+3) = code(row j & 1 ? r1 : r0, column p + 2·((j >> 1) & 1) + (j >> 2)),
//          so that (w >> 4i) & 0x000F000F holds the bf16x2 register a_i of the mma (i = 0..3).
//   8-bit: two uint4, codes[((tile·chunks + chunk)·2 + h)·32 + lane], h = s / 2; word
//          2·(s % 2) + u holds byte b = code(row b >> 1 ? r1 : r0, column p + 2·u + (b & 1)).
// A warp's load of one uint4 is 512 contiguous bytes, and a tile's chunks follow each other.
// Scales: scales[((tile·padded_groups + group)·8 + g)·2 + {0, 1}] = scale of rows r0, r1 (fp32);
// zero points alike as bytes. Padding rows and phantom groups have scale 0; padding columns have
// code 0 and meet x = 0.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/wna16_gemm.h"

namespace lowbit::kernels::cuda::detail {

constexpr int kWna16TileRows = 16;
constexpr int kWna16ChunkCols = 64;
constexpr int kWna16StepCols = 16;
constexpr int64_t kWna16StreamMaxRows = 64;     // rows of x per STREAM-path launch
constexpr int64_t kWna16StreamKernelRows = 16;  // stream kernel up to here, then block kernel
constexpr int64_t kWna16BlockTiles = 8;         // 16-row tiles of one block of the block kernel
constexpr size_t kWna16DequantSliceBytes = size_t{64} << 20;  // bf16 weights dequantized at once
constexpr size_t kWna16LtWorkspaceBytes = size_t{8} << 20;    // cuBLASLt's own scratch

struct Wna16HostPacked {
  Wna16GpuLayout layout;
  std::vector<uint32_t> codes;
  std::vector<float> scales;
  std::vector<uint8_t> zeros;      // empty when symmetric
  std::vector<int32_t> column_of;  // [k'], -1 = padding; empty when the order is the identity
};

// Validates and packs (the host half of pack_wna16_for_gpu).
Wna16HostPacked pack_wna16_host(const IntWeights& weights);

// The STREAM path on rows [0, m) of x (m <= kWna16StreamMaxRows): the stream kernel
// (wna16_stream.cu) for m <= kWna16StreamKernelRows, else the block kernel (wna16_block.cu). x:
// [m, ldx] in packed column order (ldx >= k'), 16-byte aligned rows. split_override > 0 forces the
// k split (stream kernel: warps per block; block kernel: blocks per cluster; the benchmark's
// sweeps), else it is chosen from the shape and the device.
void launch_wna16_stream(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                         const uint16_t* bias, uint16_t* y, cudaStream_t stream, int split_override = 0);
// The same with fp32 bias (optional) and fp32 output y [m, n], unrounded.
void launch_wna16_stream_f32(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                             const float* bias, float* y, cudaStream_t stream);
// Both: bf16 bias / y, or (y_f32 non-null) fp32 ones.
void launch_wna16_stream_any(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                             const uint16_t* bias, uint16_t* y, const float* bias_f32, float* y_f32,
                             cudaStream_t stream, int split_override);

// The WGMMA path (wna16_wgmma.cu) on rows [0, m) of x, any m >= 1: x [m, ldx] in the wgmma k order
// (launch_wna16_wgmma_x), 16-byte aligned rows; y and bias as launch_wna16_stream. Throws
// Unsupported unless wna16_wgmma_available().
void launch_wna16_wgmma(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                        const uint16_t* bias, uint16_t* y, cudaStream_t stream,
                        int split_override = 0);
// xw [m, k'] = x [m, k] in the wgmma kernel's k order (the layout's gather and padding included).
void launch_wna16_wgmma_x(const uint16_t* x, int64_t m, const Wna16GpuWeights& w, uint16_t* xw,
                          cudaStream_t stream);
// Whether the current device runs the wgmma kernel: an sm_90 GPU (H100 / H200) and a build with
// sm_90a code (the default CMAKE_CUDA_ARCHITECTURES).
bool wna16_wgmma_available();

// Shares of k the block kernel splits `blocks` row blocks of `chunks` chunks into (its cluster
// size, 1..8): double while the doubled grid still fits in one wave of `resident` blocks and each
// share keeps >= 8 chunks (a ring's ramp is ~D chunks); 8 is the portable cluster size.
int wna16_block_splits(int64_t blocks, int64_t chunks, int64_t resident);

// bf16 W rows [tile0·16, (tile0 + tiles)·16) dequantized into dst [tiles·16, k'] (row-major).
void launch_wna16_dequant(const Wna16GpuWeights& w, int64_t tile0, int64_t tiles, uint16_t* dst,
                          cudaStream_t stream);

// x [m, k] → xp [m, k'] in packed column order (zero padding).
void launch_wna16_gather(const uint16_t* x, int64_t m, const Wna16GpuWeights& w, uint16_t* xp,
                         cudaStream_t stream);

// D [m, n] (row stride ldd) = X [m, k] (row stride ldx) · W [n, k]ᵀ (row stride ldw) + bias [n]
// (may be null), bf16 in and out, fp32 accumulate, one cuBLASLt call. workspace: cuBLASLt's
// scratch (kWna16LtWorkspaceBytes is plenty). Also used by the benchmark as the bf16 baseline.
void lt_bf16_gemm(const uint16_t* x, int64_t ldx, int64_t m, const uint16_t* w, int64_t ldw,
                  int64_t n, int64_t k, const uint16_t* bias, uint16_t* d, int64_t ldd,
                  void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace lowbit::kernels::cuda::detail
