// Prefill attention over the paged KV cache: many queries per sequence, causal, GQA, optional
// sliding window; flash-attention-2 on mma.sync m16n8k16 (bf16 in, fp32 accumulate).
//
// The rows of a sequence's KV head are its (query, head of the group) pairs, query-major: row
// r = i · group + h. A CTA takes 64 consecutive rows (so every K/V tile it loads serves the whole
// group, and a GQA group of 4 covers 16 queries) and walks the cache positions they can see,
// [first visible of the first query, last query's position], in 64-position tiles, double
// buffered with cp.async. Each of the four warps owns 16 rows: S = Q·Kᵀ and O += P·V on tensor
// cores, the softmax online in fp32, masks applied only to tiles that cross the causal diagonal
// or the window's edge. CTAs go in descending row order so the long (late-query) ones start
// first.
//
// FLOPs (causal, no past): 4 · n²/2 · heads · head_dim; K/V bytes are re-read once per 64-row
// CTA from L2, so the kernel is bound by tensor-core and shared-memory throughput, not HBM.
#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/cuda_check.h"

namespace lowbit::kernels::cuda {

namespace {

using attn::kThreads;
using attn::kTileN;

template <int HD, bool kFp8>
struct PrefillConfig {
  static constexpr int kRows = 64;  // 16 per warp
  static constexpr int kStages = kFp8 ? 3 : 2;
  using Smem = attn::KvSmem<HD, kFp8, kStages>;
  static constexpr int kQBytes = kRows * HD * 2;
  static constexpr int kSmemBytes = kQBytes + Smem::kBytes;
};

// Loads the CTA's 64 query rows into a swizzled bf16 tile (rows past the sequence are zeros).
template <int HD>
__device__ __forceinline__ void load_q_tile(const attn::Params& p, uint32_t q_tile, int q0,
                                            int row0, int total_rows, int kvh, int tid) {
  for (int idx = tid; idx < 64 * (HD / 8); idx += kThreads) {
    const int r = idx / (HD / 8), c = idx % (HD / 8);
    const int fr = row0 + r;
    const bool valid = fr < total_rows;
    const __nv_bfloat16* src = p.q;
    if (valid) {
      const int i = fr / p.group, h = fr - i * p.group;
      src = p.q + int64_t{q0 + i} * p.q_stride + int64_t{kvh * p.group + h} * HD + c * 8;
    }
    attn::cp_async_16(q_tile + attn::swz<HD>(r, c), src, valid);
  }
}

template <int HD, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) prefill_kernel(const attn::Params p) {
  using Cfg = PrefillConfig<HD, kFp8>;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = blockIdx.z, kvh = blockIdx.y;
  const int q0 = p.query_start[seq];
  const int nq = p.query_start[seq + 1] - q0;
  const int past = p.context_lens[seq] - nq;
  const int total_rows = nq * p.group;
  const int row0 = (gridDim.x - 1 - blockIdx.x) * Cfg::kRows;
  if (row0 >= total_rows) return;
  const int pos_min = past + row0 / p.group;
  const int pos_max = past + (min(row0 + Cfg::kRows, total_rows) - 1) / p.group;
  const int lo = p.window > 0 ? max(0, pos_min - p.window + 1) : 0;
  const int hi = pos_max + 1;
  const int tiles = hi > lo ? (hi - lo + kTileN - 1) / kTileN : 0;

  const uint32_t q_tile = attn::smem_addr(smem);
  load_q_tile<HD>(p, q_tile, q0, row0, total_rows, kvh, tid);
  attn::cp_async_commit();

  const attn::KvSmem<HD, kFp8, kStages> sm{smem + Cfg::kQBytes};
  constexpr int kElem = kFp8 ? 1 : 2;
  const attn::KvSource src{p.k_cache,
                           p.v_cache,
                           p.block_tables + int64_t{seq} * p.max_blocks,
                           p.block_size,
                           int64_t{p.kv_heads} * HD * kElem,
                           int64_t{kvh} * HD * kElem};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) attn::load_kv_tile(sm, s, src, lo + s * kTileN, hi, tid);
    attn::cp_async_commit();
  }
  attn::cp_async_wait<kStages - 1>();  // the Q group
  __syncthreads();
  uint32_t qa[HD / 16][4];
  attn::load_q_frags<HD>(q_tile, 16 * warp, lane, qa);

  // Positions of this thread's two rows (g and g + 8 of the warp's 16); -1 masks a padding row.
  int pos[2];
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const int fr = row0 + 16 * warp + (lane >> 2) + 8 * ri;
    pos[ri] = fr < total_rows ? past + fr / p.group : -1;
  }
  const int si = p.scale_per_head ? kvh : 0;
  const float k_mult = kFp8 ? p.scale_log2 * p.k_scale[si] : p.scale_log2;
  const float v_mult = kFp8 ? p.v_scale[si] : 1.0f;
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  for (int t = 0; t < tiles; ++t) {
    attn::cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = t + kStages - 1;
    if (next < tiles) attn::load_kv_tile(sm, next % kStages, src, lo + next * kTileN, hi, tid);
    attn::cp_async_commit();
    const int slot = t % kStages;
    if constexpr (kFp8) {
      attn::convert_fp8_tiles<HD, kStages>(sm, slot, tid);
      __syncthreads();
    }
    const int j0 = lo + t * kTileN;
    float s[8][4];
    const uint32_t k_tile = attn::smem_addr(sm.k_tile(slot));
#pragma unroll
    for (int np = 0; np < 4; ++np) attn::qk_16<HD>(qa, k_tile, 16 * np, lane, s[2 * np], s[2 * np + 1]);
    // Every row of the CTA sees the whole tile: no per-element mask.
    const bool full = j0 + kTileN - 1 <= pos_min && (p.window == 0 || j0 > pos_max - p.window);
    if (full) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] *= k_mult;
      }
    } else {
      const int jt = j0 + 2 * (lane & 3);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = jt + 8 * nt + (e & 1);
          const int position = pos[e >> 1];
          const bool visible = j <= position && (p.window == 0 || j > position - p.window);
          s[nt][e] = visible ? s[nt][e] * k_mult : -INFINITY;
        }
      }
    }
    attn::online_softmax<8, HD / 8>(s, m, l, o);
    const uint32_t v_tile = attn::smem_addr(sm.v_tile(slot));
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) attn::pv_16<HD>(s[2 * kk], s[2 * kk + 1], v_tile, 16 * kk, lane, o);
  }
  attn::cp_async_wait<0>();  // nothing may stay in flight when the CTA exits

