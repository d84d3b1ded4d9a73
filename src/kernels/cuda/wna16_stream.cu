// The streaming (decode) kernel of the GPU weight-only GEMM: see wna16_gemm.h for the method and
// wna16_internal.h for the packed layout.
//
// Work split. A block owns R = 2 tiles (32 output rows); its S warps (S = 1..16, chosen per shape so
// that the grid holds ~14 warps per SM and each warp still streams >= D/2 chunks) take contiguous
// S-ths of the 64-column chunks and reduce in shared memory at the end, in warp order
// (deterministic; no atomics, no second kernel).
//
// Pipeline. Each thread copies its own operands of a chunk (16 B of codes per tile and 4 bits, its
// scale and zero-point words) and a share of the chunk's x rows (16-byte pieces, XOR-swizzled so the
// fragment reads are free of bank conflicts) into a private ring of D stages in shared memory with
// cp.async, D - 1 chunks ahead of the one it multiplies. Nothing in flight sits in registers, so
// the ring is deep (D·R·bits/4·512 bytes of codes per warp: 6 KB for int4, R = 2, D = 6) whatever
// the register count (~80-128 per thread, no spills for m <= 16), and x, scales and zero points
// ride in the same ring: no load is ever waited on alone (the previous kernel loaded x one chunk
// ahead, a chain of L2 round trips behind a saturated memory system). The only synchronization in
// the loop is cp.async.wait_group + __syncwarp (x pieces are copied by one lane, read by another).
// Per 16-column step and tile: one dequant (4-bit: 3 SHF + 4 LOP3 + 4 HFMA2 per 8 codes) and MT
// tensor-core products; per group: the fp32 scale times the group's partial sum.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wna16_device.cuh"
#include "kernels/cuda/wna16_internal.h"
#include "kernels/cuda/wna16_kernel_common.cuh"

