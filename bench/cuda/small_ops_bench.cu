// The decoder's small ops (small_ops.h) at Llama-3-8B sizes (hidden 4096, intermediate 14336,
// 32 query / 8 KV heads of 128, vocab 128256), rows = 1 (decode) and 4096 (prefill).
//
// Bytes that must move (each input read once, each output written once, bf16 activations):
//   op                 per row                          rows=4096 total  floor @4.25 TB/s copy
//   rmsnorm            2·h·2 (+ h·4 weight, once)       67 MB            16 µs
//   fused_add_rmsnorm  4·h·2                            134 MB           32 µs
//   silu_and_mul       3·14336·2                        352 MB           83 µs
//   rope_neox          2·(32+8)·128·2 + 128·4 + 4       86 MB            20 µs
//   embedding_gather   2·h·2 + 4                        67 MB            16 µs
//   add                3·h·2                            101 MB           24 µs
// Prediction: rows = 4096 at 75-90% of the measured copy bandwidth (one pass, 16-byte accesses,
// thousands of blocks). rows = 1 moves 8-90 KB: bandwidth is meaningless there, the time is one
// kernel's latency inside a graph (~2-4 µs: launch, one block's dependent loads, the reduction);
// that column is what a decode step pays per op.
//
// Method: random non-zero data; at rows = 4096 four input sets rotate so that repeated calls do not
// run from the 50 MB L2; one CUDA graph of 20 calls, replayed after warm-up, median of 25 replays,
// per-call time = median / 20. In-place ops (fused norm, rope, add) keep changing their data; the
// values stay finite over the few hundred calls and the work per call does not depend on them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/small_ops.h"

namespace {

namespace kc = lowbit::kernels::cuda;
using kc::DeviceBuffer;

constexpr double kSpecBandwidth = 4.8e12;
constexpr int kGraphCalls = 20;
constexpr int kReps = 25;
constexpr int64_t kHidden = 4096;
constexpr int64_t kInter = 14336;
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int64_t kVocab = 128256;
constexpr int64_t kMaxPos = 8192;

__device__ uint32_t hash(uint64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

__global__ void fill_bf16(uint16_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = (hash(i, seed) & 0xFFFFFF) / 16777216.0f - 0.5f;  // ±0.5
    p[i] = static_cast<uint16_t>(__float_as_uint(u) >> 16);
  }
}

__global__ void fill_f32(float* p, int64_t n, uint32_t seed, float offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    p[i] = offset + (hash(i, seed) & 0xFFFFFF) / 16777216.0f - 0.5f;
  }
}

__global__ void fill_ids(int32_t* p, int64_t n, uint32_t seed, int64_t bound) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    p[i] = static_cast<int32_t>(hash(i, seed) % static_cast<uint32_t>(bound));
  }
}

// The real cache: row p = [cos(p·θ_j)…, sin(p·θ_j)…], θ_j = 500000^(-2j/d) (Llama 3's base), so
// repeated in-place rotations keep the vectors' length.
__global__ void fill_cos_sin(float* cache, int64_t max_pos, int rotary_dim) {
  const int half = rotary_dim / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < max_pos * half;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / half;
    const int j = static_cast<int>(i % half);
    const float angle = static_cast<float>(p) * powf(500000.0f, -2.0f * j / rotary_dim);
    cache[p * rotary_dim + j] = cosf(angle);
    cache[p * rotary_dim + half + j] = sinf(angle);
  }
}

DeviceBuffer<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  DeviceBuffer<uint16_t> b(n);
  fill_bf16<<<1024, 256>>>(b.data(), n, seed);
  LOWBIT_CUDA_CHECK_LAUNCH();
  return b;
}

