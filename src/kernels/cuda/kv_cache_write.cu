// write_kv_paged: new keys and values into their paged-cache slots (vLLM's reshape_and_cache).
// One CTA per token; each thread moves 8 values (16 bytes of bf16 in, 16 or 8 bytes out).
// FP8 follows KvCacheQuantizer::round_rows: code = e4m3(clamp(x / s, -448, 448)), round to
// nearest even, with x the bf16 value as fp32 and / the IEEE division (nvcc's default).
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"

namespace lowbit::kernels::cuda {

namespace {

__device__ __forceinline__ uint8_t to_e4m3(float x, float scale) {
  float q = x / scale;
  // NaN stays NaN (code 0x7F), as std::clamp leaves it on the CPU; fminf/fmaxf would drop it.
  if (!isnan(q)) q = fminf(fmaxf(q, -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

template <bool kFp8>
__global__ void write_kv_kernel(const __nv_bfloat16* __restrict__ k, int64_t k_stride,
                                const __nv_bfloat16* __restrict__ v, int64_t v_stride,
                                const int32_t* __restrict__ slots, uint8_t* __restrict__ k_cache,
                                uint8_t* __restrict__ v_cache, int width, int head_dim,
                                const float* __restrict__ k_scale,
                                const float* __restrict__ v_scale, int scale_per_head) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  for (int i = threadIdx.x * 8; i < width; i += blockDim.x * 8) {
    const uint4 kw = *reinterpret_cast<const uint4*>(k + t * k_stride + i);
    const uint4 vw = *reinterpret_cast<const uint4*>(v + t * v_stride + i);
    const int64_t e = slot * width + i;  // element index in the pool
    if constexpr (!kFp8) {
      *reinterpret_cast<uint4*>(k_cache + e * 2) = kw;
      *reinterpret_cast<uint4*>(v_cache + e * 2) = vw;
    } else {
      const int h = scale_per_head ? i / head_dim : 0;  // 8 values never straddle a head
      const float sk = k_scale[h], sv = v_scale[h];
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
      *reinterpret_cast<uint2*>(k_cache + e) = make_uint2(kout[0], kout[1]);
      *reinterpret_cast<uint2*>(v_cache + e) = make_uint2(vout[0], vout[1]);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void write_kv_paged(const __nv_bfloat16* k, int64_t k_stride, const __nv_bfloat16* v,
                    int64_t v_stride, const int32_t* slot_mapping, int64_t tokens,
                    const PagedKvCache& cache, cudaStream_t stream) {
  const std::string where = "cuda::write_kv_paged: ";
  LOWBIT_CHECK(cache.kv_heads > 0 && cache.head_dim > 0 && cache.head_dim % 8 == 0,
               where + "cache.kv_heads must be > 0 and cache.head_dim a positive multiple of 8 (got " +
                   std::to_string(cache.kv_heads) + ", " + std::to_string(cache.head_dim) + ")");
  LOWBIT_CHECK(cache.k_blocks != nullptr && cache.v_blocks != nullptr &&
                   aligned16(cache.k_blocks) && aligned16(cache.v_blocks),
               where + "cache.k_blocks/v_blocks must be non-null and 16-byte aligned");
  LOWBIT_CHECK(tokens >= 0 && tokens <= INT_MAX, where + "tokens out of range: " + std::to_string(tokens));
  const bool fp8 = cache.dtype == KvCacheDtype::FP8_E4M3;
  if (fp8) {
    LOWBIT_CHECK(cache.k_scale != nullptr && cache.v_scale != nullptr,
                 where + "an fp8 cache needs cache.k_scale and cache.v_scale");
    LOWBIT_CHECK(cache.scale_count == 1 || cache.scale_count == cache.kv_heads,
                 where + "cache.scale_count must be 1 or kv_heads, got " +
                     std::to_string(cache.scale_count));
  }
  if (tokens == 0) return;
  const int width = cache.kv_heads * cache.head_dim;
  const int64_t ks = k_stride == 0 ? width : k_stride;
  const int64_t vs = v_stride == 0 ? width : v_stride;
  LOWBIT_CHECK(k != nullptr && v != nullptr && aligned16(k) && aligned16(v),
               where + "k and v must be non-null and 16-byte aligned");
  LOWBIT_CHECK(ks >= width && vs >= width && ks % 8 == 0 && vs % 8 == 0,
               where + "k_stride/v_stride must be 0 or multiples of 8 >= " + std::to_string(width));
  LOWBIT_CHECK(slot_mapping != nullptr, where + "slot_mapping is required");
  const int threads = std::min(128, ((width / 8 + 31) / 32) * 32);
  const int per_head = fp8 && cache.scale_count == cache.kv_heads && cache.kv_heads > 1 ? 1 : 0;
  auto* kc = static_cast<uint8_t*>(cache.k_blocks);
  auto* vc = static_cast<uint8_t*>(cache.v_blocks);
  if (fp8) {
    write_kv_kernel<true><<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
        k, ks, v, vs, slot_mapping, kc, vc, width, cache.head_dim, cache.k_scale, cache.v_scale,
        per_head);
  } else {
    write_kv_kernel<false><<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
        k, ks, v, vs, slot_mapping, kc, vc, width, cache.head_dim, nullptr, nullptr, 0);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::kernels::cuda
