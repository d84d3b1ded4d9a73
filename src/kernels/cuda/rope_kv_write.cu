// rope_neox + write_kv_paged in one kernel (see rope_kv_write.h). One CTA per token: phase 1 is
// rope_neox_kernel's loop (small_ops.cu), phase 2, after a barrier, write_kv_kernel's loop
// (kv_cache_write.cu) over the rows phase 1 just rotated. The per-element arithmetic is written
// exactly as there, so both give the same bits; the tests compare against the two kernels.
#include "kernels/cuda/rope_kv_write.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

namespace {

struct RopeKvParams {
  uint16_t* q;
  uint16_t* k;  // written in phase 1, read back in phase 2: no __restrict__ / non-coherent loads
  const uint16_t* v;
  const int32_t* positions;
  const int32_t* slots;
  const float* cos_sin;
  uint8_t* k_cache;
  uint8_t* v_cache;
  const float* k_scale;
  const float* v_scale;
  int64_t q_stride, k_stride, v_stride, max_positions;
  int heads, kv_heads, head_dim, half;
  int scale_per_head;
};

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

template <int V>
__device__ __forceinline__ void load_bf16(const uint16_t* p, float (&f)[V]) {
  if constexpr (V == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 8; ++i)
      f[i] = bf16_bits_to_float(static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2))));
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = bf16_bits_to_float(p[i]);
  }
}