// Per-call seconds: a graph of kGraphCalls calls (call i uses input set i % sets), replayed.
double time_graph(cudaStream_t stream, int sets, const std::function<void(int)>& call) {
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());  // the fills ran on the legacy default stream
  for (int i = 0; i < sets; ++i) call(i);  // warm-up outside the capture
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphCalls; ++i) call(i % sets);
  LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LOWBIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<double> times;
  for (int r = 0; r < kReps; ++r) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(start, stream));
    LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    LOWBIT_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e-3 / kGraphCalls);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer<char> a(bytes), b(bytes);
  LOWBIT_CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
  return 2.0 * bytes / time_graph(stream, 1, [&](int) {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
}

void report(const char* op, int64_t rows, double bytes, double seconds, double copy_bw) {
  std::printf("%-18s %5lld | %8.2f | %9.1f | %6.1f%% %6.1f%% | %7.2f\n", op,
              static_cast<long long>(rows), seconds * 1e6, bytes / seconds * 1e-9,
              100.0 * bytes / seconds / kSpecBandwidth, 100.0 * bytes / seconds / copy_bw,
              seconds / (bytes / copy_bw));
}

void bench_rows(cudaStream_t stream, int64_t rows, double copy_bw) {
  const int sets = rows == 1 ? 1 : 4;
  const int64_t h = kHidden;
  const int64_t act = rows * h;  // one activation set
  DeviceBuffer<float> weight(h);
  fill_f32<<<64, 256>>>(weight.data(), h, 7u, 1.0f);
  LOWBIT_CUDA_CHECK_LAUNCH();

  {  // rmsnorm, fused_add_rmsnorm, add: [rows, hidden]
    auto x = random_bf16(sets * act, 1u), res = random_bf16(sets * act, 2u);
    DeviceBuffer<uint16_t> out(sets * act);
    report("rmsnorm", rows, 4.0 * act + 4.0 * h, time_graph(stream, sets, [&](int s) {
             kc::rmsnorm(x.data() + s * act, weight.data(), 1e-5f, rows, h, out.data() + s * act,
                         stream);
           }), copy_bw);
    report("fused_add_rmsnorm", rows, 8.0 * act + 4.0 * h, time_graph(stream, sets, [&](int s) {
             kc::fused_add_rmsnorm(x.data() + s * act, res.data() + s * act, weight.data(), 1e-5f,
                                   rows, h, stream);
           }), copy_bw);
    report("add", rows, 6.0 * act, time_graph(stream, sets, [&](int s) {
             kc::add(res.data() + s * act, x.data() + s * act, act, stream);
           }), copy_bw);
  }
  {  // silu_and_mul: [rows, 2·inter] → [rows, inter]
    const int64_t in = rows * 2 * kInter, out_n = rows * kInter;
    auto gu = random_bf16(sets * in, 3u);
    DeviceBuffer<uint16_t> out(sets * out_n);
    report("silu_and_mul", rows, 2.0 * (in + out_n), time_graph(stream, sets, [&](int s) {
             kc::silu_and_mul(gu.data() + s * in, rows, kInter, out.data() + s * out_n, stream);
           }), copy_bw);
  }
  {  // rope_neox on q [rows, 32·128] and k [rows, 8·128]
    const int64_t qn = rows * kHeads * kHeadDim, kn = rows * kKvHeads * kHeadDim;
    auto q = random_bf16(sets * qn, 4u), k = random_bf16(sets * kn, 5u);
    DeviceBuffer<float> cache(kMaxPos * kHeadDim);
    fill_cos_sin<<<1024, 256>>>(cache.data(), kMaxPos, kHeadDim);
    DeviceBuffer<int32_t> pos(rows);
    fill_ids<<<64, 256>>>(pos.data(), rows, 8u, kMaxPos);
    LOWBIT_CUDA_CHECK_LAUNCH();
    const double bytes = 4.0 * (qn + kn) + rows * (kHeadDim * 4.0 + 4.0);
    report("rope_neox", rows, bytes, time_graph(stream, sets, [&](int s) {
             kc::rope_neox(q.data() + s * qn, k.data() + s * kn, pos.data(), rows, kHeads, kKvHeads,
                           kHeadDim, kHeadDim, cache.data(), kMaxPos, stream);
           }), copy_bw);
  }
  {  // embedding_gather from a 128256 × 4096 table (1 GB)
    auto table = random_bf16(kVocab * h, 9u);
    DeviceBuffer<int32_t> ids(sets * rows), err(kc::kEmbeddingErrorWords);
    fill_ids<<<64, 256>>>(ids.data(), sets * rows, 10u, kVocab);
    LOWBIT_CUDA_CHECK_LAUNCH();
    LOWBIT_CUDA_CHECK(cudaMemset(err.data(), 0, err.bytes()));
    DeviceBuffer<uint16_t> out(sets * act);
    report("embedding_gather", rows, 4.0 * act + 4.0 * rows, time_graph(stream, sets, [&](int s) {
             kc::embedding_gather(table.data(), kVocab, h, ids.data() + s * rows, rows,
                                  out.data() + s * act, err.data(), stream);
           }), copy_bw);
    kc::check_embedding_error(err.data(), kVocab, stream);  // the ids were all valid
  }
}

}  // namespace

int main() {
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("small_ops_bench: no CUDA device\n");
      return 0;
    }
    cudaStream_t stream;
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_bw = copy_bandwidth(stream);
    std::printf("measured D2D copy %.2f TB/s (spec %.1f); hidden %lld; per-call time in a graph\n",
                copy_bw * 1e-12, kSpecBandwidth * 1e-12, static_cast<long long>(kHidden));
    std::printf("%-18s %5s | %8s | %9s | %7s %7s | %7s\n", "op", "rows", "us", "GB/s", "%4.8T",
                "%copy", "/floor");
    for (int64_t rows : {1, 4096}) bench_rows(stream, rows, copy_bw);
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "small_ops_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
