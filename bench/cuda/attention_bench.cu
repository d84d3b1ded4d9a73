// Paged attention (kernels/cuda/attention.h) at Llama-3-8B shapes: 32 query heads, 8 KV heads,
// head_dim 128, block_size 16, BF16 and FP8 E4M3 caches.
//
// Decode: bytes that must move per call = 2 · ctx · kv_heads · head_dim · sizeof(kv) per sequence
// (4 KiB per position in bf16, 2 KiB in fp8), plus q/out (negligible). Floor at 4.8 TB/s, bf16:
//   batch×ctx     KV bytes   floor     predicted (fraction of 4.8 TB/s)
//   1×512         2.1 MB     0.4 µs    ~8 µs   (<10%: two launches' latency, one 64-row tile)
//   1×4096        17 MB      3.5 µs    ~10 µs  (~35%)
//   1×32768       134 MB     28 µs     ~38 µs  (~75%)
//   8×512         17 MB      3.5 µs    ~9 µs   (~40%)
//   8×4096        134 MB     28 µs     ~38 µs  (~75%)
//   8×32768       1.07 GB    224 µs    ~265 µs (~85%)
//   64×512        134 MB     28 µs     ~38 µs  (~75%)
//   64×4096       1.07 GB    224 µs    ~265 µs (~85%)
//   64×32768      8.6 GB     1.79 ms   ~2.1 ms (~85%)
// FP8 moves half the bytes; predicted the same fractions if the in-CTA fp8→bf16 conversion (a
// shared-memory round trip) hides behind the loads, 60-75% if it does not.
// The ceiling in practice is the copy bandwidth measured below (~4.25 TB/s read+write here).
//
// Prefill (one sequence, causal): FLOPs = 2·2·n²/2·heads·head_dim (QKᵀ and PV, half the square):
//   n = 2048: 34 GFLOP (35 µs at 989 TFLOP/s); n = 8192: 550 GFLOP (556 µs). Predicted
//   250-350 TFLOP/s (25-35% of the dense bf16 spec): mma.sync m16n8k16, 64×64 tiles, one
//   ldmatrix.x4 per two mma (shared-memory bound near ~500), exp2 on the SFU; no wgmma.
//   Chunked prefill 2048 new after 6144 cached: FLOPs 4·heads·hd·(n·past + n²/2).
// No vendor library computes paged attention here (no cuDNN/FlashInfer on the machine), so the
// ratios are to the physical limits only.
//
// Method: random data (never zeros), sequences' blocks scattered over the pool by a shuffled
// block table; decode rotates block tables over disjoint pool regions (>= 64 MB in total) so that
// repeated calls do not run from the 50 MB L2; one CUDA graph of kGraphCalls calls, median of
// kReps replays, per-call time = median / calls. A same-run sanity check compares the decode
// kernel with the prefill kernel (one query per sequence) on the same data.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"

namespace {

namespace kc = lowbit::kernels::cuda;
using kc::DeviceBuffer;

constexpr double kSpecBandwidth = 4.8e12;
constexpr double kSpecBf16Flops = 989e12;
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;
constexpr int kGraphCalls = 32;
constexpr int kReps = 15;
constexpr int64_t kPoolBlocks = 64 * 32768 / kBlock;  // the largest decode case, once
constexpr double kRotateBytes = 64e6;

__device__ uint32_t hash(uint64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32) * 40503u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

__global__ void fill_bf16(uint16_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = (hash(i, seed) & 0xFFFFFF) / 8388608.0f - 1.0f;  // ±1
    p[i] = static_cast<uint16_t>(__float_as_uint(u) >> 16);
  }
}

// Random e4m3 codes without the NaN codes (0x7F, 0xFF).
__global__ void fill_fp8(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t b = hash(i, seed) & 0xFF;
    if ((b & 0x7F) == 0x7F) b ^= 1;
    p[i] = static_cast<uint8_t>(b);
  }
}

