// Decode attention over the paged KV cache: one query per sequence.
//
// Grid: (context split, KV head × head chunk, sequence). A CTA holds the query rows of up to 16
// heads of one GQA group (the M = 16 rows of mma.m16n8k16; a group of 4 leaves 12 rows idle,
// which costs nothing here: decode is bound by reading the cache) and streams its slice of the
// context through shared memory in 64-position tiles, kStages deep with cp.async, so every cached
// K/V row is read from HBM once per group. Within a tile the four warps take 16 positions each
// and keep their own online-softmax state; at the end they merge through shared memory. When
// few CTAs would cover the GPU (small batch, long context) the context is split over CTAs
// (flash-decoding): each writes an unnormalized partial output with its max and denominator,
// and decode_reduce_kernel merges the splits.
//
// Bytes: 2 · context · kv_heads · head_dim · sizeof(kv) per sequence and layer, plus the
// partials (heads · splits · (head_dim + 2) · 4, a few % at the chosen split sizes).
#include <algorithm>
#include <climits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"

namespace lowbit::kernels::cuda {

namespace {

using attn::kThreads;
using attn::kTileN;
using attn::kWarps;

constexpr int kMinChunk = 128;  // fewest positions per split: bounds the partial traffic

template <int HD, bool kFp8>
struct DecodeConfig {
  static constexpr int kStages = kFp8 ? 4 : 3;
  using Smem = attn::KvSmem<HD, kFp8, kStages>;
  static constexpr int kQBytes = 16 * HD * 2;
  static constexpr int kCombineStride = HD + 4;  // floats; the pad spreads rows over banks
  static constexpr int kCombineBytes = (kWarps * 16 * kCombineStride + 2 * kWarps * 16) * 4;
  static constexpr int kSmemBytes =
      kQBytes + (Smem::kBytes > kCombineBytes ? Smem::kBytes : kCombineBytes);
};

// Merges the four warps' states and writes the output (one split) or the partials.
template <int HD, bool kFp8>
__device__ __forceinline__ void decode_epilogue(const attn::Params& p, uint8_t* smem, int seq,
                                                int split, int head0, int rows, float v_mult,
                                                const float (&o)[HD / 8][4], const float (&m)[2],
                                                float (&l)[2]) {
  using Cfg = DecodeConfig<HD, kFp8>;
  constexpr int kStride = Cfg::kCombineStride;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* cmb = reinterpret_cast<float*>(smem + Cfg::kQBytes);
  float* cm = cmb + kWarps * 16 * kStride;
  float* cl = cm + kWarps * 16;
  l[0] = attn::quad_sum(l[0]);
  l[1] = attn::quad_sum(l[1]);
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const int row = warp * 16 + g + 8 * ri;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      cmb[row * kStride + 8 * nt + 2 * tq] = o[nt][2 * ri];
      cmb[row * kStride + 8 * nt + 2 * tq + 1] = o[nt][2 * ri + 1];
    }
    if (tq == 0) {
      cm[row] = m[ri];
      cl[row] = l[ri];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < rows * HD; idx += kThreads) {
    const int r = idx / HD, d = idx % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, cm[w * 16 + r]);
    const float mu = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float a = exp2f(cm[w * 16 + r] - mu);
      sum += a * cl[w * 16 + r];
      acc += a * cmb[(w * 16 + r) * kStride + d];
    }
    const int head = head0 + r;
    if (p.num_splits == 1) {
      p.out[int64_t{seq} * p.out_stride + int64_t{head} * HD + d] =
          __float2bfloat16(sum > 0.0f ? acc * (v_mult / sum) : 0.0f);
    } else {
      const int64_t base = (int64_t{seq} * p.heads + head) * p.num_splits + split;
      p.ws_o[base * HD + d] = acc * v_mult;
      if (d == 0) {
        p.ws_m[base] = mx;
        p.ws_l[base] = sum;
      }
    }
  }
}

