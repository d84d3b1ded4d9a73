// Host side shared by the paged attention kernels: argument checks and the kernel parameters
// common to decode and prefill (attention_decode.cu, attention_prefill.cu).
#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/cuda_check.h"

namespace lowbit::kernels::cuda {

namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int element_bytes(KvCacheDtype dtype) { return dtype == KvCacheDtype::FP8_E4M3 ? 1 : 2; }

}  // namespace

size_t kv_cache_block_bytes(const PagedKvCache& cache) {
  return static_cast<size_t>(cache.block_size) * static_cast<size_t>(cache.kv_heads) *
         static_cast<size_t>(cache.head_dim) * static_cast<size_t>(element_bytes(cache.dtype));
}

namespace detail {

int multiprocessor_count() {
  int device = 0, count = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

void allow_smem(const void* kernel, int bytes) {
  // Once per (kernel, device): later launches, and launches inside a CUDA graph capture, then
  // make no attribute call at all.
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.count({kernel, device}) != 0) return;
  LOWBIT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert({kernel, device});
}

attn::Params attention_params(const char* fn, const __nv_bfloat16* q, int64_t q_stride,
                              const PagedKvCache& cache, const PagedBatch& batch,
                              const AttentionShape& shape, __nv_bfloat16* out) {
  const std::string where = std::string("cuda::") + fn + ": ";
  // The head dim first: it is the one well-formed input the kernels do not implement.
  if (shape.head_dim != 64 && shape.head_dim != 128) {
    throw Unsupported(where + "head_dim " + std::to_string(shape.head_dim) +
                      " is not supported (64 or 128)");
  }
  LOWBIT_CHECK(shape.heads > 0 && shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0,
               where + "shape.heads (" + std::to_string(shape.heads) +
                   ") must be a positive multiple of shape.kv_heads (" +
                   std::to_string(shape.kv_heads) + ")");
  LOWBIT_CHECK(cache.kv_heads == shape.kv_heads && cache.head_dim == shape.head_dim,
               where + "cache.kv_heads/head_dim (" + std::to_string(cache.kv_heads) + "/" +
                   std::to_string(cache.head_dim) + ") differ from the shape's (" +
                   std::to_string(shape.kv_heads) + "/" + std::to_string(shape.head_dim) + ")");
  LOWBIT_CHECK(shape.window >= 0, where + "shape.window must be >= 0");
  LOWBIT_CHECK(std::isfinite(shape.scale), where + "shape.scale must be finite");
  LOWBIT_CHECK(cache.block_size >= 1, where + "cache.block_size must be >= 1");
  LOWBIT_CHECK(cache.k_blocks != nullptr && cache.v_blocks != nullptr &&
                   aligned16(cache.k_blocks) && aligned16(cache.v_blocks),
               where + "cache.k_blocks/v_blocks must be non-null and 16-byte aligned");
  const bool fp8 = cache.dtype == KvCacheDtype::FP8_E4M3;
  if (fp8) {
    LOWBIT_CHECK(cache.k_scale != nullptr && cache.v_scale != nullptr,
                 where + "an fp8 cache needs cache.k_scale and cache.v_scale");
    LOWBIT_CHECK(cache.scale_count == 1 || cache.scale_count == cache.kv_heads,
                 where + "cache.scale_count must be 1 or kv_heads (" +
                     std::to_string(cache.kv_heads) + "), got " +
                     std::to_string(cache.scale_count));
  }
  const int64_t width = int64_t{shape.heads} * shape.head_dim;
  const int64_t stride = q_stride == 0 ? width : q_stride;
  LOWBIT_CHECK(stride >= width && stride % 8 == 0,
               where + "q_stride " + std::to_string(q_stride) + " must be 0 or a multiple of 8 >= " +
                   std::to_string(width));
  LOWBIT_CHECK(batch.num_seqs >= 0, where + "batch.num_seqs must be >= 0");
  if (batch.num_seqs > 0) {
    LOWBIT_CHECK(q != nullptr && aligned16(q), where + "q must be non-null and 16-byte aligned");
    LOWBIT_CHECK(out != nullptr && (reinterpret_cast<uintptr_t>(out) & 3u) == 0,
                 where + "out must be non-null and 4-byte aligned");
    LOWBIT_CHECK(batch.context_lens != nullptr && batch.block_tables != nullptr,
                 where + "batch.context_lens and batch.block_tables are required");
    LOWBIT_CHECK(batch.max_blocks_per_seq >= 1, where + "batch.max_blocks_per_seq must be >= 1");
    LOWBIT_CHECK(batch.max_context_len >= 0 &&
                     int64_t{batch.max_context_len} <=
                         int64_t{batch.max_blocks_per_seq} * cache.block_size,
                 where + "batch.max_context_len " + std::to_string(batch.max_context_len) +
                     " must be in [0, max_blocks_per_seq * block_size]");
  }

  attn::Params p;
  p.q = q;
  p.q_stride = stride;
  p.out = out;
  p.out_stride = width;
  p.k_cache = static_cast<const uint8_t*>(cache.k_blocks);
  p.v_cache = static_cast<const uint8_t*>(cache.v_blocks);
  p.k_scale = fp8 ? cache.k_scale : nullptr;
  p.v_scale = fp8 ? cache.v_scale : nullptr;
  p.scale_per_head = fp8 && cache.scale_count == cache.kv_heads && cache.kv_heads > 1 ? 1 : 0;
  p.context_lens = batch.context_lens;
  p.block_tables = batch.block_tables;
  p.max_blocks = batch.max_blocks_per_seq;
  p.query_start = batch.query_start;
  p.block_size = cache.block_size;
  p.heads = shape.heads;
  p.kv_heads = shape.kv_heads;
  p.group = shape.heads / shape.kv_heads;
  p.window = static_cast<int>(std::min<int64_t>(shape.window, INT_MAX));
  p.scale_log2 = shape.scale * 1.4426950408889634f;  // log2(e): softmax in base 2
  return p;
}

}  // namespace detail

}  // namespace lowbit::kernels::cuda
