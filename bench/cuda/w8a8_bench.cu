// W8A8 GEMMs on the GPU (kernels/cuda/w8a8_gemm.h) on Llama-3-8B linear shapes, side by side with
// cuBLASLt BF16 of the same shape. One call = activation quantization + product + scaling, as a
// layer runs it.
//
// Count first (per call, m tokens, n x k weights):
//   FLOPs  2·m·n·k.
//   bytes  n·k (fp8 / int8 weights; bf16: 2·n·k) + m·k·2 (x) + m·k (codes, written and read back)
//          + m·n·2 (y); the LT_EPILOGUE paths add m·n·8 (fp32 / int32 stage written and read, mostly
//          in L2 by chunking).
// Prediction (H200: ~4.25 TB/s copy, ~790 TFLOP/s bf16 measured; FP8/INT8 dense spec 1979):
//   m = 1, 16: weight streaming. gate_up 28672x4096: 117 MB fp8 → ~28 µs at 4.25 TB/s vs ~55 µs
//     bf16: ~2x. Small layers (o: 17 MB) sit at launch/latency floors (~10-20 µs) on both.
//   m = 1, 8 on the GEMV path (gemv_fp8.cu, like gemv_bf16 at 76-85% of HBM): gate_up ~29 µs,
//     down ~15 µs, qkv ~7 µs, o ~5 µs plus ~2 µs of activation quantization before it.
//   m = 128: still mostly bandwidth (intensity 2·128 = 256 FLOP/B for fp8, crossing ~470 FLOP/B
//     ridge only near m = 256): ~1.5-2x over bf16.
//   m = 1024, 4096: compute bound; cuBLASLt FP8 reached ~1300 TFLOP/s on this machine through
//     torch._scaled_mm at m = 2048 (PERFORMANCE.md), bf16 ~760: ~1.6-1.7x. Per-channel / block
//     scaling inside cuBLASLt should cost little; the fp32-stage epilogue path ~10-25% more; INT8
//     IMMA on Hopper is expected near FP8's rate.
// Method: random data (never zeros), weights rotated over enough copies to exceed the 50 MB L2,
// per call time = median over 21 batches of 10 back-to-back calls between CUDA events (launch gaps
// hidden as in a real stream, not by a graph), after warm-up. Sanity: at m = 16 each variant's
// output against bf16 cuBLASLt on the same real-valued weights (relative L2; fp8 ~3-6%, int8 ~1%:
// quantization error, not kernel error — the unit tests check the kernels exactly).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/float_convert.h"
#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/w8a8_gemm.h"
#include "lowbit/error.h"

using namespace lowbit;
using namespace lowbit::kernels;
using namespace lowbit::kernels::cuda;

namespace {

constexpr double kPeak8 = 1979e12, kPeak16 = 989e12, kHbm = 4.8e12;

// Deterministic uniform in [-1, 1) per element, so that rows can be generated in parallel.
float hash_uniform(uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename F>
void parallel_rows(int64_t rows, F f) {
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t r = t; r < rows; r += threads) f(r);
    });
  }
  for (auto& th : pool) th.join();
}

// One real-valued weight matrix W[r][c] = u·mag(r), quantized three ways and kept in bf16.
struct LayerWeights {
  Fp8Weights fp8_channel, fp8_block;
  IntWeights int8_channel;
  std::vector<uint16_t> bf16;
};

LayerWeights make_layer(int64_t n, int64_t k, uint64_t seed) {
  LayerWeights L;
  auto mag = [&](int64_t r) { return 0.02f + 0.05f * (hash_uniform(seed * 7919 + r) + 1.0f); };
  L.fp8_channel = {n, k, 1, k, std::vector<uint8_t>(n * k), std::vector<float>(n)};
  const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
  L.fp8_block = {n, k, 128, 128, std::vector<uint8_t>(n * k), std::vector<float>(nb * kb)};
  L.int8_channel.bits = 8;
  L.int8_channel.rows = n;
  L.int8_channel.cols = k;
  L.int8_channel.group_size = k;
  L.int8_channel.codes.resize(n * k);
  L.int8_channel.scales.resize(n);
  L.bf16.resize(n * k);
  for (int64_t b = 0; b < nb; ++b) {
    float m = 0.0f;  // |W| <= mag: an absmax bound, so no code clamps
    for (int64_t r = b * 128; r < std::min(n, b * 128 + 128); ++r) m = std::max(m, mag(r));
    for (int64_t c = 0; c < kb; ++c) L.fp8_block.scales[b * kb + c] = m / 448.0f;
  }
  parallel_rows(n, [&](int64_t r) {
    const float sc = mag(r) / 448.0f, sb = L.fp8_block.scales[(r / 128) * kb], si = mag(r) / 127.0f;
    L.fp8_channel.scales[r] = sc;
    L.int8_channel.scales[r] = si;
    for (int64_t c = 0; c < k; ++c) {
      const float w = hash_uniform(seed ^ (uint64_t(r) * k + c)) * mag(r);
      const size_t e = static_cast<size_t>(r * k + c);
      L.bf16[e] = f32_to_bf16(w);
      L.fp8_channel.codes[e] = f32_to_fp8_e4m3(w / sc);
      L.fp8_block.codes[e] = f32_to_fp8_e4m3(w / sb);
      L.int8_channel.codes[e] = static_cast<uint8_t>(std::lrint(w / si) + 128);
    }
  });
  return L;
}

