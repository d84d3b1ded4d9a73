// Decode-path attention for the query heads that share one KV head (one GQA group, one query):
// the same plain loops compiled once per ISA (attention.cc: baseline, attention_avx2.cc,
// attention_avx512.cc) and picked at runtime from cpu_features(), like the matmul kernels.
#pragma once

#include <cstdint>

namespace lowbit::kernels::detail {

struct GroupAttentionArgs {
  const float* q;  // `group` query heads, head_dim apart
  const float* k;  // key of position 0 for this KV head; rows kv_stride apart
  const float* v;
  int64_t kv_stride;
  int64_t lo, hi;  // visible keys [lo, hi)
  int group;
  int64_t head_dim;
  float scale;
  float* scores;  // scratch: group * (hi - lo)
  float* out;     // `group` output heads, head_dim apart
};

using GroupAttentionFn = void (*)(const GroupAttentionArgs&);

void group_attention_baseline(const GroupAttentionArgs& args);
void group_attention_avx2(const GroupAttentionArgs& args);
void group_attention_avx512(const GroupAttentionArgs& args);

// The best of the above for this CPU.
GroupAttentionFn group_attention_kernel();

}  // namespace lowbit::kernels::detail
