// Decode-path attention for the query heads that share one KV head (one GQA group, one query):
// the same plain loops compiled once per ISA (attention.cc: baseline, attention_avx2.cc,
// attention_avx512.cc) and picked at runtime from cpu_features(), like the matmul kernels.
// The cache may be paged (the serving engine's block pool): the loops walk the visible keys in
// runs of rows that lie in one block, so a contiguous cache is simply one block and both take the
// same code path (bit-identical results for the same values).
#pragma once

#include <cstdint>

namespace lowbit::kernels::detail {

struct GroupAttentionArgs {
  const float* q;  // `group` query heads, head_dim apart
  const float* k;  // this KV head's key of position 0 (paged: of row 0 of block id 0); rows
  const float* v;  // kv_stride apart
  int64_t kv_stride;
  int64_t lo, hi;  // visible keys [lo, hi)
  int group;
  int64_t head_dim;
  float scale;
  float* scores;  // scratch: group * (hi - lo)
  float* out;     // `group` output heads, head_dim apart
  // Paged caches: position j is row j % block_size of block table[j / block_size], blocks
  // block_size * kv_stride floats apart from k / v. Null table: one contiguous block.
  const int32_t* table = nullptr;
  int64_t block_size = 0;
};

using GroupAttentionFn = void (*)(const GroupAttentionArgs&);

void group_attention_baseline(const GroupAttentionArgs& args);
void group_attention_avx2(const GroupAttentionArgs& args);
void group_attention_avx512(const GroupAttentionArgs& args);

// The best of the above for this CPU.
GroupAttentionFn group_attention_kernel();

// The prefill path's softmax of one score row, in place (attention.cc): softmax_row's arithmetic
// with the sum of the exponentials in index order, as the scalar loop of the baseline build runs
// it, and SIMD only where that changes no rounding.
void prefill_softmax_row(float* row, int64_t n);

}  // namespace lowbit::kernels::detail
