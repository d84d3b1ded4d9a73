// The block kernel of the GPU weight-only GEMM: 17..64 rows of x per launch (the STREAM path of
// wna16_gemm.h above 16 rows), on the packed layout of wna16_internal.h and with the stream
// kernel's arithmetic (exact (q - z)·x products on mma.sync, fp32 partial sums scaled once per
// group), so both meet the same accuracy bound.
//
// Why a second kernel. The stream kernel (wna16_stream.cu) gives each warp a private ring holding
// its own copy of the x chunk, and its warps split k. That is right for a few rows of x (128 B per
// row and chunk against 1 KB of codes per warp), but at 32-64 rows each warp copies 4-8 KB of x
// from L2 per KB of codes and multiplies every x fragment it loads into only two tiles: the rows
// of x, not the weights, bound it (measured on the H200: 0.5-0.7x a bf16 GEMM at 32-64 rows).
// Here the kWarps warps of a block own different rows (kTilesPerWarp tiles each) and walk the same
// chunks of k: x is copied into shared memory once per block and stage, and each x fragment feeds
// kWarps·kTilesPerWarp tiles' products. One barrier per chunk (x pieces are copied by every warp)
// replaces the warp-private rings' __syncwarp.
//
// Work split. Block (b, q) owns tiles [8b, 8b + 8) (128 output rows) and the q-th of S contiguous
// shares of the chunks. S (1..8, chosen so that narrow layers still fill the GPU: o and down have
// only 32 row blocks) blocks of one row block form a thread block cluster: at the end each holds
// its partial sums in shared memory and, after a cluster barrier, block q adds up the q-th S-th of
// the outputs over the S blocks' shared memory (distributed shared memory, sm_90) in block order
// and stores them: deterministic, no atomics, no workspace, no second kernel. With S = 1 every
// warp stores its own outputs. Warps whose tiles lie past the last one copy x for the others and
// skip their own work.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wna16_device.cuh"
#include "kernels/cuda/wna16_internal.h"
#include "kernels/cuda/wna16_kernel_common.cuh"

