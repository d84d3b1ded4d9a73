// Row-wise and element-wise decoder ops in BF16 with fp32 math (see small_ops.h).
//
// Shape of every kernel: one block per row (or per row and column chunk), a template parameter V
// = 8 (one 16-byte access moves 8 bf16) or 1 (the scalar path for odd sizes or offsets), fp32
// inside, one bf16 rounding on the way out. Reductions: warp shuffles, then one shared-memory
// exchange between warps.
#include "kernels/cuda/small_ops.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

namespace {

// ---- bf16 packs: V values through one access ------------------------------------------------

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);  // exact
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));  // round to nearest even, as torch
}

union Pack8 {
  uint4 raw;
  uint16_t bits[8];
};

template <int V>
__device__ __forceinline__ void load_bf16(const uint16_t* p, float (&f)[V]) {
  if constexpr (V == 8) {
    Pack8 pack;
    pack.raw = *reinterpret_cast<const uint4*>(p);  // one 16-byte load
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = bf16_bits_to_float(pack.bits[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = bf16_bits_to_float(p[i]);
  }
}

template <int V>
__device__ __forceinline__ void store_bf16(uint16_t* p, const float (&f)[V]) {
  if constexpr (V == 8) {
    Pack8 pack;
#pragma unroll
    for (int i = 0; i < 8; ++i) pack.bits[i] = float_to_bf16_bits(f[i]);
    *reinterpret_cast<uint4*>(p) = pack.raw;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = float_to_bf16_bits(f[i]);
  }
}

template <int V>
__device__ __forceinline__ void load_f32(const float* p, float (&f)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      f[i] = v.x;
      f[i + 1] = v.y;
      f[i + 2] = v.z;
      f[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = p[i];
  }
}

// Sum over the block; every thread gets the total. One call per kernel (static shared memory).
__device__ float block_sum(float v) {
  __shared__ float warp_totals[32];
  __shared__ float total;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) / 32;
    v = lane < warps ? warp_totals[lane] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Threads for a row of `packs` accesses: whole warps, one access each up to 1024.
int row_threads(int64_t packs) {
  return static_cast<int>(std::clamp<int64_t>((packs + 31) / 32 * 32, 32, 1024));
}

void check_rows(const char* fn, int64_t rows) {
  LOWBIT_CHECK(rows >= 0 && rows <= std::numeric_limits<int32_t>::max(),
               std::string(fn) + ": rows is " + std::to_string(rows) + ", must be in [0, 2^31)");
}

// ---- RMSNorm -------------------------------------------------------------------------------

// Two passes over the row: the second re-reads x from L1/L2 (the block just loaded it), cheaper
// than holding a row of arbitrary length in registers.
template <int V>
__global__ void rmsnorm_kernel(const uint16_t* x, const float* __restrict__ weight, float eps,
                               int64_t dim, uint16_t* out) {  // out may be x: no __restrict__
  pdl_begin();
  const uint16_t* xr = x + blockIdx.x * dim;
  uint16_t* outr = out + blockIdx.x * dim;
  const int64_t packs = dim / V;
  float sum = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float f[V];
    load_bf16<V>(xr + p * V, f);
#pragma unroll
    for (int i = 0; i < V; ++i) sum += f[i] * f[i];
  }
  const float inv = rsqrtf(block_sum(sum) / static_cast<float>(dim) + eps);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float f[V];
    float w[V];
    load_bf16<V>(xr + p * V, f);
    load_f32<V>(weight + p * V, w);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = (f[i] * inv) * w[i];
    store_bf16<V>(outr + p * V, f);
  }
}

// Pass 1 writes the rounded residual and sums its squares; pass 2 re-reads exactly the elements
// this thread wrote (same loop), so no barrier is needed between the passes for them.
template <int V>
__global__ void fused_add_rmsnorm_kernel(uint16_t* x, uint16_t* residual,
                                         const float* __restrict__ weight, float eps, int64_t dim) {
  pdl_begin();
  uint16_t* xr = x + blockIdx.x * dim;
  uint16_t* rr = residual + blockIdx.x * dim;
  const int64_t packs = dim / V;
  float sum = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float a[V];
    float r[V];
    load_bf16<V>(xr + p * V, a);
    load_bf16<V>(rr + p * V, r);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      // Round first: the norm and the next layer both see the bf16 residual.
      r[i] = bf16_bits_to_float(float_to_bf16_bits(r[i] + a[i]));
      sum += r[i] * r[i];
    }
    store_bf16<V>(rr + p * V, r);
  }
  const float inv = rsqrtf(block_sum(sum) / static_cast<float>(dim) + eps);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float r[V];
    float w[V];
    load_bf16<V>(rr + p * V, r);
    load_f32<V>(weight + p * V, w);
