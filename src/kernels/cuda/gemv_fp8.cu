// The FP8 GEMV path of w8a8_gemm (W8a8Path::GEMV): decode steps (m <= 8 rows of x) with e4m3
// weights whose scales are constant along k (per tensor or per channel: FP8, FP8_DYNAMIC) and
// activations quantized per row (per token, or per tensor static / dynamic). cuBLASLt's FP8
// kernels are built for large tiles; at m = 1 they read the weights at well under half of HBM
// bandwidth and the descriptor work of a call costs more than the product (bench/NOTES.md). This
// kernel streams the weights once, like gemv_bf16:
//
//   y[i][c] = bf16(acc · sx[i] · sw[c] (+ bias[c])),  acc = Σ_k e4m3(qx[i][k]) · e4m3(w[c][k])
//
// with the scaling written as launch_epilogue_f32 writes it (same operation order), and acc from
// the tensor cores' e4m3 mma (sm_89+): every product of two e4m3 values is exact in fp32, so the
// GEMV and cuBLASLt differ only in the order of the fp32 sums.
//
// Fragment layout (mma.sync m16n8k32 e4m3: A = 16 weight rows x 32 k, B = 32 k x 8 rows of x).
// Lane (g = lane / 4, t = lane % 4) holds A rows g and g + 8 at logical k {4t..4t+3, 16+4t..16+4t+3}
// and B column g at the same logical k. A lane loads 16 bytes of weight row g, 16 of row g + 8 and
// 16 of x row g, all at physical k = 64c + 16t .. +15 of chunk c; its words P0..P3 go to the
// logical halves (4t.., 16+4t..) of the first mma (P0, P1) and of the second (P2, P3). Every lane
// uses one physical-to-logical map for A and B, so each mma sums w·x over 32 distinct physical k.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/stream_load.cuh"
#include "kernels/cuda/w8a8_internal.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda::w8a8 {

namespace {

constexpr int kTileRows = 16;  // output features per CTA (the mma's M)
constexpr int kChunk = 64;     // k per lane load group: 4 lanes x 16 codes
constexpr int kUnroll = 4;     // chunks in flight per warp
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

struct Fp8GemvParams {
  const uint8_t* qx = nullptr;  // [m, k] e4m3
  const float* sx = nullptr;    // [m]
  const uint8_t* w = nullptr;   // [n, k] e4m3
  const float* sw = nullptr;    // [n]
  const uint16_t* bias = nullptr;
  uint16_t* y = nullptr;  // [m, n]
  int64_t n = 0, k = 0;
  int m = 0;
  int chunks = 0;  // ceil(k / kChunk)
};

__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  // Never launched below sm_89 (fp8_gemv_applies checks the device).
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
  __trap();
#endif
}

// R row tiles of 16 features per warp (R = 2 for wide layers: each CTA then streams as many bytes
// as a gemv_bf16 CTA, and one x load serves both tiles). 3 CTAs per SM for R = 1 (<= 80
// registers, as gemv_bf16), 2 for R = 2.
template <int R>
__global__ void __launch_bounds__(kThreads, R == 1 ? 3 : 2) fp8_gemv_kernel(const Fp8GemvParams p) {
  __shared__ float2 partial[kWarps][R * kTileRows][4];  // per warp: [features][8 x rows]
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R * kTileRows;
  // Features past n re-read the last one (always valid memory); their sums are never stored.
  const uint8_t* wa[R];
  const uint8_t* wb[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    wa[r] = p.w + min(row0 + r * kTileRows + g, p.n - 1) * p.k + 16 * t;
    wb[r] = p.w + min(row0 + r * kTileRows + g + 8, p.n - 1) * p.k + 16 * t;
  }
  // The weights do not depend on the previous kernel (the activation quantization): start the
  // first iteration's into L2 while it finishes, then wait for qx (pdl.cuh).
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = warp + u * kWarps;
    if (c < p.chunks) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        prefetch_l2(wa[r] + static_cast<int64_t>(c) * kChunk);
        prefetch_l2(wb[r] + static_cast<int64_t>(c) * kChunk);
      }
    }
  }
  pdl_wait();
  const bool x_row = g < p.m;
  const uint8_t* xr = p.qx + (x_row ? g : 0) * p.k + 16 * t;
  // Two accumulator sets per tile (even / odd chunks) halve the chains of dependent mma.
  float acc[R][2][4] = {};
  for (int c0 = warp; c0 < p.chunks; c0 += kWarps * kUnroll) {
    uint4 a[R][kUnroll], b[R][kUnroll], x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      const int64_t off = static_cast<int64_t>(c) * kChunk;
      const bool ok = c < p.chunks && off + 16 * t < p.k;  // k % 16 == 0: whole 16-byte pieces
#pragma unroll
      for (int r = 0; r < R; ++r) {
        a[r][u] = ok ? load_stream(wa[r] + off) : make_uint4(0, 0, 0, 0);
        b[r][u] = ok ? load_stream(wb[r] + off) : make_uint4(0, 0, 0, 0);
      }
      x[u] = ok && x_row ? __ldg(reinterpret_cast<const uint4*>(xr + off)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        mma_e4m3(acc[r][u & 1], a[r][u].x, b[r][u].x, a[r][u].y, b[r][u].y, x[u].x, x[u].y);
        mma_e4m3(acc[r][u & 1], a[r][u].z, b[r][u].z, a[r][u].w, b[r][u].w, x[u].z, x[u].w);
      }
    }
  }
  pdl_launch_dependents();  // late, as gemv_bf16 (it says why)
  // acc[r]: features 16r + g (acc 0, 1) and 16r + g + 8 (acc 2, 3), x rows 2t and 2t + 1.