template <int HD, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) decode_kernel(const attn::Params p) {
  using Cfg = DecodeConfig<HD, kFp8>;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ __align__(128) uint8_t smem[];
  pdl_begin();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x;
  const int kvh = blockIdx.y / p.head_chunks;
  const int head0 = kvh * p.group + (blockIdx.y % p.head_chunks) * 16;
  const int rows = min(16, (kvh + 1) * p.group - head0);
  const int seq = blockIdx.z;
  const int ctx = p.context_lens[seq];
  const int lo = p.window > 0 ? max(0, ctx - p.window) : 0;
  const int n_valid = (ctx - lo + p.chunk - 1) / p.chunk;
  if (p.num_splits > 1 && split >= n_valid) return;  // this sequence is shorter: no partial
  const int j_begin = lo + split * p.chunk;
  const int j_end = min(ctx, j_begin + p.chunk);
  const int tiles = j_end > j_begin ? (j_end - j_begin + kTileN - 1) / kTileN : 0;

  // The group's query rows (rows past `rows` are zero: their scores are never used).
  const uint32_t q_tile = attn::smem_addr(smem);
  const __nv_bfloat16* q_rows = p.q + int64_t{seq} * p.q_stride + int64_t{head0} * HD;
  for (int idx = tid; idx < 16 * (HD / 8); idx += kThreads) {
    const int r = idx / (HD / 8), c = idx % (HD / 8);
    const bool valid = r < rows;
    attn::cp_async_16(q_tile + attn::swz<HD>(r, c), valid ? q_rows + r * HD + c * 8 : p.q, valid);
  }
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
    if (s < tiles) attn::load_kv_tile(sm, s, src, j_begin + s * kTileN, j_end, tid);
    attn::cp_async_commit();
  }
  attn::cp_async_wait<kStages - 1>();  // the Q group
  __syncthreads();
  uint32_t qa[HD / 16][4];
  attn::load_q_frags<HD>(q_tile, 0, lane, qa);

  const int si = p.scale_per_head ? kvh : 0;
  const float k_mult = kFp8 ? p.scale_log2 * p.k_scale[si] : p.scale_log2;
  const float v_mult = kFp8 ? p.v_scale[si] : 1.0f;
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  for (int t = 0; t < tiles; ++t) {
    attn::cp_async_wait<kStages - 2>();  // tile t has landed ...
    __syncthreads();                      // ... for every thread, and tile t-1 is consumed
    const int next = t + kStages - 1;
    if (next < tiles) attn::load_kv_tile(sm, next % kStages, src, j_begin + next * kTileN, j_end, tid);
    attn::cp_async_commit();
    const int slot = t % kStages;
    if constexpr (kFp8) {
      attn::convert_fp8_tiles<HD, kStages>(sm, slot, tid);
      __syncthreads();
    }
    float s[2][4];
    attn::qk_16<HD>(qa, attn::smem_addr(sm.k_tile(slot)), 16 * warp, lane, s[0], s[1]);
    const int j = j_begin + t * kTileN + 16 * warp + 2 * (lane & 3);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = j + 8 * nt + (e & 1) < j_end ? s[nt][e] * k_mult : -INFINITY;
      }
    }
    attn::online_softmax<2, HD / 8>(s, m, l, o);
    attn::pv_16<HD>(s[0], s[1], attn::smem_addr(sm.v_tile(slot)), 16 * warp, lane, o);
  }
  attn::cp_async_wait<0>();
  __syncthreads();  // the tiles' shared memory becomes the merge buffer
  decode_epilogue<HD, kFp8>(p, smem, seq, split, head0, rows, v_mult, o, m, l);
}

// Merges the splits of one (sequence, head): one thread per output dimension.
template <int HD>
__global__ void __launch_bounds__(HD) decode_reduce_kernel(const attn::Params p) {
  pdl_begin();
  const int head = blockIdx.x, seq = blockIdx.y, d = threadIdx.x;
  const int ctx = p.context_lens[seq];
  const int lo = p.window > 0 ? max(0, ctx - p.window) : 0;
  const int n = min(p.num_splits, (ctx - lo + p.chunk - 1) / p.chunk);
  const int64_t base = (int64_t{seq} * p.heads + head) * p.num_splits;
  float mx = -INFINITY;
  for (int s = 0; s < n; ++s) mx = fmaxf(mx, p.ws_m[base + s]);
  const float mu = mx == -INFINITY ? 0.0f : mx;
  float sum = 0.0f, acc = 0.0f;
  for (int s = 0; s < n; ++s) {
    const float a = exp2f(p.ws_m[base + s] - mu);
    sum += a * p.ws_l[base + s];
    acc += a * p.ws_o[(base + s) * HD + d];
  }
  p.out[int64_t{seq} * p.out_stride + int64_t{head} * HD + d] =
      __float2bfloat16(sum > 0.0f ? acc / sum : 0.0f);
}

struct SplitPlan {
  int num_splits = 1;
  int chunk = INT_MAX / 2;  // one split: the whole context
  int head_chunks = 1;
};