#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const float sum = attn::quad_sum(l[ri]);  // all lanes: the shuffles need the full warp
    const int fr = row0 + 16 * warp + (lane >> 2) + 8 * ri;
    if (fr >= total_rows) continue;
    const int i = fr / p.group, h = fr - i * p.group;
    __nv_bfloat16* dst = p.out + int64_t{q0 + i} * p.out_stride +
                         int64_t{kvh * p.group + h} * HD + 2 * (lane & 3);
    const float inv = sum > 0.0f ? v_mult / sum : 0.0f;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      *reinterpret_cast<__nv_bfloat162*>(dst + 8 * nt) =
          __floats2bfloat162_rn(o[nt][2 * ri] * inv, o[nt][2 * ri + 1] * inv);
    }
  }
}

template <int HD, bool kFp8>
void launch_prefill(const attn::Params& p, const PagedBatch& batch, cudaStream_t stream) {
  using Cfg = PrefillConfig<HD, kFp8>;
  const auto kernel = prefill_kernel<HD, kFp8>;
  detail::allow_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes);
  const int64_t row_tiles = (int64_t{batch.max_query_len} * p.group + Cfg::kRows - 1) / Cfg::kRows;
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(p.kv_heads),
                  static_cast<unsigned>(batch.num_seqs));
  kernel<<<grid, kThreads, Cfg::kSmemBytes, stream>>>(p);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void prefill_attention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& cache,
                       const PagedBatch& batch, const AttentionShape& shape, __nv_bfloat16* out,
                       cudaStream_t stream) {
  const attn::Params p =
      detail::attention_params("prefill_attention", q, q_stride, cache, batch, shape, out);
  if (batch.num_seqs == 0 || batch.max_query_len == 0) return;
  LOWBIT_CHECK(batch.query_start != nullptr, "cuda::prefill_attention: batch.query_start is required");
  LOWBIT_CHECK(batch.max_query_len > 0 && batch.num_seqs <= 65535,
               "cuda::prefill_attention: batch.max_query_len must be >= 0 and batch.num_seqs <= 65535, got " +
                   std::to_string(batch.max_query_len) + " and " + std::to_string(batch.num_seqs));
  const bool fp8 = cache.dtype == KvCacheDtype::FP8_E4M3;
  if (shape.head_dim == 64) {
    fp8 ? launch_prefill<64, true>(p, batch, stream) : launch_prefill<64, false>(p, batch, stream);
  } else {
    fp8 ? launch_prefill<128, true>(p, batch, stream) : launch_prefill<128, false>(p, batch, stream);
  }
}

}  // namespace lowbit::kernels::cuda