// Median per-call milliseconds of a graph of `calls` calls enqueued by `body`.
double time_graph(cudaStream_t stream, int calls, const std::function<void(int)>& body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int c = 0; c < calls; ++c) body(c);
  LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LOWBIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < 2; ++w) LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> ms(kReps);
  for (float& m : ms) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(start, stream));
    LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LOWBIT_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(stop));
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&m, start, stop));
  }
  std::sort(ms.begin(), ms.end());
  LOWBIT_CUDA_CHECK(cudaEventDestroy(start));
  LOWBIT_CUDA_CHECK(cudaEventDestroy(stop));
  LOWBIT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  LOWBIT_CUDA_CHECK(cudaGraphDestroy(graph));
  return ms[ms.size() / 2] / calls;
}

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer<uint8_t> a(bytes), b(bytes);
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, stream));
  const double ms = time_graph(stream, 4, [&](int) {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * bytes / (ms * 1e-3);
}

struct Pool {
  DeviceBuffer<uint8_t> k, v;
  DeviceBuffer<float> scales;  // k and v scale (fp8)
  Pool() : k(kPoolBlocks * kBlock * kKvHeads * kHeadDim * 2), v(k.size()), scales(2) {
    const std::vector<float> s = {1.0f / 256, 1.0f / 256};
    scales.upload(s);
  }
  void fill(kc::KvCacheDtype dtype) {
    const int64_t n = kPoolBlocks * kBlock * kKvHeads * kHeadDim;
    if (dtype == kc::KvCacheDtype::BF16) {
      fill_bf16<<<4096, 256>>>(reinterpret_cast<uint16_t*>(k.data()), n, 1);
      fill_bf16<<<4096, 256>>>(reinterpret_cast<uint16_t*>(v.data()), n, 2);
    } else {
      fill_fp8<<<4096, 256>>>(k.data(), n, 3);
      fill_fp8<<<4096, 256>>>(v.data(), n, 4);
    }
    LOWBIT_CUDA_CHECK_LAUNCH();
    LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  kc::PagedKvCache cache(kc::KvCacheDtype dtype) {
    kc::PagedKvCache c{k.data(), v.data(), dtype, kBlock, kKvHeads, kHeadDim, nullptr, nullptr, 1};
    if (dtype == kc::KvCacheDtype::FP8_E4M3) {
      c.k_scale = scales.data();
      c.v_scale = scales.data() + 1;
    }
    return c;
  }
};

lowbit::kernels::AttentionShape llama_shape() {
  lowbit::kernels::AttentionShape s;
  s.heads = kHeads;
  s.kv_heads = kKvHeads;
  s.head_dim = kHeadDim;
  s.scale = 1.0f / std::sqrt(float(kHeadDim));
  return s;
}

// `rotations` sets of block tables for `seqs` sequences of `blocks` blocks each, all disjoint.
std::vector<int32_t> scattered_tables(int rotations, int seqs, int blocks, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(rotations) * seqs * blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  return ids;
}

DeviceBuffer<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  DeviceBuffer<uint16_t> b(static_cast<size_t>(n));
  fill_bf16<<<1024, 256>>>(b.data(), n, seed);
  LOWBIT_CUDA_CHECK_LAUNCH();
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());  // the timed stream does not wait for the legacy one
  return b;
}