namespace lowbit::kernels::cuda::detail {

namespace {

// Two tiles per warp: each x fragment loaded from shared memory feeds 2·MT products. Measured on
// the H200 against one tile per warp with twice the warps (8 per block, 16 per SM at <= 128
// registers): that was 1.1-1.5x slower at 32-64 rows (bench/NOTES.md, session 28), so the shared
// memory loads and the dequantization per product, not the warps in flight, bound this kernel.
constexpr int kTilesPerWarp = 2;
constexpr int kWarps = 4;
constexpr int kBlockTiles = kWarps * kTilesPerWarp;
static_assert(kBlockTiles == kWna16BlockTiles, "wna16_internal.h's block size");

// One stage: x [8·MT rows][8 pieces of 16 B] (swizzled as in the stream kernel), then per warp its
// codes [R·V][32 lanes] uint4, scales [R·GPC][8 row pairs] float2, zero points [R·GPC][16] bytes.
__host__ __device__ constexpr int warp_stage_bytes(int bits, int gpc) {
  return kTilesPerWarp * (bits / 4) * 512 + kTilesPerWarp * gpc * 80;
}
__host__ __device__ constexpr int block_stage_bytes(int bits, int mt, int gpc) {
  return 8 * mt * 128 + kWarps * warp_stage_bytes(bits, gpc);
}

template <int BITS, int MT, int D, int GPC>
__global__ void __launch_bounds__(kWarps * 32, 1) wna16_block_kernel(const Wna16KernelParams p) {
  constexpr int V = BITS / 4, R = kTilesPerWarp, XROWS = 8 * MT;
  constexpr int kWarpBytes = warp_stage_bytes(BITS, GPC);
  constexpr int kStage = block_stage_bytes(BITS, MT, GPC);
  constexpr int kScaleOff = R * V * 512, kZeroOff = kScaleOff + R * GPC * 64;
  constexpr int kXPieces = XROWS * 8 / (kWarps * 32);  // 16-byte x pieces each thread copies per stage
  static_assert(MT >= 2 && kXPieces * kWarps * 32 == XROWS * 8, "x pieces per thread");
  static_assert(kZeroOff + R * GPC * 16 == kWarpBytes, "stage layout");
  extern __shared__ __align__(16) unsigned char smem[];

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kBlockTiles + warp * R;
  const int splits = static_cast<int>(gridDim.y), share = static_cast<int>(blockIdx.y);
  const int c_begin = static_cast<int>(static_cast<int64_t>(share) * p.chunks / splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(share + 1) * p.chunks / splits);
  const int first_group = GPC == 1 ? c_begin / p.chunks_per_group : c_begin * GPC;
  const bool live = tile0 < p.tiles;  // tiles is even: both of the warp's tiles exist
  const auto smem_s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t warp_s = smem_s + XROWS * 128 + warp * kWarpBytes;

  const uint4* code_ptr[R];
  const float2* scale_ptr[R];
  const uint32_t* zero_ptr[R];
  const bool copies_scale = live && lane < 8, copies_zero = live && lane < 4;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t tile = live ? tile0 + r : 0;
    code_ptr[r] = p.codes + (tile * p.chunks + c_begin) * V * 32 + lane;
    const int64_t e = (tile * p.padded_groups + first_group) * 8;
    scale_ptr[r] = p.scales + e + (lane & 7);
    zero_ptr[r] = p.zeros ? p.zeros + (e >> 1) + (lane & 3) : nullptr;
  }
  if (live && (lane & 7) == 0) {  // the first chunks into L2 while the previous kernel ends (PDL)
#pragma unroll
    for (int d = 0; d < D - 1; ++d) {
      if (c_begin + d < c_end) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int v = 0; v < V; ++v) prefetch_l2(code_ptr[r] + (d * V + v) * 32);
      }
    }
  }
  pdl_wait();
  const bool has_zeros = p.zeros != nullptr;
  const int zero_shift = (g & 1) * 16;

  // x piece c of this thread: row tid / 8 + kPassRows·c, piece column tid % 8 (its swizzle depends
  // on the row's low three bits only, the same for every c).
  const int xr0 = tid >> 3, xj = tid & 7;
  const uint16_t* x_ptr = p.x + static_cast<int64_t>(xr0) * p.ldx + xj * 8 + static_cast<int64_t>(c_begin) * 64;
  constexpr int kPassRows = kWarps * 4;  // x rows one pass of the block's threads copies
  const int64_t x_step = kPassRows * p.ldx;
  uint32_t x_live = 0;
#pragma unroll
  for (int c = 0; c < kXPieces; ++c) {
    if (xr0 + kPassRows * c < p.m) x_live |= 1u << c;
  }
  const uint32_t x_dst = opaque(smem_s + xr0 * 128 + ((xj ^ (xr0 & 7)) << 4));
  // Rows >= m of the x tile are never written: their garbage reaches only output columns >= m of
  // the mma, which are not stored (the products of different columns never mix).
  uint32_t xrd_s[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    xrd_s[s] = opaque(smem_s + g * 128 + (((2 * s + (t >> 1)) ^ g) << 4) + ((t & 1) << 3));
  }
  const uint32_t code_s = opaque(warp_s + lane * 16);
  const uint32_t scale_dst = opaque(warp_s + kScaleOff + (lane & 7) * 8), scale_s = opaque(warp_s + kScaleOff + g * 8);
  const uint32_t zero_dst = opaque(warp_s + kZeroOff + (lane & 3) * 4), zero_s = opaque(warp_s + kZeroOff + (g >> 1) * 4);

  // GPC == 1: chunks left in the group of the next chunk to issue / to process.
  int issue_left = p.chunks_per_group - c_begin % p.chunks_per_group, process_left = issue_left;
  auto issue = [&](uint32_t st) {  // st: the stage's byte offset
#pragma unroll
    for (int c = 0; c < kXPieces; ++c) {
      if (x_live & (1u << c)) cp_async_ca16(x_dst + st + c * kPassRows * 128, x_ptr + c * x_step);
    }
    x_ptr += 64;
    if (live) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int v = 0; v < V; ++v) cp_async_cg16(code_s + st + (r * V + v) * 512, code_ptr[r] + v * 32);
        code_ptr[r] += V * 32;
