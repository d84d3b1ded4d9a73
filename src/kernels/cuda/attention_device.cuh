// Device building blocks shared by the paged attention kernels (attention_decode.cu,
// attention_prefill.cu): async tile loads through the block table, fp8 → bf16 conversion, and the
// mma.sync m16n8k16 fragments of the flash-attention loop. Internal to src/kernels/cuda.
//
// Tiles: a KV tile is kTileN = 64 cache positions of one KV head. BF16 tiles are stored in shared
// memory as [64][head_dim] with the 16-byte chunks of row r XOR-swizzled by (r & 7), so that the
// eight row addresses of one ldmatrix land in eight different bank groups. FP8 tiles arrive raw in
// a staging buffer and are converted into a swizzled bf16 tile once per CTA, after which both
// dtypes run the same tensor-core code (an e4m3 code is exact in bf16; its scale is applied to
// the fp32 scores and outputs instead).
//
// Fragment layouts (PTX ISA, mma.m16n8k16; g = lane / 4, t = lane % 4):
//   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C (16x8):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.h"

namespace lowbit::kernels::cuda::attn {

constexpr int kThreads = 128;  // 4 warps per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kTileN = 64;     // cache positions per KV tile

// Everything a kernel needs, as plain values (one struct for both kernels).
struct Params {
  const __nv_bfloat16* q = nullptr;
  int64_t q_stride = 0;
  __nv_bfloat16* out = nullptr;
  int64_t out_stride = 0;  // heads * head_dim
  const uint8_t* k_cache = nullptr;
  const uint8_t* v_cache = nullptr;
  const float* k_scale = nullptr;  // fp8 only
  const float* v_scale = nullptr;
  int scale_per_head = 0;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int max_blocks = 0;
  const int32_t* query_start = nullptr;  // prefill
  int block_size = 0, heads = 0, kv_heads = 0, group = 0;
  int window = 0;            // 0: unlimited
  float scale_log2 = 0.0f;   // softmax scale * log2(e): scores are kept in base-2 units
  // Decode: head_chunks CTAs of up to 16 query heads per KV head; the context split in `chunk`
  // positions, num_splits CTAs at most; partial results in the workspace when num_splits > 1.
  int head_chunks = 1, chunk = 0, num_splits = 1;
  float* ws_o = nullptr;  // [seqs, heads, num_splits, head_dim]
  float* ws_m = nullptr;  // [seqs, heads, num_splits] running max (base-2 units)
  float* ws_l = nullptr;  // [seqs, heads, num_splits] softmax denominators
};

// ---- PTX wrappers ----

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global → shared; when !valid the destination is zero-filled and nothing is
// read (src must still be a mapped address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a · b (bf16 inputs, fp32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two e4m3 codes, placed in bits 8..15 and 24..31 of y (all other bits zero), as a bf16 pair of
// the same values. Sign and the 7 exponent/mantissa bits move into a bf16 whose exponent is 120
// too small (normals become normal bf16, e4m3 subnormals become bf16 subnormals, zero stays
// zero); the exact multiply by 2^120 fixes the exponent. (The NaN codes 0x7F/0xFF read as ±480;
// write_kv_paged never produces them.)
__device__ __forceinline__ uint32_t e4m3_pair_to_bf16x2(uint32_t y) {
  const uint32_t bits = (y & 0x80008000u) | ((y & 0x7F007F00u) >> 4);
  const __nv_bfloat162 two_120 = __halves2bfloat162(__ushort_as_bfloat16(0x7B80),
                                                    __ushort_as_bfloat16(0x7B80));
  const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits), two_120);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- shared-memory tiles ----

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled bf16 [rows][HD] tile.
template <int HD>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * (HD * 2) + ((chunk ^ (row & 7)) << 4));
}

// Shared-memory layout of the KV pipeline: kStages stage slots of (K tile, V tile) as stored
// (bf16 swizzled, or raw fp8), plus for fp8 one converted bf16 (K, V) pair.
template <int HD, bool kFp8, int kStages>
struct KvSmem {
  static constexpr int kRowBytes = HD * (kFp8 ? 1 : 2);
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kTileBytes = kTileN * kRowBytes;
  static constexpr int kBf16TileBytes = kTileN * HD * 2;
  static constexpr int kBytes = kStages * 2 * kTileBytes + (kFp8 ? 2 * kBf16TileBytes : 0);

