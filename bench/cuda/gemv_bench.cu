// The decode GEMV (gemv_bf16.h) against cuBLASLt (gemm_bf16) on Llama-3-8B's linear shapes at
// m = 1, 2, 4, 8; the fused SiLU variant against silu_and_mul + GEMV; the residual add + RMSNorm
// epilogue against the kernels it replaces; and the fused RoPE + KV write against rope_neox +
// write_kv_paged (rope_kv_write.h).
//
// Counting (bytes = w + x + y in bf16; the weight is > 99.9 % of them at m <= 8):
//   shape (n×k)         weights    floor @4.8 TB/s   85 % goal   cuBLASLt m=1 (bench/NOTES.md)
//   qkv 6144×4096       50.3 MB    10.5 µs           12.3 µs     —
//   o 4096×4096         33.6 MB     7.0 µs            8.2 µs     12.3 µs (57 %)
//   gate_up 28672×4096  234.9 MB   48.9 µs           57.6 µs     56.1 µs (87 %)
//   down 4096×14336     117.4 MB   24.5 µs           28.8 µs     —
// Prediction (written before any run): the GEMV streams at 80-88 % of 4.8 TB/s on gate_up and
// down (o: 9-10 µs = 70-78 %: ~7 µs of streaming plus ~2 µs of ramp and tail that a 34 MB
// weight cannot hide; qkv ~13 µs = ~80 %), the same within ~5 % for m = 1..8 (tensor-core mma:
// m is free; m = 8 reads 8 x rows per chunk from L1, +50 % L1 traffic, not HBM). Against
// cuBLASLt: ~1.3x on o and qkv, ~1.0x on gate_up, ~1.1x on down at m = 1, more at m = 2..8 where
// cuBLASLt's decode kernels lose efficiency. Fused SiLU: down + ~1-2 µs at m = 1-2 (two silu per
// lane per chunk, hidden under the loads), ~+5 µs at m = 8 (eight per lane); silu_and_mul alone
// costs ~2-3 µs in a graph, so fusing wins ~1-2 µs at m <= 2 and roughly breaks even at m = 8.
// Fused RoPE + KV write at rows = 1: ~2.5 µs against ~5 µs for the pair (each a ~2.5 µs launch
// of a one-CTA kernel in a graph). Per 8B decode step (32 layers): GEMV ~3-4 µs per layer on o
// and qkv, fused SiLU ~2 µs, RoPE + KV ~2.5 µs: ~0.25-0.3 ms of 4.94 ms, 198 -> ~210 tok/s.
// Residual add + RMSNorm in the o / down GEMV (the last CTA normalizes): the norm kernel's ~2.5 µs
// (launch gap + one CTA) becomes ~1-1.5 µs of tail in the GEMV: ~1-1.5 µs x 64 per step, ~+2 %;
// with everything, 8B decode ~215 tok/s, short of 230: what remains is the attention kernels, the
// other launch gaps (~8 kernels per layer left) and the GEMVs' own ~15 % below HBM peak.
//
// Method (METHOD.md): random non-zero data; weights rotated over enough copies that one graph
// reads >= 200 MB (4x the 50 MB L2); one CUDA graph of 20 calls, replayed after warm-up, median
// of 25 replays / 20 = time per call. Each GEMV result is spot-checked against double-precision
// dots on the host.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <span>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemv_bf16.h"
#include "kernels/cuda/rope_kv_write.h"
#include "kernels/cuda/small_ops.h"

namespace {

namespace kc = lowbit::kernels::cuda;
using kc::DeviceBuffer;

constexpr double kSpecBandwidth = 4.8e12;  // H200 HBM3e, bytes/s
constexpr int kGraphCalls = 20;
constexpr int kReps = 25;

__global__ void fill_random_bf16(uint16_t* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = (h & 0xFFFFFF) / 16777216.0f - 0.5f;
    p[i] = static_cast<uint16_t>(__float_as_uint(2.0f * scale * u) >> 16);
  }
}

void fill(uint16_t* p, int64_t n, uint32_t seed, float scale) {
  fill_random_bf16<<<1024, 256>>>(p, n, seed, scale);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median of kReps event timings of `body` (seconds), after 3 warm-up runs.
double time_median(cudaStream_t stream, const std::function<void()>& body) {
  cudaEvent_t start, stop;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) body();
  std::vector<double> times;
  for (int r = 0; r < kReps; ++r) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(start, stream));
    body();
    LOWBIT_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(times);
}