// cuBLASLt BF16 "TN" y = x · wᵀ, the baseline (fp32 compute, bf16 out); one plan per m, so no
// heuristic query or descriptor setup is timed.
struct Bf16Gemm {
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulHeuristicResult_t h{};
  };
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer<uint8_t> ws{size_t(32) << 20};
  std::map<std::array<int64_t, 3>, Plan> plans;  // never destroyed: the process ends after use

  Bf16Gemm() { LOWBIT_CUBLAS_CHECK(cublasLtCreate(&handle)); }
  const Plan& plan(int64_t m, int64_t n, int64_t k) {
    auto it = plans.find({m, n, k});
    if (it != plans.end()) return it->second;
    Plan p;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k));
    LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k));
    LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, n, m, n));
    cublasLtMatmulPreference_t pref;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t bytes = ws.size();
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
    int count = 0;
    LOWBIT_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &p.h, &count));
    cublasLtMatmulPreferenceDestroy(pref);
    if (count == 0) throw Unsupported("bf16 cuBLASLt: no algorithm");
    return plans.emplace(std::array<int64_t, 3>{m, n, k}, p).first->second;
  }
  void run(const uint16_t* w, const uint16_t* x, uint16_t* y, int64_t m, int64_t n, int64_t k,
           cudaStream_t stream) {
    const Plan& p = plan(m, n, k);
    const float one = 1.0f, zero = 0.0f;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmul(handle, p.desc, &one, w, p.a, x, p.b, &zero, y, p.d, y, p.d,
                                       &p.h.algo, ws.data(), ws.size(), stream));
  }
};

// Median per-call milliseconds of `call(i)` (i rotates the weight copies).
template <typename F>
double time_ms(F call, cudaStream_t stream) {
  for (int i = 0; i < 5; ++i) call(i);
  cudaEvent_t start, stop;
  LOWBIT_CUDA_CHECK(cudaEventCreate(&start));
  LOWBIT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> per_call;
  int i = 0;
  for (int batch = 0; batch < 21; ++batch) {
    LOWBIT_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < 10; ++r) call(i++);
    LOWBIT_CUDA_CHECK(cudaEventRecord(stop, stream));
    LOWBIT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    per_call.push_back(ms / 10.0f);
  }
  LOWBIT_CUDA_CHECK(cudaEventDestroy(start));
  LOWBIT_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

double rel_l2(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
    e += (x - y) * (x - y);
    r += y * y;
  }
  return std::sqrt(e / std::max(r, 1e-30));
}

struct Shape {
  const char* name;
  int64_t n, k;
};

struct Variant {
  const char* name;
  bool fp8;
  const W8a8GpuWeights* w;  // copies
  Fp8Activations fa;
  W8a8Path path;
};

}  // namespace

