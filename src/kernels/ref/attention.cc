// Causal multi-head attention with grouped KV heads against cached keys and values.
//
// Two paths with the same arithmetic up to summation order:
// - few queries (decode): per (query, KV head), the heads of that GQA group together, so each
//   cached key and value row is read once per group; O(context) per query; parallel over items.
//   The loop is compiled per ISA (attention_group.h).
// - many queries (prefill): per KV head and block of queries, the scores S = Q·Kᵀ and the output
//   O = softmax(S)·V are computed by matmul() on gathered contiguous copies of K and Vᵀ, so that
//   prefill runs on the SIMD matmul kernel. Masked entries of S are computed and then dropped,
//   which wastes up to half the score work on the diagonal blocks but keeps one fast kernel.
// Both read the cache through a block table (attention_paged); the contiguous attention() is the
// one-block case of the same code, so paged and contiguous results are bit-identical.
#include <omp.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/ref/attention_group_impl.h"

namespace lowbit::kernels {

namespace {

// Queries per block in the matmul path: bounds the score buffer at
// kQueryBlock · (heads / kv_heads) · context floats.
constexpr int64_t kQueryBlock = 64;
// Below this many queries the direct loop is faster than gathering for matmul.
constexpr int64_t kMatmulMinQueries = 8;

// Keys visible to query i: [lo, hi).
inline void visible_keys(const AttentionShape& s, int64_t i, int64_t* lo, int64_t* hi) {
  const int64_t position = s.past + i;
  *hi = position + 1;
  *lo = s.window > 0 ? std::max<int64_t>(0, position - s.window + 1) : 0;
}

// Grows-only scratch, one per thread, so decode steps allocate nothing after the first.
std::vector<float>& thread_scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

// Another one, for the decoded keys and values of an fp8 cache.
std::vector<float>& thread_decoded(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

// The 256 fp8 values of kv's format (codes index it).
using Fp8Table = std::array<float, 256>;
Fp8Table fp8_table(bool e5m2) {
  Fp8Table t{};
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    t[static_cast<size_t>(c)] = e5m2 ? fp8_e5m2_to_f32(code) : fp8_e4m3_to_f32(code);
  }
  return t;
}

// Cache row (in the blocks) of position j.
inline int64_t cache_row(const KvPages& kv, int64_t j) {
  const int64_t block = j / kv.block_size;
  return int64_t{kv.table[block]} * kv.block_size + (j - block * kv.block_size);
}

// head_dim values of KV head g at cache row `row`, decoded: fp8(code) · the head's scale, the
// product the quantizer rounded each value to.
inline void decode_head(const uint8_t* codes, const float* scales, const KvPages& kv,
                        const Fp8Table& table, int64_t row, int64_t kv_stride, int g, int64_t hd,
                        float* out) {
  const float scale = scales[kv.scale_count == 1 ? 0 : g];
  const uint8_t* c = codes + row * kv_stride + int64_t{g} * hd;
  for (int64_t d = 0; d < hd; ++d) out[d] = table[c[d]] * scale;
}

void attention_direct(const float* q, const KvPages& kv, const AttentionShape& s,
                      const Fp8Table* fp8, float* out) {
  const int64_t hd = s.head_dim;
  const int64_t q_stride = s.heads * hd;
  const int64_t kv_stride = s.kv_heads * hd;
  const int group = s.heads / s.kv_heads;
  const int64_t items = s.queries * s.kv_heads;
  const int64_t context = s.past + s.queries;
  const detail::GroupAttentionFn kernel = detail::group_attention_kernel();
#pragma omp parallel for schedule(dynamic, 1) if (items > 1 && context * hd * s.heads >= (1 << 14))
  for (int64_t item = 0; item < items; ++item) {
    const int64_t i = item / s.kv_heads;
    const int g = static_cast<int>(item % s.kv_heads);
    detail::GroupAttentionArgs args;
    visible_keys(s, i, &args.lo, &args.hi);
    args.q = q + i * q_stride + int64_t{g} * group * hd;
    if (fp8 == nullptr) {
      args.k = kv.k_blocks + g * hd;
      args.v = kv.v_blocks + g * hd;
    }
    args.kv_stride = kv_stride;
    args.table = kv.table;
    args.block_size = kv.block_size;
    args.group = group;
    args.head_dim = hd;
    args.scale = s.scale;
    args.scores = thread_scratch(static_cast<size_t>(group * (args.hi - args.lo))).data();
    args.out = out + i * q_stride + int64_t{g} * group * hd;
    if (fp8 != nullptr) {
      // The visible rows of this head decoded into contiguous scratch; positions shifted by lo,
      // which changes no arithmetic (keys are visited in the same order).
      const int64_t n = args.hi - args.lo;
      float* decoded = thread_decoded(static_cast<size_t>(2 * n * hd)).data();
      for (int64_t j = 0; j < n; ++j) {
        const int64_t row = cache_row(kv, args.lo + j);
        decode_head(kv.k_codes, kv.k_scales, kv, *fp8, row, kv_stride, g, hd, decoded + j * hd);
        decode_head(kv.v_codes, kv.v_scales, kv, *fp8, row, kv_stride, g, hd,
                    decoded + (n + j) * hd);
      }
      args.k = decoded;
      args.v = decoded + n * hd;
      args.kv_stride = hd;
      args.table = nullptr;
      args.lo = 0;
      args.hi = n;
    }
    kernel(args);
  }
}

// Contiguous copies for one (KV head, query block) of the matmul path.
struct BlockBuffers {
  std::vector<float> q, k, vt, scores, out;
};

#if defined(__SSE2__)
// detail::softmax_row with the same bits, four values at a time where that changes no rounding.
// This file is compiled for the baseline ISA, where gcc leaves that loop scalar (the sum of the
// exponentials is a sequential chain it may not reorder): 17 % of an AWQ calibration's time. Here
// the maximum (order-free, and NaN handled as the scalar `max < v ? v : max` does) and exp_approx
// (elementwise, SSE2 has no FMA to contract into) are vectorized; the sum stays sequential in j,
// so every result is bitwise the scalar one (AttentionTest.PrefillSoftmaxMatchesTheScalarBits).
inline __m128 exp_approx4(__m128 x) {
  const __m128 lowest = _mm_set1_ps(-87.0f);
  const __m128 zero = _mm_setzero_ps();
  __m128 keep = _mm_cmpge_ps(x, lowest);  // false for NaN, as `x >= -87.0f`
  x = _mm_or_ps(_mm_and_ps(keep, x), _mm_andnot_ps(keep, lowest));
  keep = _mm_cmple_ps(x, zero);
  x = _mm_or_ps(_mm_and_ps(keep, x), _mm_andnot_ps(keep, zero));
  const __m128 magic = _mm_set1_ps(12582912.0f);
  const __m128 n =
      _mm_sub_ps(_mm_add_ps(_mm_mul_ps(x, _mm_set1_ps(1.44269504088896341f)), magic), magic);
  __m128 r = _mm_sub_ps(x, _mm_mul_ps(n, _mm_set1_ps(0.693359375f)));
  r = _mm_add_ps(r, _mm_mul_ps(n, _mm_set1_ps(2.12194440e-4f)));
  __m128 p = _mm_set1_ps(1.9875691500e-4f);
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.3981999507e-3f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(8.3334519073e-3f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(4.1665795894e-2f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.6666665459e-1f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(5.0000001201e-1f));
  const __m128 y = _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), r), _mm_set1_ps(1.0f));
  const __m128i bits = _mm_slli_epi32(_mm_add_epi32(_mm_cvttps_epi32(n), _mm_set1_epi32(127)), 23);
  return _mm_mul_ps(y, _mm_castsi128_ps(bits));
}

}  // namespace