namespace lowbit::kernels::cuda::detail {

namespace {

constexpr int kMaxWarps = 16;    // warps per block (k split inside a block)
// The grid's target occupancy (choose_split), warps per SM: 14 with one x fragment (m <= 8), 9 with
// two (m <= 16). Both are what the forced-split sweeps of wna16_bench found best on the H200; 9 is
// also what 12 KB of ring per warp allowed before the compact stage of session 28, whose extra
// room otherwise doubled q/k/v's split at m = 16 and cost 14 % (11.6 -> 13.2 us).
constexpr int warps_per_sm_for(int mt) { return mt == 1 ? 14 : 9; }

// Bytes of one warp's ring stage: codes [R·V][32 lanes] uint4, scales [R·GPC][8 row pairs] float2,
// zero points [R·GPC][16 rows] bytes, x [XROWS rows + a zero row][8 pieces of 16 B] (swizzled). A
// (tile, group)'s scales and zero points are stored once (lanes 0-7 / 0-3 copy them; the four lanes
// of a row pair read the same word, a broadcast), not once per lane: at m = 1 this cuts a stage
// from 2 KB to 1.4 KB, and the shared memory per warp is what bounds the warps per SM.
__host__ __device__ constexpr int stage_bytes(int bits, int r, int xrows, int gpc) {
  return r * (bits / 4) * 512 + r * gpc * 64 + r * gpc * 16 + (xrows + 1) * 128;
}

template <int BITS, int MT, int R, int XROWS, int D, int GPC>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) wna16_stream_kernel(const Wna16KernelParams p) {
  constexpr int V = BITS / 4;
  constexpr int kScaleOff = R * V * 512, kZeroOff = kScaleOff + R * GPC * 64;
  constexpr int kXOff = kZeroOff + R * GPC * 16;
  constexpr int kStage = stage_bytes(BITS, R, XROWS, GPC);
  constexpr int kXCopies = (XROWS * 8 + 31) / 32;  // 16-byte x pieces each lane copies per chunk
  static_assert(kXOff + (XROWS + 1) * 128 == kStage, "stage layout");
  static_assert(R * MT * 512 <= D * kStage, "the block reduction reuses the rings");
  static_assert(D >= 2 && XROWS <= MT * 8, "ring depth / x rows");
  extern __shared__ __align__(16) unsigned char smem[];

  const int warps = static_cast<int>(blockDim.x >> 5);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * R;
  const int c_begin = static_cast<int>(static_cast<int64_t>(warp) * p.chunks / warps);
  const int c_end = static_cast<int>(static_cast<int64_t>(warp + 1) * p.chunks / warps);
  unsigned char* ring = smem + warp * D * kStage;
  const auto ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));

  // Issue cursors: the next chunk to copy, advanced by constant strides (no index arithmetic).
  const uint4* code_ptr[R];
  // Scale and zero-point copies: lane l < 8 copies row pair l's scales (float2 e + l), lane l < 4
  // zero-point word l of the (tile, group) (rows 4l .. 4l + 3), e = (tile·PG + group)·8.
  const float2* scale_ptr[R];
  const uint32_t* zero_ptr[R];
  const bool copies_scale = lane < 8, copies_zero = lane < 4;
  const int first_group = GPC == 1 ? c_begin / p.chunks_per_group : c_begin * GPC;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    code_ptr[r] = p.codes + ((tile0 + r) * p.chunks + c_begin) * V * 32 + lane;
    const int64_t e = ((tile0 + r) * p.padded_groups + first_group) * 8;
    scale_ptr[r] = p.scales + e + (lane & 7);
    zero_ptr[r] = p.zeros ? p.zeros + (e >> 1) + (lane & 3) : nullptr;
  }
  // The codes do not depend on the previous kernel: start this warp's first D - 1 chunks into L2
  // while it finishes (PDL, pdl.cuh; one prefetch per 128-byte line), then wait for x.
  if ((lane & 7) == 0) {
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
  // x pieces this lane copies: piece = lane + 32·i of the chunk's XROWS × 8 pieces, i.e. row
  // lane / 8 + 4i, piece column lane % 8 (swizzled by row % 8 = lane / 8 + 4·(i % 2)).
  const int xr0 = lane >> 3, xj = lane & 7;
  const uint16_t* x_ptr = p.x ? p.x + xr0 * p.ldx + xj * 8 + static_cast<int64_t>(c_begin) * 64 : nullptr;
  const int64_t x_step = 4 * p.ldx;
  uint32_t x_live = 0;
#pragma unroll
  for (int i = 0; i < kXCopies; ++i) {
    if (xr0 + 4 * i < XROWS && xr0 + 4 * i < p.m && x_ptr) x_live |= 1u << i;
  }
  const uint32_t x_dst[2] = {static_cast<uint32_t>(kXOff + xr0 * 128 + ((xj ^ xr0) << 4)),
                             static_cast<uint32_t>(kXOff + xr0 * 128 + ((xj ^ (xr0 + 4)) << 4))};
  // Where this lane reads its B fragment of step s (row g of fragment mt = 0; + 1024 bytes per mt:
  // columns 16s + 4t .. + 3). Rows m .. XROWS - 1 and the zero row after them are zeroed once and
  // never copied into, so the reads need no predicate; rows >= XROWS (MT = 1 only) read the zero row.
  uint32_t x_off[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int col = (((2 * s + (t >> 1)) ^ g) << 4) + ((t & 1) << 3);
    x_off[s] = static_cast<uint32_t>(kXOff + (g < XROWS ? g * 128 + col : XROWS * 128 + col));
  }
  for (int i = lane; i < D * (XROWS + 1) * 8; i += 32) {
    const int stage = i / ((XROWS + 1) * 8), row = (i / 8) % (XROWS + 1);
    if (row >= p.m) *reinterpret_cast<uint4*>(ring + stage * kStage + kXOff + row * 128 + (i % 8) * 16) = make_uint4(0, 0, 0, 0);
  }
  __syncwarp();
  // Copy destinations (lane-indexed) and read addresses (row-pair-indexed) of scales and zeros.
  const uint32_t code_s = opaque(ring_s + lane * 16);
  const uint32_t scale_dst = opaque(ring_s + kScaleOff + (lane & 7) * 8), scale_s = opaque(ring_s + kScaleOff + g * 8);
  const uint32_t zero_dst = opaque(ring_s + kZeroOff + (lane & 3) * 4), zero_s = opaque(ring_s + kZeroOff + (g >> 1) * 4);
  const uint32_t xdst_s[2] = {opaque(ring_s + x_dst[0]), opaque(ring_s + x_dst[1])};
  uint32_t xrd_s[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) xrd_s[s] = opaque(ring_s + x_off[s]);

  // GPC == 1: chunks left in the group of the next chunk to issue (issue_left) or to process
  // (process_left).
  int issue_left = 0, process_left = 0;
  if constexpr (GPC == 1) issue_left = process_left = p.chunks_per_group - c_begin % p.chunks_per_group;
  auto issue = [&](uint32_t st) {  // st: the stage's byte offset in the ring
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
#pragma unroll
    for (int i = 0; i < kXCopies; ++i) {
      if (x_live & (1u << i)) cp_async_ca16(xdst_s[i % 2] + st + i * 512, x_ptr + i * x_step);
    }
    x_ptr += 64;
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

  // Ring: chunk c_begin + i lives in stage i % D; D - 1 stages are in flight while one is used.
  // The loop is unrolled by D so that every stage offset is a constant.
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
        cp_async_wait<D - 2>();  // this thread's copies of chunk c have landed
        __syncwarp();            // ... and every lane's (x pieces); the stage refilled next was read last turn
        if (c + D - 1 < c_end) issue(((d + D - 1) % D) * kStage);
        cp_async_commit();  // possibly empty: keeps the group count uniform
        consume(d * kStage, c);
      }
    }
  }
  cp_async_wait<0>();  // only empty groups remain; drained before the rings are reused
  pdl_launch_dependents();  // late, as gemv_bf16 (it says why)

  auto store = [&](int64_t row, int col, float sum) {
    if (row < p.n && col < p.m) {
      if (p.y_f32 != nullptr) {
        if (p.bias_f32) sum += p.bias_f32[row];
        p.y_f32[col * p.n + row] = sum;
        return;
      }
      if (p.bias) sum += __bfloat162float(__ushort_as_bfloat16(p.bias[row]));
      p.y[col * p.n + row] = __bfloat16_as_ushort(__float2bfloat16_rn(sum));
    }
  };
  if (warps == 1) {
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
  // The S warps' partial sums of the same outputs, added in warp order (deterministic).
  constexpr int kPerWarp = R * MT * 32;  // float4s
  __syncthreads();                       // every ring is idle
  float4* reduce = reinterpret_cast<float4*>(smem);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      reduce[warp * kPerWarp + (r * MT + mt) * 32 + lane] =
          make_float4(mul.acc[r][mt][0], mul.acc[r][mt][1], mul.acc[r][mt][2], mul.acc[r][mt][3]);
  __syncthreads();
  const float* sums = reinterpret_cast<const float*>(reduce);
  for (int e = static_cast<int>(threadIdx.x); e < kPerWarp * 4; e += static_cast<int>(blockDim.x)) {
    float sum = 0.0f;
    for (int w = 0; w < warps; ++w) sum += sums[w * kPerWarp * 4 + e];
    const int i = e & 3, owner = (e >> 2) & 31, tile_mt = e >> 7;
    store((tile0 + tile_mt / MT) * kWna16TileRows + (owner >> 2) + 8 * (i >> 1),
          (tile_mt % MT) * 8 + 2 * (owner & 3) + (i & 1), sum);
  }
}