  uint8_t* base;
  __device__ uint8_t* k_stage(int s) const { return base + s * 2 * kTileBytes; }
  __device__ uint8_t* v_stage(int s) const { return k_stage(s) + kTileBytes; }
  // The bf16 tiles the tensor cores read for the tile in slot s.
  __device__ uint8_t* k_tile(int s) const {
    return kFp8 ? base + kStages * 2 * kTileBytes : k_stage(s);
  }
  __device__ uint8_t* v_tile(int s) const {
    return kFp8 ? base + kStages * 2 * kTileBytes + kBf16TileBytes : v_stage(s);
  }
};

// Where one sequence's rows of one KV head are.
struct KvSource {
  const uint8_t* k;       // cache base (a mapped address also used as dummy source)
  const uint8_t* v;
  const int32_t* table;   // this sequence's block table
  int block_size;
  int64_t row_bytes;      // kv_heads * head_dim * element size
  int64_t head_bytes;     // offset of this KV head in a row
};

// Issues the async copies of positions [j0, j0 + 64) of one KV head into slot `s`; positions at or
// past j_end are zero-filled (so masked probabilities multiply zeros, never stale NaNs).
template <int HD, bool kFp8, int kStages>
__device__ __forceinline__ void load_kv_tile(const KvSmem<HD, kFp8, kStages>& sm, int s,
                                             const KvSource& src, int j0, int j_end, int tid) {
  using Smem = KvSmem<HD, kFp8, kStages>;
  constexpr int kCpr = Smem::kChunksPerRow;
  constexpr int kChunks = kTileN * kCpr;
  static_assert(kChunks % kThreads == 0, "tile chunks must divide evenly over the threads");
  const uint32_t k_dst = smem_addr(sm.k_stage(s));
  const uint32_t v_dst = smem_addr(sm.v_stage(s));
#pragma unroll
  for (int it = 0; it < kChunks / kThreads; ++it) {
    const int idx = tid + it * kThreads;
    const int row = idx / kCpr;
    const int c = idx % kCpr;
    const int j = j0 + row;
    const bool valid = j < j_end;
    int64_t offset = 0;
    if (valid) {
      const int b = j / src.block_size;
      const int64_t slot = int64_t{src.table[b]} * src.block_size + (j - b * src.block_size);
      offset = slot * src.row_bytes + src.head_bytes + c * 16;
    }
    const uint32_t d = kFp8 ? static_cast<uint32_t>(row * Smem::kRowBytes + c * 16) : swz<HD>(row, c);
    cp_async_16(k_dst + d, src.k + offset, valid);
    cp_async_16(v_dst + d, src.v + offset, valid);
  }
}

// FP8 only: converts the raw tiles of slot s into the swizzled bf16 tiles (all threads; the
// caller synchronizes before and after).
template <int HD, int kStages>
__device__ __forceinline__ void convert_fp8_tiles(const KvSmem<HD, true, kStages>& sm, int s,
                                                  int tid) {
  constexpr int kCpr = HD / 16;  // 16 codes per chunk
  constexpr int kChunks = kTileN * kCpr;
#pragma unroll
  for (int kv = 0; kv < 2; ++kv) {
    const uint8_t* stage = kv == 0 ? sm.k_stage(s) : sm.v_stage(s);
    uint8_t* tile = kv == 0 ? sm.k_tile(s) : sm.v_tile(s);
#pragma unroll
    for (int it = 0; it < kChunks / kThreads; ++it) {
      const int idx = tid + it * kThreads;
      const int row = idx / kCpr;
      const int c = idx % kCpr;
      const uint4 w = *reinterpret_cast<const uint4*>(stage + row * HD + c * 16);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
      uint32_t o[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // codes 0,1 then 2,3 of the word, each pair as bf16x2 (low half = lower position)
        o[2 * i] = e4m3_pair_to_bf16x2(__byte_perm(words[i], 0u, 0x1404));
        o[2 * i + 1] = e4m3_pair_to_bf16x2(__byte_perm(words[i], 0u, 0x3424));
      }
      *reinterpret_cast<uint4*>(tile + swz<HD>(row, 2 * c)) = make_uint4(o[0], o[1], o[2], o[3]);
      *reinterpret_cast<uint4*>(tile + swz<HD>(row, 2 * c + 1)) = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
}

// ---- the flash-attention inner steps (one warp, 16 query rows) ----

// A fragments of 16 query rows starting at m0 of a swizzled bf16 Q tile.
template <int HD>
__device__ __forceinline__ void load_q_frags(uint32_t q_tile, int m0, int lane,
                                             uint32_t (&qa)[HD / 16][4]) {
  const int mi = lane >> 3;
  const int row = m0 + ((mi & 1) << 3) + (lane & 7);
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) ldmatrix_x4(qa[ks], q_tile + swz<HD>(row, 2 * ks + (mi >> 1)));
}

// Scores of the 16 rows against tile positions n0 .. n0+15: s0 for n0..n0+7, s1 for n0+8..n0+15.
template <int HD>
__device__ __forceinline__ void qk_16(const uint32_t (&qa)[HD / 16][4], uint32_t k_tile, int n0,
                                      int lane, float (&s0)[4], float (&s1)[4]) {
  const int mi = lane >> 3;
  const int row = n0 + ((mi >> 1) << 3) + (lane & 7);
#pragma unroll
  for (int i = 0; i < 4; ++i) s0[i] = s1[i] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    uint32_t b[4];
    ldmatrix_x4(b, k_tile + swz<HD>(row, 2 * ks + (mi & 1)));
    mma_bf16(s0, qa[ks], b[0], b[1]);
    mma_bf16(s1, qa[ks], b[2], b[3]);
  }
}

