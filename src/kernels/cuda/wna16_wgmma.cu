// The Hopper kernel of the GPU weight-only GEMM (the WGMMA path of wna16_gemm.h): batches of 65 and
// more rows of x (serving many sequences at once, chunked prefill) on the packed layout of
// wna16_internal.h, on the warpgroup tensor-core instructions of sm_90a.
//
// Why. At 64-128 rows the mma.sync kernels spend their time on the tensor cores' older path and
// the AUTO model sent the narrow layers to DEQUANT_GEMM, which writes and rereads bf16 weights (4.5
// bytes moved per weight instead of 0.5): both were measured slower than a plain bf16 GEMM there.
// wgmma multiplies a 64-row A held in registers by a B in shared memory, asynchronously: the warps
// dequantize the next chunk while the tensor cores work on this one.
//
// Roles. A = the weights: each warp of a warpgroup dequantizes its 16-row tile straight from the
// packed codes into the wgmma A fragment, which has the mma.sync m16n8k16 layout the codes are
// packed for (no shared memory for weights); the fp32 scale is applied per weight and rounded to
// bf16 once, bf16((q - z)·s): the same weights, bit for bit, as DEQUANT_GEMM, so the same accuracy
// bound. B = xᵀ: NT rows of x (tokens) by 64 columns per chunk, copied by the tensor memory
// accelerator (TMA) into shared memory in the canonical K-major layout with the 128-byte swizzle
// (token n's 64 columns in the 128 bytes at n·128, its 16-byte piece kb at position kb ^ (n % 8)),
// completing on an mbarrier per stage. The packed layout's columns are permuted inside each
// 16-column step (the A fragment of lane (g, t) holds packed columns 4t..4t + 3, which the mma
// reads as k = 2t, 2t + 1, 2t + 8, 2t + 9), so x is first rewritten in that k order into the
// workspace (wna16_wgmma_x_kernel, with the layout's own gather when it has one): a TMA copy cannot
// split a 16-byte piece. Why not copy x through registers: generic-proxy stores need a
// fence.proxy.async before the tensor cores read them, and that fence (MEMBAR.ALL.CTA in SASS)
// waits for every load the thread has in flight, the codes prefetched chunks ahead included: the
// first version did that and ran at one memory round trip (~1.1 µs) per chunk whatever the tile
// (bench/NOTES.md).
//
// Status (session 30, H200): correct (the tests compare it with the reference like DEQUANT_GEMM),
// but ~0.5x a bf16 GEMM at 32-128 rows (gate_up, m = 128: 136 µs against cuBLASLt's 67 µs),
// ~220 TFLOP/s of tensor work: each chunk still costs ~1 µs per block. Moving every load to the
// copy engine (TMA for the codes too) did not help (184 µs), so the wait is not the loads; ncu: 60
// % of scheduler cycles without an eligible warp, 0.76 eligible warps, 8.8 cycles per issued
// instruction. Not in AUTO until it wins (wna16_gemm.h).
//
// Work split. A block is two warpgroups (8 warps, tiles 8b..8b + 7: 128 output rows) over NT rows
// of x (grid z: blocks of NT rows, each rereading the weights); x stages are shared by both
// warpgroups. Narrow layers split k over a thread block cluster of up to 8 blocks reduced through
// distributed shared memory in block order (as wna16_block.cu): deterministic, no atomics, no
// workspace.
//
// Pipeline per chunk i (a barrier, then): one thread starts the TMA copy of chunk i + 2 into stage
// (i + 2) % 4 (its old chunk, i - 2, is retired: every warpgroup waited for its wgmma before the
// barrier); wait for stage i % 4's copy; issue the 4 wgmma of chunk i (A registers of chunk i);
// wait until chunk i - 1's wgmma are done (chunk i's still run); dequantize chunk i + 1 into the
// other A registers; load the codes of chunk i + 1 + kCodeRing.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
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