// Time per call of `call` (which may launch several kernels) from a graph of kGraphCalls calls.
double graph_time(cudaStream_t stream, const std::function<void()>& call) {
  call();  // eager once: plans (cuBLASLt heuristics) exist before capture
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  LOWBIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphCalls; ++i) call();
  LOWBIT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  LOWBIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double t =
      time_median(stream, [&] { LOWBIT_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) / kGraphCalls;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return t;
}

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer<char> a(bytes), b(bytes);
  LOWBIT_CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
  const double t = time_median(stream, [&] {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * bytes / t;  // read + write
}

struct LinearShape {
  const char* name;
  int64_t n, k;
};

// Max |y - dot| / Σ|x·w| over 64 sampled outputs (x rows x_stride apart; silu: x = silu(g)·u).
double spot_check(const uint16_t* dx, int64_t x_stride, bool silu, const uint16_t* dw,
                  const uint16_t* dy, int64_t m, int64_t n, int64_t k) {
  std::vector<uint16_t> xr(silu ? 2 * k : k), wr(k);
  double worst = 0.0;
  uint64_t state = 12345;
  for (int s = 0; s < 64; ++s) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t i = static_cast<int64_t>((state >> 33) % uint64_t(m));
    const int64_t j = static_cast<int64_t>((state >> 13) % uint64_t(n));
    uint16_t y = 0;
    LOWBIT_CUDA_CHECK(
        cudaMemcpy(xr.data(), dx + i * x_stride, xr.size() * 2, cudaMemcpyDeviceToHost));
    LOWBIT_CUDA_CHECK(cudaMemcpy(wr.data(), dw + j * k, k * 2, cudaMemcpyDeviceToHost));
    LOWBIT_CUDA_CHECK(cudaMemcpy(&y, dy + i * n + j, 2, cudaMemcpyDeviceToHost));
    double dot = 0.0, mag = 0.0;
    for (int64_t t = 0; t < k; ++t) {
      double xv = lowbit::bf16_to_f32(xr[t]);
      if (silu) xv = xv / (1.0 + std::exp(-xv)) * lowbit::bf16_to_f32(xr[k + t]);
      const double p = xv * lowbit::bf16_to_f32(wr[t]);
      dot += p;
      mag += std::fabs(p);
    }
    worst = std::max(worst, std::fabs(lowbit::bf16_to_f32(y) - dot) / std::max(mag, 1e-30));
  }
  return worst;
}

// Weight copies whose total exceeds the L2 several times.
std::vector<DeviceBuffer<uint16_t>> weight_copies(int64_t elems) {
  const int copies = static_cast<int>(std::max<int64_t>(2, (200ll << 20) / (elems * 2) + 1));
  std::vector<DeviceBuffer<uint16_t>> w;
  for (int c = 0; c < copies; ++c) {
    w.emplace_back(static_cast<size_t>(elems));
    fill(w.back().data(), elems, 17u + c, 0.05f);
  }
  return w;
}

void bench_linear(kc::BlasLt& blas, cudaStream_t stream, const LinearShape& s, int64_t m,
                  double copy_bw) {
  auto w = weight_copies(s.n * s.k);
  const int copies = static_cast<int>(w.size());
  DeviceBuffer<uint16_t> x(m * s.k), y(m * s.n);
  fill(x.data(), m * s.k, 3u, 1.0f);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  int next = 0;
  const double t_gemv = graph_time(stream, [&] {
    kc::gemv_bf16(x.data(), m, s.k, w[next].data(), s.n, y.data(), stream);
    next = (next + 1) % copies;
  });
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const double err = spot_check(x.data(), s.k, false, w[(next + copies - 1) % copies].data(),
                                y.data(), m, s.n, s.k);
  const double t_blas = graph_time(stream, [&] {
    kc::gemm_bf16(blas, x.data(), m, s.k, w[next].data(), s.n, y.data(), stream);
    next = (next + 1) % copies;
  });
  const double bytes = 2.0 * (m * s.k + s.n * s.k + m * s.n);
  std::printf(
      "%-8s %2lld %6lld %6lld | %7.2f %7.0f %5.1f%% %5.1f%% | %7.2f %5.1f%% | %5.2fx | %.1e\n",
      s.name, static_cast<long long>(m), static_cast<long long>(s.n), static_cast<long long>(s.k),
      t_gemv * 1e6, bytes / t_gemv * 1e-9, 100.0 * bytes / t_gemv / kSpecBandwidth,
      100.0 * bytes / t_gemv / copy_bw, t_blas * 1e6, 100.0 * bytes / t_blas / kSpecBandwidth,
      t_blas / t_gemv, err);
}