// o += P · V for tile positions k0 .. k0+15, P given as probabilities s0 (k0..k0+7) and s1.
template <int HD>
__device__ __forceinline__ void pv_16(const float (&s0)[4], const float (&s1)[4], uint32_t v_tile,
                                      int k0, int lane, float (&o)[HD / 8][4]) {
  const uint32_t pa[4] = {pack_bf16x2(s0[0], s0[1]), pack_bf16x2(s0[2], s0[3]),
                          pack_bf16x2(s1[0], s1[1]), pack_bf16x2(s1[2], s1[3])};
  const int mi = lane >> 3;
  const int row = k0 + ((mi & 1) << 3) + (lane & 7);
#pragma unroll
  for (int c = 0; c < HD / 8; c += 2) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, v_tile + swz<HD>(row, c + (mi >> 1)));
    mma_bf16(o[c], pa, b[0], b[1]);
    mma_bf16(o[c + 1], pa, b[2], b[3]);
  }
}

// Online softmax over new scores s (base-2 units, masked entries -inf) for the thread's two rows
// (ri = 0: row g, ri = 1: row g + 8): rescales o and l by exp2(m_old - m_new) and turns s into
// probabilities exp2(s - m_new). l is this thread's partial row sum (its columns only); the row max
// is reduced over the four threads of the quad that share the row.
template <int NT, int NO>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2],
                                               float (&o)[NO][4]) {
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * ri], s[nt][2 * ri + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[ri], mx);
    // A row that has seen only masked positions keeps m = -inf; subtracting 0 then keeps every
    // exp2 at exactly 0 instead of NaN.
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m[ri] - m_use);
    m[ri] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][2 * ri] = exp2f(s[nt][2 * ri] - m_use);
      s[nt][2 * ri + 1] = exp2f(s[nt][2 * ri + 1] - m_use);
      sum += s[nt][2 * ri] + s[nt][2 * ri + 1];
    }
    l[ri] = l[ri] * alpha + sum;
#pragma unroll
    for (int no = 0; no < NO; ++no) {
      o[no][2 * ri] *= alpha;
      o[no][2 * ri + 1] *= alpha;
    }
  }
}

// Quad-sum of the per-thread partial row sums.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

}  // namespace lowbit::kernels::cuda::attn

namespace lowbit::kernels::cuda::detail {

// Host side, attention.cu: checks the arguments common to both kernels (throws naming `fn` and the
// field) and fills the fields of Params common to both.
attn::Params attention_params(const char* fn, const __nv_bfloat16* q, int64_t q_stride,
                              const PagedKvCache& cache, const PagedBatch& batch,
                              const AttentionShape& shape, __nv_bfloat16* out);

// Multiprocessors of the current device.
int multiprocessor_count();

// Raises a kernel's dynamic shared-memory limit (needed above 48 KB).
void allow_smem(const void* kernel, int bytes);

}  // namespace lowbit::kernels::cuda::detail