constexpr int kWarpGroups = 2;
constexpr int kThreads = kWarpGroups * 128;
constexpr int kBlockTiles = kWarpGroups * 4;  // 16-row tiles: 128 output rows per block
constexpr int kStages = 4;                    // x stages (the pipeline above needs 4)
constexpr int kCodeRing = 4;                  // chunks of codes in flight per warp, in registers
constexpr int kPartialStride = kBlockTiles * 16 + 4;  // floats per token of the partial sums: the
                                                      // +4 spreads a warp's stores over the banks

template <int NT>
__host__ __device__ constexpr int stage_bytes() {
  return NT * 128;  // NT tokens × 64 bf16
}
template <int NT>
__host__ __device__ constexpr size_t smem_bytes() {
  const size_t stages = size_t{kStages} * stage_bytes<NT>(),
               partial = size_t{NT} * kPartialStride * 4;
  return (stages > partial ? stages : partial) + 1024 + kStages * 8;  // + alignment, mbarriers
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// acc (64 × 64, fp32) += A (64 × 16 bf16, registers) · B (64 tokens × 16, shared memory).
__device__ __forceinline__ void wgmma_n64(float (&acc)[32], const uint32_t (&a)[4],
                                          uint64_t b_desc) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),
        "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]),
        "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]),
        "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]),
        "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]),
        "+f"(acc[30]), "+f"(acc[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

// acc (64 × 128, fp32) += A (64 × 16 bf16, registers) · B (128 tokens × 16, shared memory).
__device__ __forceinline__ void wgmma_n128(float (&acc)[64], const uint32_t (&a)[4],
                                           uint64_t b_desc) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),
        "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]),
        "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]),
        "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]),
        "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]),
        "+f"(acc[30]), "+f"(acc[31]), "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]),
        "+f"(acc[36]), "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]),
        "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]), "+f"(acc[47]),
        "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]), "+f"(acc[52]), "+f"(acc[53]),
        "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]), "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]),
        "+f"(acc[60]), "+f"(acc[61]), "+f"(acc[62]), "+f"(acc[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of v across the asynchronous wgmma (its results are
// defined only after wgmma_wait).
__device__ __forceinline__ void fence_operand(float& v) { asm volatile("" : "+f"(v)::"memory"); }
// Global loads the compiler may not move: plain loads of the codes ring were sunk to their first
// use (the dequantization four chunks later), one memory round trip per chunk: the first version
// ran at ~1.1 µs per chunk whatever the tile.
__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ float2 ldg_f2(const void* p) {
  float2 v;
  asm volatile("ld.global.nc.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ldg_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Rows [row, row + box rows) × columns [col, col + 64) of the tensor map's matrix into shared
// memory at dst (rows past the matrix are zero-filled), completing on bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int col, int row,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

// Descriptor of B for one 16-column step starting at shared address addr (inside the 128-byte rows
// of a 1024-byte aligned stage): the 128-byte swizzle, 1024 bytes between groups of 8 tokens (the
// stride byte offset; the leading one is unused when a step's 32 bytes lie inside one swizzled
// row), addresses in units of 16 bytes.
__device__ __forceinline__ uint64_t b_descriptor(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// bf16((q - z)·s) of both halves of an exact bf16x2 (q - z), the product rounded once in fp32 and
// once to bf16, as the dequantization kernel (and so DEQUANT_GEMM) does.
__device__ __forceinline__ uint32_t scale_pair(uint32_t q, float scale) {
  const __nv_bfloat162 v =
      __floats2bfloat162_rn(__fmul_rn(__uint_as_float(q << 16), scale),
                            __fmul_rn(__uint_as_float(q & 0xFFFF0000u), scale));
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <int NT>
__device__ __forceinline__ void wgmma_step(float (&acc)[NT / 2], const uint32_t (&a)[4],
                                           uint64_t desc) {
  if constexpr (NT == 64) {
    wgmma_n64(acc, a, desc);
  } else {
    wgmma_n128(acc, a, desc);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// xw [m, kp] = x [m, k] in the wgmma k order: one thread per row and 16-column step, whose packed
// column pairs (2w, 2w + 1), w = 0..7, go to pair positions 0, 4, 1, 5, 2, 6, 3, 7 (packed columns
// 4t, 4t + 1 are k = 2t, 2t + 1; 4t + 2, 4t + 3 are k = 2t + 8, 2t + 9). column_of (the layout's
// gather, may be null: then k == kp) says which column of x each packed column holds, -1: zero.
__global__ void wna16_wgmma_x_kernel(const uint16_t* x, int64_t m, int64_t k,
                                     const int32_t* column_of, int64_t kp, uint16_t* xw) {
  const int64_t steps = kp / 16, total = m * steps;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / steps, step = e - i * steps;
    uint32_t w[8];
    if (column_of == nullptr) {
      const auto* src = reinterpret_cast<const uint4*>(x + i * k + step * 16);
      const uint4 a = src[0], b = src[1];
      w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z,
      w[7] = b.w;
    } else {
      for (int j = 0; j < 8; ++j) {
        uint32_t pair = 0;
        for (int h = 0; h < 2; ++h) {
          const int32_t c = column_of[step * 16 + 2 * j + h];
          const uint32_t v = c < 0 || c >= k ? 0u : x[i * k + c];
          pair |= v << (16 * h);
        }
        w[j] = pair;
      }
    }
    auto* dst = reinterpret_cast<uint4*>(xw + i * kp + step * 16);
    dst[0] = make_uint4(w[0], w[2], w[4], w[6]);
    dst[1] = make_uint4(w[1], w[3], w[5], w[7]);
  }
}

// BITS: 4 or 8; NT: rows of x per block (64 or 128); GPC: groups per chunk as in wna16_block.cu.
template <int BITS, int NT, int GPC>
__global__ void __launch_bounds__(kThreads, 1)
    wna16_wgmma_kernel(const Wna16KernelParams p, const __grid_constant__ CUtensorMap x_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int V = BITS / 4, SPG = 4 / GPC, kStage = stage_bytes<NT>();
  extern __shared__ __align__(16) unsigned char smem[];

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kBlockTiles + warp;
  const bool live = tile < p.tiles;
  const int splits = static_cast<int>(gridDim.y), share = static_cast<int>(blockIdx.y);
  const int c_begin = static_cast<int>(static_cast<int64_t>(share) * p.chunks / splits);
  const int c_end = static_cast<int>(static_cast<int64_t>(share + 1) * p.chunks / splits);
  const int n_chunks = c_end - c_begin;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.z) * NT;
  // The swizzle pattern repeats every 1024 bytes: stages start on such a boundary.
  const uint32_t smem_s = (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
  unsigned char* const smem_aligned =
      smem + (smem_s - static_cast<uint32_t>(__cvta_generic_to_shared(smem)));

  // ---- codes, scales and zero points of this warp's tile, kCodeRing chunks ahead ----
  const int64_t my_tile = live ? tile : 0;
  const uint4* code_base = p.codes + my_tile * p.chunks * V * 32 + lane;
  const float2* scale_base = p.scales + my_tile * p.padded_groups * 8 + g;
  const uint32_t* zero_base =
      p.zeros ? p.zeros + my_tile * p.padded_groups * 4 + (g >> 1) : nullptr;
  const int zero_shift = (g & 1) * 16;
  uint4 cw[kCodeRing][V];
  float2 sc[kCodeRing][GPC];
  uint32_t zw[kCodeRing][GPC];
  auto load_codes = [&](int c, uint4(&cws)[V], float2(&scs)[GPC], uint32_t(&zws)[GPC]) {
    if (!live || c >= c_end) return;
#pragma unroll
    for (int v = 0; v < V; ++v)
      cws[v] = ldg_stream(code_base + (static_cast<int64_t>(c) * V + v) * 32);
#pragma unroll
    for (int j = 0; j < GPC; ++j) {
      const int64_t group = GPC == 1 ? c / p.chunks_per_group : static_cast<int64_t>(c) * GPC + j;
      scs[j] = ldg_f2(scale_base + group * 8);
      zws[j] = zero_base ? ldg_u32(zero_base + group * 4) >> zero_shift : p.zero_pair;
    }
  };
#pragma unroll
  for (int d = 0; d < kCodeRing; ++d) {
#pragma unroll
    for (int v = 0; v < V; ++v) cw[d][v] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < GPC; ++j) {
      sc[d][j] = make_float2(0.0f, 0.0f);
      zw[d][j] = p.zero_pair;
    }
    load_codes(c_begin + d, cw[d], sc[d], zw[d]);
  }
  pdl_wait();  // x is the previous kernel's output (the rewrite in k order)

  // ---- x: one TMA copy per stage, started by thread 0, completing on the stage's mbarrier ----
  const auto bars = static_cast<uint32_t>(smem_s + smem_bytes<NT>() - 1024 - kStages * 8);
  auto start_x = [&](int i) {  // chunk c_begin + i into stage i % kStages
    if (tid == 0 && i < n_chunks) {
      const uint32_t bar = bars + (i % kStages) * 8;
      mbarrier_expect_tx(bar, kStage);
      tma_load_2d(smem_s + (i % kStages) * kStage, &x_map, (c_begin + i) * 64,
                  static_cast<int>(tok0), bar);
    }
  };

  // ---- A registers of a chunk ----
  uint32_t a_regs[2][4][4];
  auto dequant = [&](const uint4(&cws)[V], const float2(&scs)[GPC], const uint32_t(&zws)[GPC],
                     uint32_t(&a)[4][4]) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t nz0, nz1, q[4];
      neg_zeros<BITS>(zws[s / SPG] & 0xFFFFu, nz0, nz1);
      dequant_step<BITS>(cws, s, nz0, nz1, q);
      const float2 scale = scs[s / SPG];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[s][r] = scale_pair(q[r], (r & 1) ? scale.y : scale.x);
    }
  };

  float acc[NT / 2];
#pragma unroll
  for (int e = 0; e < NT / 2; ++e) acc[e] = 0.0f;

  // ---- prologue: barriers, the copies of chunks 0 and 1; chunk 0 dequantized ----
  if (tid == 0) {
    for (int b = 0; b < kStages; ++b) mbarrier_init(bars + b * 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  start_x(0);
  start_x(1);
  dequant(cw[0], sc[0], zw[0], a_regs[0]);
  load_codes(c_begin + kCodeRing, cw[0], sc[0], zw[0]);

  for (int i0 = 0; i0 < n_chunks; i0 += 4) {
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      const int i = i0 + d;
      if (i < n_chunks) {
        __syncthreads();
        start_x(i + 2);
        mbarrier_wait(bars + d * 8, static_cast<uint32_t>((i / 4) & 1));
        wgmma_fence();
#pragma unroll
        for (int e = 0; e < NT / 2; ++e) fence_operand(acc[e]);
        const uint32_t stage = smem_s + d * kStage;
#pragma unroll
        for (int s = 0; s < 4; ++s)
          wgmma_step<NT>(acc, a_regs[d % 2][s], b_descriptor(stage + s * 32));
        wgmma_commit();
#pragma unroll
        for (int e = 0; e < NT / 2; ++e) fence_operand(acc[e]);
        wgmma_wait<1>();
        const int next = (d + 1) % kCodeRing;
        dequant(cw[next], sc[next], zw[next], a_regs[(d + 1) % 2]);
        load_codes(c_begin + i + 1 + kCodeRing, cw[next], sc[next], zw[next]);
      }
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int e = 0; e < NT / 2; ++e) fence_operand(acc[e]);
  pdl_launch_dependents();

  // ---- partial sums [NT tokens][128 rows] in shared memory, then reduced over the cluster ----
  __syncthreads();  // every warpgroup is done with the stages
  float* partial = reinterpret_cast<float*>(smem_aligned);
  const int row_local = (warp >> 2) * 64 + (warp & 3) * 16 + g;
#pragma unroll
  for (int j = 0; j < NT / 8; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      partial[(8 * j + 2 * t + (r & 1)) * kPartialStride + row_local + 8 * (r >> 1)] =
          acc[4 * j + r];
    }
  }
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  const float* blocks[8];
  for (int q = 0; q < splits; ++q) {
    blocks[q] =
        splits > 1 ? cluster.map_shared_rank(static_cast<const float*>(partial), q) : partial;
  }
  // Units of 4 output rows of one token; block q of the cluster stores the q-th share.
  constexpr int kUnits = NT * kBlockTiles * 4;
  const int u_begin = share * kUnits / splits, u_end = (share + 1) * kUnits / splits;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockTiles * 16;
  const bool vector_store = (p.n % 4) == 0 && (reinterpret_cast<uintptr_t>(p.y) % 8) == 0;
  for (int u = u_begin + tid; u < u_end; u += kThreads) {
    const int tok = u / (kBlockTiles * 4), col = (u % (kBlockTiles * 4)) * 4;
    const int64_t m_row = tok0 + tok, out_row = row0 + col;
    if (m_row >= p.m || out_row >= p.n) continue;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = 0; q < splits; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(blocks[q] + tok * kPartialStride + col);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    float s[4] = {sum.x, sum.y, sum.z, sum.w};
    uint16_t out[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (p.bias && out_row + e < p.n)
        s[e] += __bfloat162float(__ushort_as_bfloat16(p.bias[out_row + e]));
      out[e] = __bfloat16_as_ushort(__float2bfloat16_rn(s[e]));
    }
    uint16_t* dst = p.y + m_row * p.n + out_row;
    if (vector_store && out_row + 3 < p.n) {
      *reinterpret_cast<uint2*>(dst) =
          make_uint2(out[0] | (uint32_t{out[1]} << 16), out[2] | (uint32_t{out[3]} << 16));
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (out_row + e < p.n) dst[e] = out[e];
      }
    }
  }
  if (splits > 1) cluster.sync();  // the other blocks' shared memory stays until every read is done
#else
  __trap();  // not built for sm_90a: the host never launches it (wna16_wgmma_available)
#endif
}

// Shares of k (the cluster size, 1..8) for `units` blocks (row blocks × blocks of x rows) of
// `chunks` chunks on `resident` block slots: the fewest waves per share of the work, each share
// keeping >= 8 chunks (the pipeline's ramp is ~4); a split must save 10 % to be taken (its
// reduction and shorter pipeline cost).
int wgmma_splits(int64_t units, int64_t chunks, int64_t resident) {
  int best = 1;
  double best_cost = static_cast<double>((units + resident - 1) / resident);
  for (int s = 2; s <= 8 && chunks / s >= 8; ++s) {
    const double cost = static_cast<double>((units * s + resident - 1) / resident) / s;
    if (cost < 0.9 * best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    LOWBIT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000,
                                                       cudaEnableDefault, &found));
    LOWBIT_CHECK_AS(Unsupported, found == cudaDriverEntryPointSuccess && entry != nullptr,
                    "wna16 WGMMA path: the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return fn;
}

// x [m, ldx] (bf16, in the wgmma k order) as boxes of `rows` rows × 64 columns, 128-byte swizzled.
CUtensorMap x_tensor_map(const uint16_t* x, int64_t m, int64_t ldx, int rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(ldx), static_cast<cuuint64_t>(m)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ldx) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(x), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LOWBIT_CHECK_AS(Internal, r == CUDA_SUCCESS,
                  "wna16 WGMMA path: cuTensorMapEncodeTiled failed (" +
                      std::to_string(static_cast<int>(r)) + ")");
  return map;
}

template <int BITS, int NT, int GPC>
void launch_config(const Wna16KernelParams& p, const CUtensorMap& x_map, int split_override,
                   cudaStream_t stream) {
  auto kernel = wna16_wgmma_kernel<BITS, NT, GPC>;
  constexpr size_t kSmem = smem_bytes<NT>();
  static std::atomic<uint64_t> raised{0};  // the attribute, once per device
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((raised.load() & bit) == 0) {
    LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSmem)));
    raised.fetch_or(bit);
  }
  static const int64_t resident = [&] {
    int per_sm = 0, sms = 0;
    LOWBIT_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmem));
    LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return static_cast<int64_t>(std::max(per_sm, 1)) * sms;
  }();
  const int64_t blocks = (p.tiles + kBlockTiles - 1) / kBlockTiles;
  const int64_t m_blocks = (p.m + NT - 1) / NT;
  int splits = wgmma_splits(blocks * m_blocks, p.chunks, resident);
  if (split_override > 0) splits = std::min(split_override, 8);
  splits = std::max(1, std::min<int>(splits, std::max(p.chunks, 1)));
  launch_pdl_clusters(kernel,
                      dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits),
                           static_cast<unsigned>(m_blocks)),
                      dim3(kThreads), dim3(1, static_cast<unsigned>(splits), 1), kSmem, stream, p,
                      x_map);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