void detail::prefill_softmax_row(float* row, int64_t n) {
  // The maximum as gcc compiles the scalar loop's `omp simd reduction(max)`: a running
  // `v > max ? v : max` from -inf (a NaN v is skipped), then the same step with row[0]. Per lane,
  // then lane by lane: the same value, since only the sign of a zero maximum could depend on the
  // order and x - (+0) and x - (-0) give exp_approx the same input up to that sign, which its
  // result does not depend on.
  const __m128 lowest = _mm_set1_ps(-std::numeric_limits<float>::infinity());
  __m128 lanes = lowest;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m128 v = _mm_loadu_ps(row + j);
    const __m128 take = _mm_cmpgt_ps(v, lanes);
    lanes = _mm_or_ps(_mm_and_ps(take, v), _mm_andnot_ps(take, lanes));
  }
  alignas(16) float lane[4];
  _mm_store_ps(lane, lanes);
  float max_score = lane[0];
  for (int l = 1; l < 4; ++l) max_score = lane[l] > max_score ? lane[l] : max_score;
  for (; j < n; ++j) max_score = row[j] > max_score ? row[j] : max_score;
  max_score = row[0] > max_score ? row[0] : max_score;
  const __m128 max4 = _mm_set1_ps(max_score);
  j = 0;
  for (; j + 4 <= n; j += 4) {
    _mm_storeu_ps(row + j, exp_approx4(_mm_sub_ps(_mm_loadu_ps(row + j), max4)));
  }
  for (; j < n; ++j) row[j] = detail::exp_approx(row[j] - max_score);
  float sum = 0.0f;
  for (j = 0; j < n; ++j) sum += row[j];
  const float inv = 1.0f / sum;
  for (j = 0; j < n; ++j) row[j] *= inv;
}
#else
}  // namespace