void bench_decode(Pool& pool, kc::KvCacheDtype dtype, double copy_bw, cudaStream_t stream) {
  const int elem = dtype == kc::KvCacheDtype::BF16 ? 2 : 1;
  for (const int seqs : {1, 8, 64}) {
    for (const int ctx : {512, 4096, 32768}) {
      const int blocks = ctx / kBlock;
      const double bytes = 2.0 * seqs * ctx * kKvHeads * kHeadDim * elem;
      const int rotations = static_cast<int>(std::clamp(std::ceil(kRotateBytes / bytes), 1.0, double(kGraphCalls)));
      const std::vector<int32_t> tables = scattered_tables(rotations, seqs, blocks, 7);
      DeviceBuffer<int32_t> d_tables{std::span<const int32_t>(tables)};
      const std::vector<int32_t> lens(seqs, ctx);
      DeviceBuffer<int32_t> d_lens{std::span<const int32_t>(lens)};
      DeviceBuffer<uint16_t> q = random_bf16(int64_t{seqs} * kHeads * kHeadDim, 9);
      DeviceBuffer<uint16_t> out(static_cast<size_t>(seqs) * kHeads * kHeadDim);
      const auto shape = llama_shape();
      const size_t ws_bytes = kc::decode_attention_workspace_bytes(shape, seqs, ctx);
      DeviceBuffer<uint8_t> ws(ws_bytes);
      kc::PagedBatch batch;
      batch.num_seqs = seqs;
      batch.context_lens = d_lens.data();
      batch.max_blocks_per_seq = blocks;
      batch.max_context_len = ctx;
      const kc::PagedKvCache cache = pool.cache(dtype);
      const double ms = time_graph(stream, kGraphCalls, [&](int c) {
        batch.block_tables = d_tables.data() + static_cast<size_t>(c % rotations) * seqs * blocks;
        kc::decode_attention(reinterpret_cast<const __nv_bfloat16*>(q.data()), 0, cache, batch, shape,
                             reinterpret_cast<__nv_bfloat16*>(out.data()), ws.data(), ws_bytes, stream);
      });
      const double bw = bytes / (ms * 1e-3);
      std::printf("decode %-4s batch %2d ctx %5d | %9.1f us | %7.1f GB/s | %5.1f%% of 4.8 TB/s | %5.1f%% of copy%s\n",
                  elem == 2 ? "bf16" : "fp8", seqs, ctx, ms * 1e3, bw / 1e9, 100 * bw / kSpecBandwidth,
                  100 * bw / copy_bw, rotations * bytes < 60e6 ? " (L2-resident)" : "");
    }
  }
}

void bench_prefill(Pool& pool, kc::KvCacheDtype dtype, cudaStream_t stream) {
  struct Case { int n, past; };
  for (const Case cs : {Case{2048, 0}, Case{8192, 0}, Case{2048, 6144}}) {
    const int ctx = cs.n + cs.past;
    const int blocks = (ctx + kBlock - 1) / kBlock;
    const std::vector<int32_t> table = scattered_tables(1, 1, blocks, 11);
    DeviceBuffer<int32_t> d_table{std::span<const int32_t>(table)};
    const std::vector<int32_t> lens = {ctx}, starts = {0, cs.n};
    DeviceBuffer<int32_t> d_lens{std::span<const int32_t>(lens)}, d_starts{std::span<const int32_t>(starts)};
    DeviceBuffer<uint16_t> q = random_bf16(int64_t{cs.n} * kHeads * kHeadDim, 13);
    DeviceBuffer<uint16_t> out(q.size());
    kc::PagedBatch batch;
    batch.num_seqs = 1;
    batch.context_lens = d_lens.data();
    batch.block_tables = d_table.data();
    batch.max_blocks_per_seq = blocks;
    batch.max_context_len = ctx;
    batch.query_start = d_starts.data();
    batch.max_query_len = cs.n;
    const auto shape = llama_shape();
    const kc::PagedKvCache cache = pool.cache(dtype);
    const double ms = time_graph(stream, 4, [&](int) {
      kc::prefill_attention(reinterpret_cast<const __nv_bfloat16*>(q.data()), 0, cache, batch, shape,
                            reinterpret_cast<__nv_bfloat16*>(out.data()), stream);
    });
    const double flops = 4.0 * kHeads * kHeadDim * (double(cs.n) * cs.past + double(cs.n) * cs.n / 2);
    const double rate = flops / (ms * 1e-3);
    std::printf("prefill %-4s n %5d past %5d | %9.1f us | %6.1f TFLOP/s | %5.1f%% of 989\n",
                dtype == kc::KvCacheDtype::BF16 ? "bf16" : "fp8", cs.n, cs.past, ms * 1e3, rate / 1e12,
                100 * rate / kSpecBf16Flops);
  }
}