struct DeviceLimits {
  int sms = 0;
  int smem_per_block = 0;  // opt-in maximum of dynamic shared memory per block
  int smem_per_sm = 0;
};

const DeviceLimits& device_limits() {
  static std::mutex mutex;
  static std::vector<DeviceLimits> cache;  // per device
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() <= static_cast<size_t>(device)) cache.resize(static_cast<size_t>(device) + 1);
  DeviceLimits& d = cache[static_cast<size_t>(device)];
  if (d.sms == 0) {
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&d.smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&d.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
  }
  return d;
}

// Warps per block: double while the doubled grid stays within ~1.25 waves of `warps_per_sm` (14
// per 128-register block; fewer where shared memory allows fewer: one wave of long-lived warps
// keeps the rings streaming, more splits only add prologues), each warp keeps >= max(2, D/2)
// chunks, and the block fits in shared memory.
int choose_split(int64_t blocks, int64_t chunks, int depth, size_t warp_bytes, int warps_per_sm,
                 const DeviceLimits& d) {
  const auto per_sm = static_cast<int64_t>(
      std::min<size_t>(static_cast<size_t>(warps_per_sm), static_cast<size_t>(d.smem_per_sm) / warp_bytes));
  const int64_t target = static_cast<int64_t>(d.sms) * std::max<int64_t>(per_sm, 1);
  const int64_t min_chunks = std::max(2, depth / 2);
  int split = 1;
  while (split < kMaxWarps && blocks * split * 2 <= target + target / 4 && chunks / (2 * split) >= min_chunks &&
         static_cast<size_t>(2 * split) * warp_bytes <= static_cast<size_t>(d.smem_per_block)) {
    split *= 2;
  }
  return split;
}