// Enough CTAs for two waves of two per multiprocessor, in splits of at least kMinChunk positions
// (a multiple of the tile).
SplitPlan plan_splits(const AttentionShape& shape, int num_seqs, int max_context_len) {
  SplitPlan plan;
  const int group = shape.heads / shape.kv_heads;
  plan.head_chunks = (group + 15) / 16;
  int64_t len = max_context_len;
  if (shape.window > 0) len = std::min<int64_t>(len, shape.window);
  len = std::max<int64_t>(len, 1);
  const int64_t base = int64_t{std::max(num_seqs, 1)} * shape.kv_heads * plan.head_chunks;
  const int64_t target = 4 * int64_t{detail::multiprocessor_count()};
  const int64_t want = base >= target ? 1 : (target + base - 1) / base;
  int64_t chunk = (len + want - 1) / want;
  chunk = std::max<int64_t>((chunk + kTileN - 1) / kTileN * kTileN, kMinChunk);
  const int64_t splits = (len + chunk - 1) / chunk;
  if (splits > 1) {
    plan.num_splits = static_cast<int>(splits);
    plan.chunk = static_cast<int>(chunk);
  }
  return plan;
}

void check_decode_shape(const AttentionShape& shape) {
  if (shape.head_dim != 64 && shape.head_dim != 128) {
    throw Unsupported("cuda::decode_attention: head_dim " + std::to_string(shape.head_dim) +
                      " is not supported (64 or 128)");
  }
  LOWBIT_CHECK(shape.heads > 0 && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0,
               "cuda::decode_attention: shape.heads must be a positive multiple of shape.kv_heads");
}

template <int HD, bool kFp8>
void launch_decode(const attn::Params& p, int num_seqs, cudaStream_t stream) {
  using Cfg = DecodeConfig<HD, kFp8>;
  const auto kernel = decode_kernel<HD, kFp8>;
  detail::allow_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes);
  const dim3 grid(static_cast<unsigned>(p.num_splits), static_cast<unsigned>(p.kv_heads * p.head_chunks),
                  static_cast<unsigned>(num_seqs));
  launch_pdl(kernel, grid, kThreads, Cfg::kSmemBytes, stream, p);
  LOWBIT_CUDA_CHECK_LAUNCH();
  if (p.num_splits > 1) {
    launch_pdl(decode_reduce_kernel<HD>, dim3(static_cast<unsigned>(p.heads), static_cast<unsigned>(num_seqs)),
               HD, 0, stream, p);
    LOWBIT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

size_t decode_attention_workspace_bytes(const AttentionShape& shape, int num_seqs,
                                        int max_context_len) {
  check_decode_shape(shape);
  if (num_seqs <= 0) return 0;
  const SplitPlan plan = plan_splits(shape, num_seqs, max_context_len);
  if (plan.num_splits == 1) return 0;
  return static_cast<size_t>(num_seqs) * static_cast<size_t>(shape.heads) *
         static_cast<size_t>(plan.num_splits) * static_cast<size_t>(shape.head_dim + 2) *
         sizeof(float);
}

void decode_attention(const __nv_bfloat16* q, int64_t q_stride, const PagedKvCache& cache,
                      const PagedBatch& batch, const AttentionShape& shape, __nv_bfloat16* out,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_decode_shape(shape);
  attn::Params p = detail::attention_params("decode_attention", q, q_stride, cache, batch, shape, out);
  if (batch.num_seqs == 0) return;
  LOWBIT_CHECK(batch.num_seqs <= 65535, "cuda::decode_attention: batch.num_seqs " +
                                            std::to_string(batch.num_seqs) + " exceeds 65535");
  const SplitPlan plan = plan_splits(shape, batch.num_seqs, batch.max_context_len);
  p.head_chunks = plan.head_chunks;
  p.chunk = plan.chunk;
  p.num_splits = plan.num_splits;
  if (plan.num_splits > 1) {
    const size_t need = decode_attention_workspace_bytes(shape, batch.num_seqs, batch.max_context_len);
    LOWBIT_CHECK(workspace != nullptr && workspace_bytes >= need &&
                     (reinterpret_cast<uintptr_t>(workspace) & 15u) == 0,
                 "cuda::decode_attention: workspace of " + std::to_string(workspace_bytes) +
                     " bytes; this batch needs " + std::to_string(need) + " (16-byte aligned)");
    const size_t partials = static_cast<size_t>(batch.num_seqs) * shape.heads * plan.num_splits;
    p.ws_o = static_cast<float*>(workspace);
    p.ws_m = p.ws_o + partials * shape.head_dim;
    p.ws_l = p.ws_m + partials;
  }
  const bool fp8 = cache.dtype == KvCacheDtype::FP8_E4M3;
  if (shape.head_dim == 64) {
    fp8 ? launch_decode<64, true>(p, batch.num_seqs, stream) : launch_decode<64, false>(p, batch.num_seqs, stream);
  } else {
    fp8 ? launch_decode<128, true>(p, batch.num_seqs, stream) : launch_decode<128, false>(p, batch.num_seqs, stream);
  }
}

}  // namespace lowbit::kernels::cuda