#pragma unroll
        for (int j = 0; j < GPC; ++j) {
          if (copies_scale) cp_async_ca8(scale_dst + st + (r * GPC + j) * 64, scale_ptr[r] + j * 8);
          if (has_zeros && copies_zero) cp_async_ca4(zero_dst + st + (r * GPC + j) * 16, zero_ptr[r] + j * 4);
        }
      }
    }
    bool next_group = true;
    if constexpr (GPC == 1) {
      next_group = --issue_left == 0;
      if (next_group) issue_left = p.chunks_per_group;
    }
    if (next_group) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        scale_ptr[r] += GPC * 8;
        if (has_zeros) zero_ptr[r] += GPC * 4;
      }
    }
  };

  Wna16ChunkMultiplier<BITS, R, MT, GPC> mul(p.zero_pair);
  // Multiplies the chunk c held in stage st (the stage's byte offset in the ring).
  auto consume = [&](uint32_t st, int c) {
    bool group_ends = false;
    if constexpr (GPC == 1) {
      group_ends = process_left == 1 || c + 1 == c_end;
      if (--process_left == 0) process_left = p.chunks_per_group;
    }
    mul.consume(st, code_s, scale_s, zero_s, zero_shift, has_zeros, xrd_s, group_ends);
  };

  // Chunk c lives in stage c % D; D - 1 stages are in flight while one is multiplied. The barrier
  // makes every thread's pieces of chunk c visible and retires the stage refilled next (read in
  // the previous turn).
#pragma unroll
  for (int d = 0; d < D - 1; ++d) {
    if (c_begin + d < c_end) issue(d * kStage);
    cp_async_commit();
  }
  for (int c0 = c_begin; c0 < c_end; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int c = c0 + d;
      if (c < c_end) {
        cp_async_wait<D - 2>();
        __syncthreads();
        if (c + D - 1 < c_end) issue(((d + D - 1) % D) * kStage);
        cp_async_commit();
        if (live) consume(d * kStage, c);
      }
    }
  }
  cp_async_wait<0>();
  pdl_launch_dependents();
  auto store = [&](int64_t row, int col, float sum) {
    if (row >= p.n || col >= p.m) return;
    if (p.y_f32 != nullptr) {
      if (p.bias_f32) sum += p.bias_f32[row];
      p.y_f32[col * p.n + row] = sum;
    } else {
      if (p.bias) sum += __bfloat162float(__ushort_as_bfloat16(p.bias[row]));
      p.y[col * p.n + row] = __bfloat16_as_ushort(__float2bfloat16_rn(sum));
    }
  };
  if (splits == 1) {
    if (!live) return;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          store((tile0 + r) * kWna16TileRows + g + 8 * (i >> 1), mt * 8 + 2 * t + (i & 1),
                mul.acc[r][mt][i]);
        }
    return;
  }
  // Partial sums of the cluster's S blocks: element e of a block's float4 array is warp w, tile
  // r, fragment mt, lane l: e = ((w·R + r)·MT + mt)·32 + l (idle warps' slots are never stored).
  constexpr int kPerBlock = kWarps * R * MT * 32;  // float4s
  static_assert(kPerBlock * 16 <= D * kStage, "the reduction reuses the ring");
  __syncthreads();  // every warp is done with the ring
  float4* partial = reinterpret_cast<float4*>(smem);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      partial[((warp * R + r) * MT + mt) * 32 + lane] =
          make_float4(mul.acc[r][mt][0], mul.acc[r][mt][1], mul.acc[r][mt][2], mul.acc[r][mt][3]);
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's partials are written
  const float* blocks[8];
  for (int q = 0; q < splits; ++q) blocks[q] = cluster.map_shared_rank(reinterpret_cast<const float*>(smem), q);
  const int e_begin = share * kPerBlock * 4 / splits, e_end = (share + 1) * kPerBlock * 4 / splits;
  for (int e = e_begin + tid; e < e_end; e += kWarps * 32) {
    float sum = 0.0f;
    for (int q = 0; q < splits; ++q) sum += blocks[q][e];
    const int i = e & 3, owner = (e >> 2) & 31, slot = e >> 7;  // slot = (w·R + r)·MT + mt
    const int64_t tile = static_cast<int64_t>(blockIdx.x) * kBlockTiles + slot / MT;
    store(tile * kWna16TileRows + (owner >> 2) + 8 * (i >> 1), (slot % MT) * 8 + 2 * (owner & 3) + (i & 1), sum);
  }
  cluster.sync();  // the other blocks' shared memory stays until every read of it is done
}