void detail::prefill_softmax_row(float* row, int64_t n) { detail::softmax_row(row, n); }
#endif

namespace {

// Softmax of each score row over its visible keys; masked entries become 0. Row r belongs to
// query i0 + r / group; the block's columns start at key `lo`.
void masked_softmax_rows(const AttentionShape& s, int64_t i0, int64_t rows, int group, int64_t lo,
                         int64_t columns, float* scores) {
#pragma omp parallel for schedule(static) if (rows * columns >= (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t first = 0, end = 0;
    visible_keys(s, i0 + r / group, &first, &end);
    float* row = scores + r * columns;
    const int64_t a = first - lo, b = end - lo;
#pragma omp simd
    for (int64_t c = a; c < b; ++c) row[c] *= s.scale;
    detail::prefill_softmax_row(row + a, b - a);
    std::fill(row, row + a, 0.0f);
    std::fill(row + b, row + columns, 0.0f);
  }
}

void attention_block(const float* q, const KvPages& kv, const AttentionShape& s,
                     const Fp8Table* fp8, int g, int64_t i0, int64_t i1, BlockBuffers& buf,
                     float* out) {
  const int64_t hd = s.head_dim;
  const int64_t q_stride = s.heads * hd;
  const int64_t kv_stride = s.kv_heads * hd;
  const int group = s.heads / s.kv_heads;
  int64_t lo = 0, unused = 0, hi = 0;
  visible_keys(s, i0, &lo, &unused);
  visible_keys(s, i1 - 1, &unused, &hi);
  const int64_t columns = hi - lo;
  const int64_t rows = (i1 - i0) * group;
  buf.q.resize(static_cast<size_t>(rows * hd));
  buf.k.resize(static_cast<size_t>(columns * hd));
  buf.vt.resize(static_cast<size_t>(columns * hd));
  buf.scores.resize(static_cast<size_t>(rows * columns));
  buf.out.resize(static_cast<size_t>(rows * hd));
  for (int64_t i = i0; i < i1; ++i) {
    for (int r = 0; r < group; ++r) {
      const float* src = q + i * q_stride + (g * group + r) * hd;
      std::copy(src, src + hd, buf.q.data() + ((i - i0) * group + r) * hd);
    }
  }
  if (fp8 != nullptr) {
    float* row = buf.out.data();  // free until the second matmul: one decoded value row
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t r = cache_row(kv, j);
      decode_head(kv.k_codes, kv.k_scales, kv, *fp8, r, kv_stride, g, hd,
                  buf.k.data() + (j - lo) * hd);
      decode_head(kv.v_codes, kv.v_scales, kv, *fp8, r, kv_stride, g, hd, row);
      for (int64_t d = 0; d < hd; ++d) buf.vt[static_cast<size_t>(d * columns + (j - lo))] = row[d];
    }
  }
  for (int64_t j0 = lo; j0 < hi && fp8 == nullptr;) {
    const int64_t block = j0 / kv.block_size;
    const int64_t end = std::min(hi, (block + 1) * kv.block_size);
    const int64_t first_row =
        int64_t{kv.table[block]} * kv.block_size + (j0 - block * kv.block_size);
    const float* k_run = kv.k_blocks + first_row * kv_stride + g * hd;
    const float* v_run = kv.v_blocks + first_row * kv_stride + g * hd;
    for (int64_t j = j0; j < end; ++j) {
      const float* kj = k_run + (j - j0) * kv_stride;
      const float* vj = v_run + (j - j0) * kv_stride;
      std::copy(kj, kj + hd, buf.k.data() + (j - lo) * hd);
      for (int64_t d = 0; d < hd; ++d) buf.vt[static_cast<size_t>(d * columns + (j - lo))] = vj[d];
    }
    j0 = end;
  }
  const Tensor keys = Tensor::view(DType::F32, {columns, hd}, buf.k.data(), nullptr);
  matmul(buf.q.data(), rows, hd, keys, nullptr, buf.scores.data());
  masked_softmax_rows(s, i0, rows, group, lo, columns, buf.scores.data());
  const Tensor values_t = Tensor::view(DType::F32, {hd, columns}, buf.vt.data(), nullptr);
  matmul(buf.scores.data(), rows, columns, values_t, nullptr, buf.out.data());
  for (int64_t i = i0; i < i1; ++i) {
    for (int r = 0; r < group; ++r) {
      const float* src = buf.out.data() + ((i - i0) * group + r) * hd;
      std::copy(src, src + hd, out + i * q_stride + (g * group + r) * hd);
    }
  }
}

}  // namespace