// down_proj from a merged gate_up output: fused, silu_and_mul + GEMV, silu_and_mul + cuBLASLt.
void bench_silu(kc::BlasLt& blas, cudaStream_t stream, int64_t m) {
  const int64_t n = 4096, k = 14336;
  auto w = weight_copies(n * k);
  const int copies = static_cast<int>(w.size());
  DeviceBuffer<uint16_t> gu(m * 2 * k), act(m * k), y(m * n);
  fill(gu.data(), m * 2 * k, 5u, 3.0f);
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  int next = 0;
  const double fused = graph_time(stream, [&] {
    kc::gemv_bf16_silu(gu.data(), m, k, w[next].data(), n, y.data(), stream);
    next = (next + 1) % copies;
  });
  LOWBIT_CUDA_CHECK(cudaDeviceSynchronize());
  const double err =
      spot_check(gu.data(), 2 * k, true, w[(next + copies - 1) % copies].data(), y.data(), m, n, k);
  const double split = graph_time(stream, [&] {
    kc::silu_and_mul(gu.data(), m, k, act.data(), stream);
    kc::gemv_bf16(act.data(), m, k, w[next].data(), n, y.data(), stream);
    next = (next + 1) % copies;
  });
  const double blas_split = graph_time(stream, [&] {
    kc::silu_and_mul(gu.data(), m, k, act.data(), stream);
    kc::gemm_bf16(blas, act.data(), m, k, w[next].data(), n, y.data(), stream);
    next = (next + 1) % copies;
  });
  const double silu_alone =
      graph_time(stream, [&] { kc::silu_and_mul(gu.data(), m, k, act.data(), stream); });
  std::printf(
      "down+silu %2lld | fused %7.2f | silu_and_mul+gemv %7.2f | silu_and_mul+cuBLASLt %7.2f "
      "| silu_and_mul alone %5.2f | gain %+5.2f us | %.1e\n",
      static_cast<long long>(m), fused * 1e6, split * 1e6, blas_split * 1e6, silu_alone * 1e6,
      (split - fused) * 1e6, err);
}

// The o / down projection followed by the residual add and the next RMSNorm: today's pipeline
// (cuBLASLt [+ silu_and_mul before it] + fused_add_rmsnorm), the GEMV + fused_add_rmsnorm, and
// the single fused kernel (gemv_bf16_(silu_)add_rmsnorm).
void bench_norm(kc::BlasLt& blas, cudaStream_t stream, bool down, int64_t m) {
  const int64_t n = 4096, k = down ? 14336 : 4096, hidden = 4096;
  auto w = weight_copies(n * k);
  const int copies = static_cast<int>(w.size());
  DeviceBuffer<uint16_t> x(m * (down ? 2 * k : k)), act(m * k), y(m * n), res(m * n), out(m * n);
  DeviceBuffer<float> nw(hidden);
  DeviceBuffer<uint32_t> counter(1);
  LOWBIT_CUDA_CHECK(cudaMemset(counter.data(), 0, sizeof(uint32_t)));
  fill(x.data(), m * (down ? 2 * k : k), 7u, 1.0f);
  fill(res.data(), m * n, 8u, 1.0f);
  {
    std::vector<float> ones(hidden, 1.0f);
    nw = DeviceBuffer<float>(std::span<const float>(ones));
  }
  int next = 0;
  const double old_path = graph_time(stream, [&] {
    const uint16_t* in = x.data();
    if (down) {
      kc::silu_and_mul(x.data(), m, k, act.data(), stream);
      in = act.data();
    }
    kc::gemm_bf16(blas, in, m, k, w[next].data(), n, y.data(), stream);
    kc::fused_add_rmsnorm(y.data(), res.data(), nw.data(), 1e-5f, m, n, stream);
    next = (next + 1) % copies;
  });
  const double gemv_path = graph_time(stream, [&] {
    if (down) {
      kc::gemv_bf16_silu(x.data(), m, k, w[next].data(), n, y.data(), stream);
    } else {
      kc::gemv_bf16(x.data(), m, k, w[next].data(), n, y.data(), stream);
    }
    kc::fused_add_rmsnorm(y.data(), res.data(), nw.data(), 1e-5f, m, n, stream);
    next = (next + 1) % copies;
  });
  const kc::GemvResidualNorm norm{res.data(), nw.data(), 1e-5f, out.data(), counter.data()};
  const double fused = graph_time(stream, [&] {
    if (down) {
      kc::gemv_bf16_silu_add_rmsnorm(x.data(), m, k, w[next].data(), n, norm, stream);
    } else {
      kc::gemv_bf16_add_rmsnorm(x.data(), m, k, w[next].data(), n, norm, stream);
    }
    next = (next + 1) % copies;
  });
  std::printf(
      "%-4s+add+norm %lld | today (%scuBLASLt + fused_add_rmsnorm) %7.2f | gemv%s + "
      "fused_add_rmsnorm %7.2f | one kernel %7.2f us | gain vs today %+6.2f us\n",
      down ? "down" : "o", static_cast<long long>(m), down ? "silu_and_mul + " : "", old_path * 1e6,
      down ? "_silu" : "", gemv_path * 1e6, fused * 1e6, (old_path - fused) * 1e6);
}