// Decode and prefill kernels on the same 8 sequences (one query each) must agree to bf16 rounding.
void sanity_check(Pool& pool, kc::KvCacheDtype dtype) {
  const int seqs = 8, ctx = 4096, blocks = ctx / kBlock;
  const std::vector<int32_t> tables = scattered_tables(1, seqs, blocks, 17);
  DeviceBuffer<int32_t> d_tables{std::span<const int32_t>(tables)};
  std::vector<int32_t> lens(seqs), starts(seqs + 1);
  for (int s = 0; s < seqs; ++s) lens[s] = ctx - 97 * s;  // different lengths
  std::iota(starts.begin(), starts.end(), 0);
  DeviceBuffer<int32_t> d_lens{std::span<const int32_t>(lens)}, d_starts{std::span<const int32_t>(starts)};
  DeviceBuffer<uint16_t> q = random_bf16(int64_t{seqs} * kHeads * kHeadDim, 19);
  DeviceBuffer<uint16_t> a(q.size()), b(q.size());
  kc::PagedBatch batch;
  batch.num_seqs = seqs;
  batch.context_lens = d_lens.data();
  batch.block_tables = d_tables.data();
  batch.max_blocks_per_seq = blocks;
  batch.max_context_len = ctx;
  batch.query_start = d_starts.data();
  batch.max_query_len = 1;
  const auto shape = llama_shape();
  const kc::PagedKvCache cache = pool.cache(dtype);
  const size_t ws_bytes = kc::decode_attention_workspace_bytes(shape, seqs, ctx);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  const auto* qp = reinterpret_cast<const __nv_bfloat16*>(q.data());
  kc::decode_attention(qp, 0, cache, batch, shape, reinterpret_cast<__nv_bfloat16*>(a.data()), ws.data(),
                       ws_bytes, nullptr);
  kc::prefill_attention(qp, 0, cache, batch, shape, reinterpret_cast<__nv_bfloat16*>(b.data()), nullptr);
  const std::vector<uint16_t> ha = a.download(), hb = b.download();
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < ha.size(); ++i) {
    const float x = lowbit::bf16_to_f32(ha[i]), y = lowbit::bf16_to_f32(hb[i]);
    max_diff = std::isfinite(x) && std::isfinite(y) ? std::max<double>(max_diff, std::fabs(x - y)) : INFINITY;
    max_abs = std::max<double>(max_abs, std::fabs(y));
  }
  std::printf("check %-4s decode vs prefill kernel: max |diff| %.3g (max |out| %.3g)%s\n",
              dtype == kc::KvCacheDtype::BF16 ? "bf16" : "fp8", max_diff, max_abs,
              max_diff <= 1e-2 * std::max(1.0, max_abs) ? "" : "  <-- MISMATCH");
}

}  // namespace

int main() {
  try {
    if (!kc::device_available()) {
      std::printf("attention_bench: no CUDA device\n");
      return 0;
    }
    cudaDeviceProp props{};
    LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
    cudaStream_t stream;
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_bw = copy_bandwidth(stream);
    std::printf("device %s, %d SMs; device-to-device copy %.0f GB/s (read+write)\n", props.name,
                props.multiProcessorCount, copy_bw / 1e9);
    Pool pool;
    for (const auto dtype : {kc::KvCacheDtype::BF16, kc::KvCacheDtype::FP8_E4M3}) {
      pool.fill(dtype);
      sanity_check(pool, dtype);
      bench_decode(pool, dtype, copy_bw, stream);
      bench_prefill(pool, dtype, stream);
    }
    LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