template <int BITS, int NT>
void launch_groups(const Wna16KernelParams& p, int64_t steps_per_group, int split_override,
                   cudaStream_t stream) {
  const CUtensorMap x_map = x_tensor_map(p.x, p.m, p.ldx, NT);
  if (steps_per_group >= 4) {
    launch_config<BITS, NT, 1>(p, x_map, split_override, stream);
  } else if (steps_per_group == 2) {
    launch_config<BITS, NT, 2>(p, x_map, split_override, stream);
  } else {
    launch_config<BITS, NT, 4>(p, x_map, split_override, stream);
  }
}

template <int BITS>
void launch_bits(const Wna16KernelParams& p, int64_t steps_per_group, int split_override,
                 cudaStream_t stream) {
  if (p.m <= 64) {
    launch_groups<BITS, 64>(p, steps_per_group, split_override, stream);
  } else {
    launch_groups<BITS, 128>(p, steps_per_group, split_override, stream);
  }
}

}  // namespace

void launch_wna16_wgmma_x(const uint16_t* x, int64_t m, const Wna16GpuWeights& w, uint16_t* xw,
                          cudaStream_t stream) {
  const int64_t kp = w.layout.padded_cols(), total = m * (kp / 16);
  if (total == 0) return;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 4096);
  wna16_wgmma_x_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      x, m, w.layout.k, w.column_of.size() ? w.column_of.data() : nullptr, kp, xw);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