#pragma unroll
    for (int i = 0; i < V; ++i) r[i] = (r[i] * inv) * w[i];
    store_bf16<V>(xr + p * V, r);
  }
}

// ---- SiLU and mul --------------------------------------------------------------------------

// grid.x: rows; grid.y: chunks of blockDim.x accesses of the output row.
template <int V>
__global__ void silu_and_mul_kernel(const uint16_t* __restrict__ gate_up, int64_t n,
                                    uint16_t* __restrict__ out) {
  pdl_begin();
  const int64_t p = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (p * V >= n) return;
  const uint16_t* g = gate_up + static_cast<int64_t>(blockIdx.x) * 2 * n + p * V;
  float gf[V];
  float uf[V];
  load_bf16<V>(g, gf);
  load_bf16<V>(g + n, uf);
#pragma unroll
  for (int i = 0; i < V; ++i) gf[i] = gf[i] / (1.0f + expf(-gf[i])) * uf[i];
  store_bf16<V>(out + static_cast<int64_t>(blockIdx.x) * n + p * V, gf);
}

// ---- Rotary embedding ----------------------------------------------------------------------

struct RopeParams {
  uint16_t* q;
  uint16_t* k;
  const int32_t* positions;
  const float* cos_sin;
  int64_t q_stride;
  int64_t k_stride;
  int64_t max_positions;
  int heads;
  int kv_heads;
  int head_dim;
  int half;  // rotary_dim / 2
};

// One block per token; each thread rotates V consecutive pairs (j, j + half) of one head.
template <int V>
__global__ void rope_neox_kernel(RopeParams rp) {
  const int64_t row = blockIdx.x;
  int64_t pos = rp.positions[row];
  pos = pos < 0 ? 0 : (pos >= rp.max_positions ? rp.max_positions - 1 : pos);
  const float* cos_row = rp.cos_sin + pos * 2 * rp.half;
  const float* sin_row = cos_row + rp.half;
  const int groups = rp.half / V;
  const int total = (rp.heads + rp.kv_heads) * groups;
  for (int t = threadIdx.x; t < total; t += blockDim.x) {
    const int head = t / groups;
    const int j = (t - head * groups) * V;
    uint16_t* p = head < rp.heads
                      ? rp.q + row * rp.q_stride + static_cast<int64_t>(head) * rp.head_dim
                      : rp.k + row * rp.k_stride + static_cast<int64_t>(head - rp.heads) * rp.head_dim;
    float a[V];
    float b[V];
    float c[V];
    float s[V];
    load_bf16<V>(p + j, a);
    load_bf16<V>(p + j + rp.half, b);
    load_f32<V>(cos_row + j, c);
    load_f32<V>(sin_row + j, s);
    float lo[V];
    float hi[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      // x·cos + rotate_half(x)·sin with rotate_half(x) = [-x2, x1]
      lo[i] = a[i] * c[i] - b[i] * s[i];
      hi[i] = b[i] * c[i] + a[i] * s[i];
    }
    store_bf16<V>(p + j, lo);
    store_bf16<V>(p + j + rp.half, hi);
  }
}

// ---- Embedding gather ----------------------------------------------------------------------

template <int V>
__global__ void embedding_gather_kernel(const uint16_t* __restrict__ table, int64_t vocab,
                                        int64_t hidden, const int32_t* __restrict__ ids,
                                        uint16_t* __restrict__ out, int32_t* error) {
  pdl_begin();
  const int64_t row = blockIdx.x;
  const int32_t id = ids[row];
  const bool bad = id < 0 || id >= vocab;
  if (bad && threadIdx.x == 0 && error != nullptr) {
    // The first bad row to get here records itself; its id goes beside it.
    if (atomicCAS(error, 0, static_cast<int32_t>(row + 1)) == 0) error[1] = id;
  }
  const uint16_t* src = table + (bad ? 0 : static_cast<int64_t>(id)) * hidden;
  uint16_t* dst = out + row * hidden;
  for (int64_t p = threadIdx.x; p < hidden / V; p += blockDim.x) {
    if constexpr (V == 8) {
      const uint4 v = bad ? make_uint4(0, 0, 0, 0) : *reinterpret_cast<const uint4*>(src + p * 8);
      *reinterpret_cast<uint4*>(dst + p * 8) = v;
    } else {
      dst[p] = bad ? uint16_t{0} : src[p];
    }
  }
}