int main() {
  if (!device_available()) {
    std::printf("w8a8_bench: no CUDA device, nothing to measure\n");
    return 0;
  }
  const Shape shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096},
                          {"down", 4096, 14336}};
  const int64_t ms[] = {1, 8, 16, 128, 1024, 2048, 4096};
  const int64_t max_m = 4096;
  cudaStream_t stream;
  LOWBIT_CUDA_CHECK(cudaStreamCreate(&stream));
  Bf16Gemm bf16;
  std::printf("W8A8 GPU bench: time per call (quantize x + GEMM + scaling), median of 21x10 calls\n");
  std::printf("peak: fp8/int8 %.0f TFLOP/s, bf16 %.0f TFLOP/s, HBM %.1f TB/s (spec)\n", kPeak8 / 1e12,
              kPeak16 / 1e12, kHbm / 1e12);
  std::printf("%-8s %5s %-20s %-18s %9s %8s %6s %8s %9s %6s %7s %8s\n", "layer", "m", "variant", "path",
              "us", "TFLOP/s", "%peak", "wGB/s", "bf16 us", "x bf16", "quant", "rel-err");
  for (const Shape& s : shapes) {
    const LayerWeights L = make_layer(s.n, s.k, 1234 + s.n + s.k);
    const size_t w8_bytes = static_cast<size_t>(s.n * s.k);
    const int copies = static_cast<int>(std::clamp<size_t>((size_t(256) << 20) / w8_bytes + 1, 2, 8));
    std::vector<W8a8GpuWeights> fp8c, fp8b, int8c;
    std::vector<DeviceBuffer<uint16_t>> wbf;
    for (int c = 0; c < copies; ++c) {
      fp8c.push_back(pack_fp8_for_gpu(L.fp8_channel));
      fp8b.push_back(pack_fp8_for_gpu(L.fp8_block));
      int8c.push_back(pack_int8_for_gpu(L.int8_channel));
      if (c < std::max(2, copies / 2)) wbf.emplace_back(std::span<const uint16_t>(L.bf16));
    }
    std::vector<uint16_t> xh(static_cast<size_t>(max_m * s.k));
    for (size_t i = 0; i < xh.size(); ++i) xh[i] = f32_to_bf16(hash_uniform(i + 99) * 2.0f);
    DeviceBuffer<uint16_t> x{std::span<const uint16_t>(xh)};
    DeviceBuffer<uint16_t> y(static_cast<size_t>(max_m * s.n)), yref(y.size());
    const Int8Activations ia;
    const Fp8Activations token{Fp8ActScheme::PER_TOKEN, 1.0f, 128},
        group{Fp8ActScheme::PER_GROUP, 1.0f, 128};
    size_t ws_bytes = 0;
    ws_bytes = std::max(ws_bytes, w8a8_workspace_bytes(fp8c[0], max_m, token));
    ws_bytes = std::max(ws_bytes, w8a8_workspace_bytes(fp8b[0], max_m, group));
    ws_bytes = std::max(ws_bytes, w8a8_workspace_bytes(int8c[0], max_m, ia));
    DeviceBuffer<uint8_t> ws(ws_bytes);
    DeviceBuffer<uint8_t> qscratch(static_cast<size_t>(max_m * s.k));
    DeviceBuffer<float> sscratch(static_cast<size_t>(max_m));
    const Variant variants[] = {
        {"fp8 channel x token", true, fp8c.data(), token, W8a8Path::AUTO},
        {"fp8 ch x tok (epi)", true, fp8c.data(), token, W8a8Path::LT_EPILOGUE},
        {"fp8 ch x tok (gemv)", true, fp8c.data(), token, W8a8Path::GEMV},
        {"fp8 block x group128", true, fp8b.data(), group, W8a8Path::AUTO},
        {"int8 channel x token", false, int8c.data(), token, W8a8Path::AUTO},
    };
    for (int64_t m : ms) {
      const double flops = 2.0 * m * s.n * s.k;
      const double bf16_ms = time_ms([&](int i) {
        bf16.run(wbf[i % wbf.size()].data(), x.data(), yref.data(), m, s.n, s.k, stream);
      }, stream);
      const double quant_ms = time_ms([&](int) {
        quantize_per_token_fp8(x.data(), m, s.k, qscratch.data(), sscratch.data(), stream);
      }, stream);
      std::vector<uint16_t> ref_host;
      if (m == 16) {
        LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
        ref_host = yref.download();
        ref_host.resize(static_cast<size_t>(m * s.n));
      }
      std::printf("%-8s %5ld %-20s %-18s %9.1f %8.1f %5.1f%% %8.0f %9s %6s %7.1f %8s\n", s.name,
                  static_cast<long>(m), "bf16 cublaslt", "-", bf16_ms * 1e3, flops / bf16_ms / 1e9,
                  100.0 * flops / bf16_ms / 1e-3 / kPeak16, 2.0 * s.n * s.k / bf16_ms / 1e6, "-", "-",
                  quant_ms * 1e3, "-");
      for (const Variant& v : variants) {
        W8a8Path ran = v.path;
        double t = 0.0;
        try {
          t = time_ms([&](int i) {
            const W8a8GpuWeights& w = v.w[i % copies];
            ran = v.fp8 ? w8a8_gemm(w, x.data(), m, v.fa, nullptr, y.data(), ws.data(), ws_bytes,
                                    stream, v.path)
                        : w8a8_gemm(w, x.data(), m, ia, nullptr, y.data(), ws.data(), ws_bytes,
                                    stream, v.path);
          }, stream);
        } catch (const Unsupported& e) {
          std::printf("%-8s %5ld %-20s unsupported: %s\n", s.name, static_cast<long>(m), v.name, e.what());
          continue;
        }
        char err[16] = "-";
        if (m == 16) {
          LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
          auto got = y.download();
          got.resize(ref_host.size());
          std::snprintf(err, sizeof(err), "%.4f", rel_l2(got, ref_host));
        }
        std::printf("%-8s %5ld %-20s %-18s %9.1f %8.1f %5.1f%% %8.0f %9.1f %5.2fx %7s %8s\n", s.name,
                    static_cast<long>(m), v.name, w8a8_path_name(ran), t * 1e3, flops / t / 1e9,
                    100.0 * flops / t / 1e-3 / kPeak8, w8_bytes / t / 1e6, bf16_ms * 1e3, bf16_ms / t,
                    "", err);
      }
    }
  }
  LOWBIT_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