#pragma unroll
  for (int r = 0; r < R; ++r) {
    partial[warp][r * kTileRows + g][t] = make_float2(acc[r][0][0] + acc[r][1][0], acc[r][0][1] + acc[r][1][1]);
    partial[warp][r * kTileRows + g + 8][t] = make_float2(acc[r][0][2] + acc[r][1][2], acc[r][0][3] + acc[r][1][3]);
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < R * kTileRows * 8; e += kThreads) {
    const int r = e >> 3, col = e & 7;
    const int64_t row = row0 + r;
    if (col < p.m && row < p.n) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float2 v = partial[w][r][col >> 1];
        sum += (col & 1) ? v.y : v.x;
      }
      float out = sum * p.sx[col] * p.sw[row];  // launch_epilogue_f32's order
      if (p.bias != nullptr) out += __uint_as_float(static_cast<uint32_t>(p.bias[row]) << 16);
      p.y[col * p.n + row] = __bfloat16_as_ushort(__float2bfloat16_rn(out));
    }
  }
}

}  // namespace

bool fp8_gemv_applies(const W8a8GpuWeights::Impl& w, int64_t m) {
  return m >= 1 && m <= kFp8GemvMaxRows && w.k_const && w.k % 16 == 0 && w.e4m3_mma;
}

void launch_fp8_gemv(const uint8_t* qx, const float* sx, const W8a8GpuWeights::Impl& w,
                     const uint16_t* bias, uint16_t* y, int64_t m, cudaStream_t stream) {
  LOWBIT_CHECK_AS(Internal, fp8_gemv_applies(w, m), "launch_fp8_gemv: the GEMV does not apply");
  LOWBIT_CHECK_AS(Internal, reinterpret_cast<uintptr_t>(qx) % 16 == 0,
                  "launch_fp8_gemv: qx must be 16-byte aligned");
  Fp8GemvParams p;
  p.qx = qx;
  p.sx = sx;
  p.w = w.codes.data();
  p.sw = w.row_scales.data();
  p.bias = bias;
  p.y = y;
  p.n = w.n;
  p.k = w.k;
  p.m = static_cast<int>(m);
  p.chunks = static_cast<int>(ceil_div(w.k, kChunk));
  // Two tiles per CTA where the grid still covers ~4 CTAs per SM of a 132-SM GPU (gate_up, lm
  // heads); one elsewhere (qkv, o, down would leave SMs idle).
  if (w.n >= 4 * 132 * 2 * kTileRows) {
    launch_pdl(fp8_gemv_kernel<2>, static_cast<unsigned>(ceil_div(w.n, 2 * kTileRows)), kThreads, 0,
               stream, p);
  } else {
    launch_pdl(fp8_gemv_kernel<1>, static_cast<unsigned>(ceil_div(w.n, kTileRows)), kThreads, 0,
               stream, p);
  }
}

}  // namespace lowbit::kernels::cuda::w8a8