template <int BITS, int MT, int R, int XROWS, int D, int GPC>
void launch_config(const Wna16KernelParams& p, int64_t tiles, int split_override, cudaStream_t stream) {
  auto kernel = wna16_stream_kernel<BITS, MT, R, XROWS, D, GPC>;
  const DeviceLimits& d = device_limits();
  constexpr size_t kWarpBytes = static_cast<size_t>(D) * stage_bytes(BITS, R, XROWS, GPC);
  LOWBIT_CHECK_AS(Unsupported, kWarpBytes <= static_cast<size_t>(d.smem_per_block),
                  "wna16 stream kernel: the device's shared memory per block is too small");
  // Allow the opt-in maximum once per device (a function attribute, not a stream operation).
  static std::atomic<uint64_t> raised{0};
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((raised.load() & bit) == 0) {
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_per_block));
    raised.fetch_or(bit);
  }
  const int64_t blocks = tiles / R;
  int split = choose_split(blocks, p.chunks, D, kWarpBytes, warps_per_sm_for(MT), d);
  if (split_override > 0) {
    split = std::min(split_override, kMaxWarps);
    while (split > 1 && static_cast<size_t>(split) * kWarpBytes > static_cast<size_t>(d.smem_per_block)) split /= 2;
  }
  const size_t smem = static_cast<size_t>(split) * kWarpBytes;
  launch_pdl(kernel, static_cast<unsigned>(blocks), static_cast<unsigned>(split * 32), smem, stream, p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <int BITS, int MT, int R, int XROWS, int D>
void launch_groups(const Wna16KernelParams& p, int64_t steps_per_group, int64_t tiles, int split_override,
                   cudaStream_t stream) {
  if (steps_per_group >= 4) {
    launch_config<BITS, MT, R, XROWS, D, 1>(p, tiles, split_override, stream);
  } else if (steps_per_group == 2) {
    launch_config<BITS, MT, R, XROWS, D, 2>(p, tiles, split_override, stream);
  } else {
    launch_config<BITS, MT, R, XROWS, D, 4>(p, tiles, split_override, stream);
  }
}

// Configurations by rows of x: (MT n8 fragments of x, R tiles per warp, XROWS rows of x staged, D
// stages). Two tiles per warp: the per-chunk costs that do not scale with the tiles (x copies and
// reads, the ring's wait / sync / commit, loop control) are paid once per 1 KB of int4 codes, which
// keeps the issue slots (~1 instruction per 6 bytes) well under what 4.8 TB/s asks of them. D: ~5-6
// KB of codes per warp in flight.
template <int BITS>
void launch_bits(const Wna16KernelParams& p, int64_t steps_per_group, int64_t tiles, int split_override,
                 cudaStream_t stream) {
  constexpr int kD = BITS == 4 ? 6 : 4;
  if (p.m == 1) {
    launch_groups<BITS, 1, 2, 1, kD>(p, steps_per_group, tiles, split_override, stream);
  } else if (p.m <= 4) {
    launch_groups<BITS, 1, 2, 4, kD>(p, steps_per_group, tiles, split_override, stream);
  } else if (p.m <= 8) {
    launch_groups<BITS, 1, 2, 8, kD>(p, steps_per_group, tiles, split_override, stream);
  } else {
    launch_groups<BITS, 2, 2, 16, kD>(p, steps_per_group, tiles, split_override, stream);
  }
}

}  // namespace