template <int BITS, int MT, int D, int GPC>
void launch_config(const Wna16KernelParams& p, int split_override, cudaStream_t stream) {
  auto kernel = wna16_block_kernel<BITS, MT, D, GPC>;
  constexpr size_t kSmem = static_cast<size_t>(D) * block_stage_bytes(BITS, MT, GPC);
  static std::atomic<uint64_t> raised{0};  // the attribute, once per device
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((raised.load() & bit) == 0) {
    int limit = 0;
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    LOWBIT_CHECK_AS(Unsupported, kSmem <= static_cast<size_t>(limit),
                    "wna16 block kernel: the device's shared memory per block is too small");
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    raised.fetch_or(bit);
  }
  static const int64_t resident = [&] {  // blocks of this configuration the device holds at once
    int per_sm = 0, sms = 0;
    LOWBIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, kSmem));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return static_cast<int64_t>(std::max(per_sm, 1)) * sms;
  }();
  const int64_t blocks = (p.tiles + kWna16BlockTiles - 1) / kWna16BlockTiles;
  int splits = wna16_block_splits(blocks, p.chunks, resident);
  if (split_override > 0) splits = std::min(split_override, 8);
  splits = std::max(1, std::min<int>(splits, std::max(p.chunks, 1)));
  launch_pdl_clusters(kernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits)),
                      dim3(kWarps * 32), dim3(1, static_cast<unsigned>(splits)), kSmem, stream, p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <int BITS, int MT, int D>
void launch_groups(const Wna16KernelParams& p, int64_t steps_per_group, int split_override, cudaStream_t stream) {
  if (steps_per_group >= 4) {
    launch_config<BITS, MT, D, 1>(p, split_override, stream);
  } else if (steps_per_group == 2) {
    launch_config<BITS, MT, D, 2>(p, split_override, stream);
  } else {
    launch_config<BITS, MT, D, 4>(p, split_override, stream);
  }
}

// D: ~5 KB (int4) of a warp's codes in flight, as in the stream kernel; two blocks per SM fit.
template <int BITS>
void launch_bits(const Wna16KernelParams& p, int64_t steps_per_group, int split_override, cudaStream_t stream) {
  constexpr int kD = BITS == 4 ? 6 : 4;
  if (p.m <= 32) {
    launch_groups<BITS, 4, kD>(p, steps_per_group, split_override, stream);
  } else {
    launch_groups<BITS, 8, kD>(p, steps_per_group, split_override, stream);
  }
}

}  // namespace

int wna16_block_splits(int64_t blocks, int64_t chunks, int64_t resident) {
  int splits = 1;
  while (splits < 8 && blocks * splits * 2 <= resident && chunks / (splits * 2) >= 8) splits *= 2;
  return splits;
}

void launch_wna16_block(const Wna16KernelParams& p, const Wna16GpuLayout& L, int split_override,
                        cudaStream_t stream) {
  LOWBIT_CHECK_AS(Internal, p.m > kWna16StreamKernelRows && p.m <= kWna16StreamMaxRows,
                  "launch_wna16_block: m out of range");
  if (L.bits == 4) {
    launch_bits<4>(p, L.steps_per_group, split_override, stream);
  } else {
    launch_bits<8>(p, L.steps_per_group, split_override, stream);
  }
}

}  // namespace lowbit::kernels::cuda::detail