template <int V>
__device__ __forceinline__ void store_bf16(uint16_t* p, const float (&f)[V]) {
  if constexpr (V == 8) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = uint32_t{float_to_bf16_bits(f[2 * i])} |
             (uint32_t{float_to_bf16_bits(f[2 * i + 1])} << 16);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
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

// kv_cache_write.cu's conversion: NaN stays NaN, finite values clamp to ±448.
__device__ __forceinline__ uint8_t to_e4m3(float x, float scale) {
  float q = x / scale;
  if (!isnan(q)) q = fminf(fmaxf(q, -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

// Phase 1: rope_neox_kernel's loop for this token (each thread V pairs (j, j + half) of a head).
template <int V>
__device__ __forceinline__ void rotate(const RopeKvParams& rp, int64_t row) {
  int64_t pos = rp.positions[row];
  pos = pos < 0 ? 0 : (pos >= rp.max_positions ? rp.max_positions - 1 : pos);
  const float* cos_row = rp.cos_sin + pos * 2 * rp.half;
  const float* sin_row = cos_row + rp.half;
  const int groups = rp.half / V;
  const int total = (rp.heads + rp.kv_heads) * groups;
  for (int t = threadIdx.x; t < total; t += blockDim.x) {
    const int head = t / groups;
    const int j = (t - head * groups) * V;
    uint16_t* p =
        head < rp.heads
            ? rp.q + row * rp.q_stride + static_cast<int64_t>(head) * rp.head_dim
            : rp.k + row * rp.k_stride + static_cast<int64_t>(head - rp.heads) * rp.head_dim;
    float a[V], b[V], c[V], s[V];
    load_bf16<V>(p + j, a);
    load_bf16<V>(p + j + rp.half, b);
    load_f32<V>(cos_row + j, c);
    load_f32<V>(sin_row + j, s);
    float lo[V], hi[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      lo[i] = a[i] * c[i] - b[i] * s[i];
      hi[i] = b[i] * c[i] + a[i] * s[i];
    }
    store_bf16<V>(p + j, lo);
    store_bf16<V>(p + j + rp.half, hi);
  }
}

// Phase 2: write_kv_kernel's loop for this token (8 values per access).
template <bool kFp8>
__device__ __forceinline__ void write_cache(const RopeKvParams& rp, int64_t row) {
  const int64_t slot = rp.slots[row];
  if (slot < 0) return;
  const int width = rp.kv_heads * rp.head_dim;
  for (int i = threadIdx.x * 8; i < width; i += blockDim.x * 8) {
    const uint4 kw = *reinterpret_cast<const uint4*>(rp.k + row * rp.k_stride + i);
    const uint4 vw = *reinterpret_cast<const uint4*>(rp.v + row * rp.v_stride + i);
    const int64_t e = slot * width + i;
    if constexpr (!kFp8) {
      *reinterpret_cast<uint4*>(rp.k_cache + e * 2) = kw;
      *reinterpret_cast<uint4*>(rp.v_cache + e * 2) = vw;
    } else {
      const int h = rp.scale_per_head ? i / rp.head_dim : 0;
      const float sk = rp.k_scale[h], sv = rp.v_scale[h];
      const uint32_t kin[4] = {kw.x, kw.y, kw.z, kw.w};
      const uint32_t vin[4] = {vw.x, vw.y, vw.z, vw.w};
      uint32_t kout[2] = {0, 0}, vout[2] = {0, 0};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t kb = (kin[j / 2] >> (16 * (j % 2))) & 0xFFFFu;
        const uint32_t vb = (vin[j / 2] >> (16 * (j % 2))) & 0xFFFFu;
        kout[j / 4] |= uint32_t{to_e4m3(__uint_as_float(kb << 16), sk)} << (8 * (j % 4));
        vout[j / 4] |= uint32_t{to_e4m3(__uint_as_float(vb << 16), sv)} << (8 * (j % 4));
      }
      *reinterpret_cast<uint2*>(rp.k_cache + e) = make_uint2(kout[0], kout[1]);
      *reinterpret_cast<uint2*>(rp.v_cache + e) = make_uint2(vout[0], vout[1]);
    }
  }
}

template <int V, bool kFp8>
__global__ void rope_kv_write_kernel(const RopeKvParams rp) {
  pdl_begin();
  const int64_t row = blockIdx.x;
  rotate<V>(rp, row);
  __syncthreads();  // the rotated k rows (global memory) are visible to the whole CTA
  write_cache<kFp8>(rp, row);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Host checks of rope_neox and write_kv_paged, in that order; returns whether rope runs 8-wide.
bool check_args(const RopeKvParams& rp, int64_t rows, int rotary_dim, const PagedKvCache& cache) {
  const std::string where = "rope_neox_write_kv: ";
  LOWBIT_CHECK(rows >= 0 && rows <= INT_MAX, where + "rows out of range: " + std::to_string(rows));
  LOWBIT_CHECK(rp.heads >= 0 && cache.kv_heads > 0,
               where + "heads must be >= 0 and cache.kv_heads > 0");
  LOWBIT_CHECK(cache.head_dim > 0 && cache.head_dim % 8 == 0,
               where + "cache.head_dim must be a positive multiple of 8 (got " +
                   std::to_string(cache.head_dim) + ")");
  LOWBIT_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= cache.head_dim,
               where + "rotary_dim " + std::to_string(rotary_dim) +
                   " must be even, >= 2 and <= head_dim " + std::to_string(cache.head_dim));
  LOWBIT_CHECK(rp.max_positions >= 1, where + "max_positions must be >= 1");
  const int64_t width = static_cast<int64_t>(cache.kv_heads) * cache.head_dim;
  LOWBIT_CHECK(rp.q_stride >= static_cast<int64_t>(rp.heads) * cache.head_dim &&
                   rp.k_stride >= width && rp.v_stride >= width && rp.k_stride % 8 == 0 &&
                   rp.v_stride % 8 == 0,
               where +
                   "q_stride / k_stride / v_stride are shorter than a row of heads, or the "
                   "k / v strides are not multiples of 8");
  LOWBIT_CHECK(cache.k_blocks != nullptr && cache.v_blocks != nullptr &&
                   aligned16(cache.k_blocks) && aligned16(cache.v_blocks),
               where + "cache.k_blocks/v_blocks must be non-null and 16-byte aligned");
  if (cache.dtype == KvCacheDtype::FP8_E4M3) {
    LOWBIT_CHECK(cache.k_scale != nullptr && cache.v_scale != nullptr,
                 where + "an fp8 cache needs cache.k_scale and cache.v_scale");
    LOWBIT_CHECK(cache.scale_count == 1 || cache.scale_count == cache.kv_heads,
                 where + "cache.scale_count must be 1 or kv_heads, got " +
                     std::to_string(cache.scale_count));
  }
  if (rows == 0) return false;
  LOWBIT_CHECK((rp.heads == 0 || rp.q != nullptr) && rp.k != nullptr && rp.v != nullptr &&
                   rp.positions != nullptr && rp.slots != nullptr && rp.cos_sin != nullptr,
               where +
                   "q (when it has heads), k, v, positions, slot_mapping and cos_sin must be "
                   "non-null");
  LOWBIT_CHECK(aligned16(rp.k) && aligned16(rp.v), where + "k and v must be 16-byte aligned");
  return rp.half % 8 == 0 && rp.head_dim % 8 == 0 && rp.q_stride % 8 == 0 && rp.k_stride % 8 == 0 &&
         (rp.heads == 0 || aligned16(rp.q)) && aligned16(rp.k) && aligned16(rp.cos_sin);
}

}  // namespace

void rope_neox_write_kv(uint16_t* q, int64_t q_stride, uint16_t* k, int64_t k_stride,
                        const uint16_t* v, int64_t v_stride, const int32_t* positions,
                        const int32_t* slot_mapping, int64_t rows, int heads, int rotary_dim,
                        const float* cos_sin, int64_t max_positions, const PagedKvCache& cache,
                        cudaStream_t stream) {
  const int64_t width = static_cast<int64_t>(cache.kv_heads) * cache.head_dim;
  RopeKvParams rp{};
  rp.q = q;
  rp.k = k;
  rp.v = v;
  rp.positions = positions;
  rp.slots = slot_mapping;
  rp.cos_sin = cos_sin;
  rp.k_cache = static_cast<uint8_t*>(cache.k_blocks);
  rp.v_cache = static_cast<uint8_t*>(cache.v_blocks);
  rp.k_scale = cache.k_scale;
  rp.v_scale = cache.v_scale;
  rp.q_stride = q_stride == 0 ? static_cast<int64_t>(heads) * cache.head_dim : q_stride;
  rp.k_stride = k_stride == 0 ? width : k_stride;
  rp.v_stride = v_stride == 0 ? width : v_stride;
  rp.max_positions = max_positions;
  rp.heads = heads;
  rp.kv_heads = cache.kv_heads;
  rp.head_dim = cache.head_dim;
  rp.half = rotary_dim / 2;
  const bool fp8 = cache.dtype == KvCacheDtype::FP8_E4M3;
  rp.scale_per_head = fp8 && cache.scale_count == cache.kv_heads && cache.kv_heads > 1 ? 1 : 0;
  const bool vec = check_args(rp, rows, rotary_dim, cache);
  if (rows == 0) return;
  // rope_neox's thread count for the rotation; the copy loop strides over any count.
  const int64_t work = static_cast<int64_t>(heads + cache.kv_heads) * (vec ? rp.half / 8 : rp.half);
  const int threads = static_cast<int>(std::clamp<int64_t>((work + 31) / 32 * 32, 32, 1024));
  const auto blocks = static_cast<unsigned>(rows);
  if (vec) {
    if (fp8)
      launch_pdl(rope_kv_write_kernel<8, true>, blocks, threads, 0, stream, rp);
    else
      launch_pdl(rope_kv_write_kernel<8, false>, blocks, threads, 0, stream, rp);
  } else {
    if (fp8)
      launch_pdl(rope_kv_write_kernel<1, true>, blocks, threads, 0, stream, rp);
    else
      launch_pdl(rope_kv_write_kernel<1, false>, blocks, threads, 0, stream, rp);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::kernels::cuda