// Decode step of one layer's attention input (rows = sequences): rope + KV write, fused or not.
void bench_rope_kv(cudaStream_t stream, int64_t rows) {
  const int heads = 32, kv_heads = 8, head_dim = 128;
  const int64_t width = int64_t{kv_heads} * head_dim, stride = heads * head_dim + 2 * width;
  const int64_t max_pos = 8192, blocks = 1024, block_size = 16;
  DeviceBuffer<uint16_t> qkv(rows * stride);
  fill(qkv.data(), rows * stride, 9u, 1.0f);
  std::vector<float> table(max_pos * head_dim);  // real cos / sin rows: rotations keep |x|
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int j = 0; j < head_dim / 2; ++j) {
      const double angle = p * std::pow(500000.0, -2.0 * j / head_dim);
      table[p * head_dim + j] = static_cast<float>(std::cos(angle));
      table[p * head_dim + head_dim / 2 + j] = static_cast<float>(std::sin(angle));
    }
  }
  DeviceBuffer<float> cs{std::span<const float>(table)};
  std::vector<int32_t> pos(rows), slots(rows);
  for (int64_t r = 0; r < rows; ++r) {
    pos[r] = static_cast<int32_t>(1000 + r);
    slots[r] = static_cast<int32_t>(r * block_size + 3);
  }
  DeviceBuffer<int32_t> dpos{std::span<const int32_t>(pos)},
      dslots{std::span<const int32_t>(slots)};
  DeviceBuffer<uint8_t> kc_(blocks * block_size * width * 2), vc_(blocks * block_size * width * 2);
  kc::PagedKvCache cache;
  cache.k_blocks = kc_.data();
  cache.v_blocks = vc_.data();
  cache.block_size = static_cast<int>(block_size);
  cache.kv_heads = kv_heads;
  cache.head_dim = head_dim;
  uint16_t* q = qkv.data();
  uint16_t* k = q + heads * head_dim;
  uint16_t* v = k + width;
  const double fused = graph_time(stream, [&] {
    kc::rope_neox_write_kv(q, stride, k, stride, v, stride, dpos.data(), dslots.data(), rows, heads,
                           head_dim, cs.data(), max_pos, cache, stream);
  });
  const double pair = graph_time(stream, [&] {
    kc::rope_neox(q, k, dpos.data(), rows, heads, kv_heads, head_dim, head_dim, cs.data(), max_pos,
                  stream, stride, stride);
    kc::write_kv_paged(reinterpret_cast<const __nv_bfloat16*>(k), stride,
                       reinterpret_cast<const __nv_bfloat16*>(v), stride, dslots.data(), rows,
                       cache, stream);
  });
  std::printf("rope+kv rows %3lld | fused %5.2f us | rope_neox + write_kv_paged %5.2f us\n",
              static_cast<long long>(rows), fused * 1e6, pair * 1e6);
}

}  // namespace

int main() {
  try {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("gemv_bench: no CUDA device\n");
      return 0;
    }
    cudaDeviceProp props{};
    LOWBIT_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
    cudaStream_t stream;
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const double copy_bw = copy_bandwidth(stream);
    std::printf("device: %s, %d SMs, L2 %d MB; measured D2D copy %.2f TB/s (spec %.1f)\n",
                props.name, props.multiProcessorCount, props.l2CacheSize >> 20, copy_bw * 1e-12,
                kSpecBandwidth * 1e-12);
    std::printf("time per call in a CUDA graph (median of %d replays of %d calls)\n", kReps,
                kGraphCalls);
    std::printf("%-8s %2s %6s %6s | %7s %7s %6s %6s | %7s %6s | %6s | %s\n", "layer", "m", "n", "k",
                "gemv us", "GB/s", "%4.8T", "%copy", "cuBLASLt", "%4.8T", "speedup", "spot err");
    kc::BlasLt blas;
    const LinearShape shapes[] = {
        {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
    for (const LinearShape& s : shapes) {
      for (int64_t m : {1, 2, 4, 8}) bench_linear(blas, stream, s, m, copy_bw);
    }
    for (int64_t m : {1, 2, 4, 8}) bench_silu(blas, stream, m);
    for (bool down : {false, true}) {
      for (int64_t m : {1, 8}) bench_norm(blas, stream, down, m);
    }
    for (int64_t rows : {1, 8}) bench_rope_kv(stream, rows);
    std::printf(
        "spot err = max |y - dot| / sum|x*w| over 64 sampled outputs (bf16 output rounding "
        "alone: <= 2e-3)\n");
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemv_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