namespace detail {

void group_attention_baseline(const GroupAttentionArgs& args) { group_attention_impl(args); }

GroupAttentionFn group_attention_kernel() {
  static const GroupAttentionFn kernel = [] {
    const cpu::CpuFeatures& f = cpu::cpu_features();
    if (f.has_avx512_kernels()) return &group_attention_avx512;
    if (f.has_avx2_kernels()) return &group_attention_avx2;
    return &group_attention_baseline;
  }();
  return kernel;
}

}  // namespace detail

void attention_paged(const float* q, const KvPages& kv, const AttentionShape& shape, float* out) {
  std::optional<Fp8Table> fp8;
  if (kv.k_codes != nullptr) fp8 = fp8_table(kv.e5m2);
  const Fp8Table* table = fp8 ? &*fp8 : nullptr;
  if (shape.queries < kMatmulMinQueries) {
    attention_direct(q, kv, shape, table, out);
    return;
  }
  // Items (KV head, query block), the last blocks first: causal blocks cost more the later they
  // sit, so the dynamic schedule hands out the long ones first. With at least two items per
  // thread each item runs on one thread (its matmuls and softmax see omp_in_parallel() and stay
  // serial): one parallel region per call instead of three per item, whose thread wake-ups cost
  // more than the small products (a 512-token prompt: 48 regions per layer). Fewer items keep
  // the parallelism inside the products. Either way each item computes the same values.
  const int64_t blocks = (shape.queries + kQueryBlock - 1) / kQueryBlock;
  const int64_t items = shape.kv_heads * blocks;
  const bool per_item = !omp_in_parallel() && items >= 2 * int64_t{omp_get_max_threads()};
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) if (per_item)
  for (int64_t item = 0; item < items; ++item) {
    thread_local BlockBuffers buffers;
    const int g = static_cast<int>(item % shape.kv_heads);
    const int64_t i0 = (blocks - 1 - item / shape.kv_heads) * kQueryBlock;
    const int64_t i1 = std::min(shape.queries, i0 + kQueryBlock);
    try {
      attention_block(q, kv, shape, table, g, i0, i1, buffers, out);
    } catch (...) {  // scratch allocation: rethrown below, not std::terminate in the region
#pragma omp critical(lowbit_attention_error)
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void attention(const float* q, const float* k, const float* v, const AttentionShape& shape,
               float* out) {
  // The whole cache as block 0 of a one-block table: the paged code path, one run of rows.
  static constexpr int32_t kOneBlock[1] = {0};
  const int64_t context = shape.past + shape.queries;
  attention_paged(q, KvPages{k, v, kOneBlock, context > 0 ? context : 1}, shape, out);
}

void softmax_inplace(float* x, int64_t n) {
  float max_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max_value = std::max(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace lowbit::kernels