bool wna16_wgmma_available() {
#if defined(LOWBIT_CUDA_SM90A)
  int device = 0, major = 0, minor = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

void launch_wna16_wgmma(const uint16_t* x, int64_t ldx, int64_t m, const Wna16GpuWeights& w,
                        const uint16_t* bias, uint16_t* y, cudaStream_t stream,
                        int split_override) {
  const Wna16GpuLayout& L = w.layout;
  LOWBIT_CHECK_AS(Unsupported, wna16_wgmma_available(),
                  "wna16 WGMMA path: needs an sm_90 GPU and a build with sm_90a code");
  LOWBIT_CHECK_AS(Internal, m > 0 && m <= (int64_t{1} << 30), "launch_wna16_wgmma: m out of range");
  LOWBIT_CHECK_AS(
      Internal,
      L.chunks == 0 || (x != nullptr && ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0),
      "launch_wna16_wgmma: x rows must be 16-byte aligned");
  LOWBIT_CHECK_AS(
      Internal, L.tiles > 0 && L.chunks > 0,
      "launch_wna16_wgmma: nothing to multiply (wna16_gemm runs the stream kernel then)");
  const Wna16KernelParams p = wna16_kernel_params(x, ldx, m, w, bias, y, nullptr, nullptr);
  if (L.bits == 4) {
    launch_bits<4>(p, L.steps_per_group, split_override, stream);
  } else {
    launch_bits<8>(p, L.steps_per_group, split_override, stream);
  }
}

}  // namespace lowbit::kernels::cuda::detail
