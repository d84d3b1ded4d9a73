// The loops behind group_attention_*; included by one .cc per ISA. Everything here has internal
// linkage so that each ISA's copy stays separate.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/ref/attention_group.h"

namespace lowbit::kernels::detail {
namespace {

// exp(x) for the softmax (x <= 0 after the max is subtracted), vectorizable: Cephes' expf
// (range reduction by ln 2, degree-6 polynomial), relative error below 2e-7 like libm's expf.
inline float exp_approx(float x) {
  // Clamp to [-87, 0]: keeps 2^n a normal float and the integer conversion defined (a NaN score
  // also lands on -87, so no undefined cast).
  x = x >= -87.0f ? x : -87.0f;
  x = x <= 0.0f ? x : 0.0f;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) * (1 << 23);
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return y * two_n;
}

// In place: row := softmax(row) over n values.
inline void softmax_row(float* row, int64_t n) {
  float max_score = row[0];
#pragma omp simd reduction(max : max_score)
  for (int64_t j = 0; j < n; ++j) max_score = std::max(max_score, row[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    row[j] = exp_approx(row[j] - max_score);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
}

// Cache rows [j, end) lie in one block; k / v point at row j (this KV head's part).
struct KvRun {
  const float* k;
  const float* v;
  int64_t end;
};

// The run starting at row j (< hi). One integer division per block, none per row.
inline KvRun kv_run(const GroupAttentionArgs& a, int64_t j) {
  if (a.table == nullptr) return KvRun{a.k + j * a.kv_stride, a.v + j * a.kv_stride, a.hi};
  const int64_t block = j / a.block_size;
  const int64_t offset =
      (int64_t{a.table[block]} * a.block_size + (j - block * a.block_size)) * a.kv_stride;
  const int64_t end = (block + 1) * a.block_size;
  return KvRun{a.k + offset, a.v + offset, end < a.hi ? end : a.hi};
}

// Each key and value row is read once for the whole group (GQA shares them). Keys are visited
// in order, block run by block run: the arithmetic does not depend on where the blocks are.
inline void group_attention_impl(const GroupAttentionArgs& a) {
  const int64_t n = a.hi - a.lo;
  const int64_t hd = a.head_dim;
  for (int64_t j0 = a.lo; j0 < a.hi;) {
    const KvRun run = kv_run(a, j0);
    for (int64_t j = j0; j < run.end; ++j) {
      const float* kj = run.k + (j - j0) * a.kv_stride;
      for (int r = 0; r < a.group; ++r) {
        const float* qr = a.q + r * hd;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < hd; ++d) dot += qr[d] * kj[d];
        a.scores[r * n + (j - a.lo)] = dot * a.scale;
      }
    }
    j0 = run.end;
  }
  for (int r = 0; r < a.group; ++r) softmax_row(a.scores + r * n, n);
  std::fill(a.out, a.out + a.group * hd, 0.0f);
  for (int64_t j0 = a.lo; j0 < a.hi;) {
    const KvRun run = kv_run(a, j0);
    for (int64_t j = j0; j < run.end; ++j) {
      const float* vj = run.v + (j - j0) * a.kv_stride;
      for (int r = 0; r < a.group; ++r) {
        const float p = a.scores[r * n + (j - a.lo)];
        float* o = a.out + r * hd;
#pragma omp simd
        for (int64_t d = 0; d < hd; ++d) o[d] += p * vj[d];
      }
    }
    j0 = run.end;
  }
}

}  // namespace
}  // namespace lowbit::kernels::detail