void launch_wna16_stream(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                         const uint16_t* bias, uint16_t* y, cudaStream_t stream, int split_override) {
  launch_wna16_stream_any(x, ldx, m, w, bias, y, nullptr, nullptr, stream, split_override);
}

void launch_wna16_stream_f32(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                             const float* bias, float* y, cudaStream_t stream) {
  launch_wna16_stream_any(x, ldx, m, w, nullptr, nullptr, bias, y, stream, 0);
}

Wna16KernelParams wna16_kernel_params(const uint16_t* x, int64_t ldx, int64_t m,
                                      const Wna16GpuWeights& w, const uint16_t* bias, uint16_t* y,
                                      const float* bias_f32, float* y_f32) {
  const Wna16GpuLayout& L = w.layout;
  Wna16KernelParams p;
  p.codes = reinterpret_cast<const uint4*>(w.codes.data());
  p.scales = reinterpret_cast<const float2*>(w.scales.data());
  p.zeros = L.has_zeros ? reinterpret_cast<const uint32_t*>(w.zeros.data()) : nullptr;
  p.x = L.chunks == 0 ? nullptr : x;
  p.ldx = ldx;
  p.m = static_cast<int>(m);
  p.bias = bias;
  p.y = y;
  p.bias_f32 = bias_f32;
  p.y_f32 = y_f32;
  p.n = L.n;
  p.tiles = L.tiles;
  p.chunks = static_cast<int>(L.chunks);
  p.padded_groups = L.padded_groups;
  p.chunks_per_group = L.steps_per_group >= 4 ? static_cast<int>(L.steps_per_group / 4) : 1;
  const uint32_t z0 = 1u << (L.bits - 1);
  p.zero_pair = z0 | (z0 << 8);
  return p;
}

void launch_wna16_stream_any(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                             const uint16_t* bias, uint16_t* y, const float* bias_f32, float* y_f32,
                             cudaStream_t stream, int split_override) {
  const Wna16GpuLayout& L = w.layout;
  LOWBIT_CHECK_AS(Internal, m > 0 && m <= kWna16StreamMaxRows,
                  "launch_wna16_stream: m out of range");
  LOWBIT_CHECK_AS(
      Internal,
      L.chunks == 0 || (x != nullptr && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0),
      "launch_wna16_stream: x rows must be 16-byte aligned");
  if (L.tiles == 0) return;
  const Wna16KernelParams p = wna16_kernel_params(x, ldx, m, w, bias, y, bias_f32, y_f32);
  if (m > kWna16StreamKernelRows) {
    launch_wna16_block(p, L, split_override, stream);
    return;
  }
  if (L.bits == 4) {
    launch_bits<4>(p, L.steps_per_group, L.tiles, split_override, stream);
  } else {
    launch_bits<8>(p, L.steps_per_group, L.tiles, split_override, stream);
  }
}

}  // namespace lowbit::kernels::cuda::detail