// ---- Residual add --------------------------------------------------------------------------

template <int V>
__global__ void add_kernel(uint16_t* y, const uint16_t* x, int64_t packs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    float a[V];
    float b[V];
    load_bf16<V>(y + p * V, a);
    load_bf16<V>(x + p * V, b);
#pragma unroll
    for (int i = 0; i < V; ++i) a[i] += b[i];
    store_bf16<V>(y + p * V, a);
  }
}

}  // namespace

// ---- Host entry points ---------------------------------------------------------------------

void rmsnorm(const uint16_t* x, const float* weight, float eps, int64_t rows, int64_t dim,
             uint16_t* out, cudaStream_t stream) {
  check_rows("rmsnorm", rows);
  LOWBIT_CHECK(dim >= 1, "rmsnorm: dim is " + std::to_string(dim) + ", must be >= 1");
  if (rows == 0) return;
  LOWBIT_CHECK(x != nullptr && weight != nullptr && out != nullptr,
               "rmsnorm: x, weight and out must be non-null");
  const bool vec = dim % 8 == 0 && aligned16(x) && aligned16(out) && aligned16(weight);
  const int threads = row_threads(vec ? dim / 8 : dim);
  if (vec) {
    launch_pdl(rmsnorm_kernel<8>, static_cast<unsigned>(rows), threads, 0, stream, x, weight, eps, dim, out);
  } else {
    launch_pdl(rmsnorm_kernel<1>, static_cast<unsigned>(rows), threads, 0, stream, x, weight, eps, dim, out);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void fused_add_rmsnorm(uint16_t* x, uint16_t* residual, const float* weight, float eps,
                       int64_t rows, int64_t dim, cudaStream_t stream) {
  check_rows("fused_add_rmsnorm", rows);
  LOWBIT_CHECK(dim >= 1, "fused_add_rmsnorm: dim is " + std::to_string(dim) + ", must be >= 1");
  if (rows == 0) return;
  LOWBIT_CHECK(x != nullptr && residual != nullptr && weight != nullptr,
               "fused_add_rmsnorm: x, residual and weight must be non-null");
  LOWBIT_CHECK(x != residual, "fused_add_rmsnorm: x and residual must be different buffers");
  const bool vec = dim % 8 == 0 && aligned16(x) && aligned16(residual) && aligned16(weight);
  const int threads = row_threads(vec ? dim / 8 : dim);
  const auto blocks = static_cast<unsigned>(rows);
  if (vec) {
    launch_pdl(fused_add_rmsnorm_kernel<8>, blocks, threads, 0, stream, x, residual, weight, eps, dim);
  } else {
    launch_pdl(fused_add_rmsnorm_kernel<1>, blocks, threads, 0, stream, x, residual, weight, eps, dim);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void silu_and_mul(const uint16_t* gate_up, int64_t rows, int64_t n, uint16_t* out,
                  cudaStream_t stream) {
  check_rows("silu_and_mul", rows);
  LOWBIT_CHECK(n >= 1, "silu_and_mul: n is " + std::to_string(n) + ", must be >= 1");
  if (rows == 0) return;
  LOWBIT_CHECK(gate_up != nullptr && out != nullptr, "silu_and_mul: gate_up and out must be non-null");
  // The up half starts n elements after the gate half: 16-byte aligned only when n % 8 == 0.
  const bool vec = n % 8 == 0 && aligned16(gate_up) && aligned16(out);
  constexpr int kThreads = 256;
  const int64_t packs = vec ? n / 8 : n;
  const int64_t chunks = (packs + kThreads - 1) / kThreads;
  LOWBIT_CHECK(chunks <= 65535, "silu_and_mul: n = " + std::to_string(n) + " is too large");
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(chunks));
  if (vec) {
    launch_pdl(silu_and_mul_kernel<8>, grid, kThreads, 0, stream, gate_up, n, out);
  } else {
    launch_pdl(silu_and_mul_kernel<1>, grid, kThreads, 0, stream, gate_up, n, out);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void rope_neox(uint16_t* q, uint16_t* k, const int32_t* positions, int64_t rows, int heads,
               int kv_heads, int head_dim, int rotary_dim, const float* cos_sin,
               int64_t max_positions, cudaStream_t stream, int64_t q_stride, int64_t k_stride) {
  check_rows("rope_neox", rows);
  LOWBIT_CHECK(heads >= 0 && kv_heads >= 0 && heads + kv_heads >= 1,
               "rope_neox: heads and kv_heads must be >= 0 and not both 0");
  LOWBIT_CHECK(head_dim >= 2 && rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= head_dim,
               "rope_neox: rotary_dim " + std::to_string(rotary_dim) +
                   " must be even, >= 2 and <= head_dim " + std::to_string(head_dim));
  LOWBIT_CHECK(max_positions >= 1, "rope_neox: max_positions must be >= 1");
  if (q_stride == 0) q_stride = static_cast<int64_t>(heads) * head_dim;
  if (k_stride == 0) k_stride = static_cast<int64_t>(kv_heads) * head_dim;
  LOWBIT_CHECK(q_stride >= static_cast<int64_t>(heads) * head_dim &&
                   k_stride >= static_cast<int64_t>(kv_heads) * head_dim,
               "rope_neox: q_stride / k_stride are shorter than a row of heads");
  if (rows == 0) return;
  LOWBIT_CHECK((heads == 0 || q != nullptr) && (kv_heads == 0 || k != nullptr) &&
                   positions != nullptr && cos_sin != nullptr,
               "rope_neox: q, k (when it has heads), positions and cos_sin must be non-null");
  RopeParams rp{q, k, positions, cos_sin, q_stride, k_stride, max_positions,
                heads, kv_heads, head_dim, rotary_dim / 2};
  const int half = rotary_dim / 2;
  const bool vec = half % 8 == 0 && head_dim % 8 == 0 && q_stride % 8 == 0 && k_stride % 8 == 0 &&
                   (heads == 0 || aligned16(q)) && (kv_heads == 0 || aligned16(k)) &&
                   aligned16(cos_sin);
  const int64_t work = static_cast<int64_t>(heads + kv_heads) * (vec ? half / 8 : half);
  const int threads = row_threads(work);
  if (vec) {
    rope_neox_kernel<8><<<static_cast<unsigned>(rows), threads, 0, stream>>>(rp);
  } else {
    rope_neox_kernel<1><<<static_cast<unsigned>(rows), threads, 0, stream>>>(rp);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void embedding_gather(const uint16_t* table, int64_t vocab, int64_t hidden, const int32_t* ids,
                      int64_t rows, uint16_t* out, int32_t* error, cudaStream_t stream) {
  check_rows("embedding_gather", rows);
  LOWBIT_CHECK(vocab >= 1 && hidden >= 1, "embedding_gather: table shape [" +
                                              std::to_string(vocab) + ", " +
                                              std::to_string(hidden) + "] must be non-empty");
  if (rows == 0) return;
  LOWBIT_CHECK(table != nullptr && ids != nullptr && out != nullptr,
               "embedding_gather: table, ids and out must be non-null");
  const bool vec = hidden % 8 == 0 && aligned16(table) && aligned16(out);
  const int threads = row_threads(vec ? hidden / 8 : hidden);
  const auto blocks = static_cast<unsigned>(rows);
  if (vec) {
    launch_pdl(embedding_gather_kernel<8>, blocks, threads, 0, stream, table, vocab, hidden, ids, out, error);
  } else {
    launch_pdl(embedding_gather_kernel<1>, blocks, threads, 0, stream, table, vocab, hidden, ids, out, error);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void check_embedding_error(int32_t* error, int64_t vocab, cudaStream_t stream) {
  LOWBIT_CHECK(error != nullptr, "check_embedding_error: error must be non-null");
  int32_t words[kEmbeddingErrorWords] = {0, 0};
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(words, error, sizeof(words), cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (words[0] == 0) return;
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(error, 0, sizeof(words), stream));
  throw InvalidArgument("embedding_gather: token id " + std::to_string(words[1]) + " at row " +
                        std::to_string(words[0] - 1) + " is outside the vocabulary [0, " +
                        std::to_string(vocab) + ")");
}

void add(uint16_t* y, const uint16_t* x, int64_t n, cudaStream_t stream) {
  LOWBIT_CHECK(n >= 0, "add: n is " + std::to_string(n) + ", must be >= 0");
  if (n == 0) return;
  LOWBIT_CHECK(y != nullptr && x != nullptr, "add: y and x must be non-null");
  const bool vec = n % 8 == 0 && aligned16(y) && aligned16(x);
  const int64_t packs = vec ? n / 8 : n;
  constexpr int kThreads = 256;
  // Enough blocks to fill the chip several times over; the grid-stride loop covers the rest.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((packs + kThreads - 1) / kThreads, 8192));
  if (vec) {
    add_kernel<8><<<blocks, kThreads, 0, stream>>>(y, x, packs);
  } else {
    add_kernel<1><<<blocks, kThreads, 0, stream>>>(y, x, packs);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::kernels::cuda
