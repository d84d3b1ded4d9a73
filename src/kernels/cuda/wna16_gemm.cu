// The GPU weight-only GEMM's entry point (wna16_gemm.h): path choice, workspace, the x gather, and
// the prefill path (dequantize a slice of rows to bf16, then one cuBLASLt BF16 GEMM per slice).
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/wna16_device.cuh"
#include "kernels/cuda/wna16_internal.h"

namespace lowbit::kernels::cuda {

namespace detail {

namespace {

constexpr int kThreads = 256;

__global__ void wna16_gather_kernel(const uint16_t* x, int64_t m, int64_t k, const int32_t* column_of,
                                    int64_t kp, uint16_t* xp) {
  const int64_t total = m * kp;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / kp;
    const int32_t c = column_of ? column_of[e - i * kp] : static_cast<int32_t>(e - i * kp);
    xp[e] = c < 0 || c >= k ? uint16_t{0} : x[i * k + c];
  }
}

struct DequantParams {
  const uint4* codes = nullptr;
  const float2* scales = nullptr;
  const uint16_t* zeros = nullptr;
  uint32_t zero_pair = 0;
  int64_t chunks = 0;
  int64_t padded_groups = 0;
  int64_t steps_per_group = 1;
  int64_t tile0 = 0;
  int64_t tiles = 0;
  uint16_t* dst = nullptr;  // [tiles·16, chunks·64]
};

__device__ __forceinline__ uint32_t scaled_bf16x2(uint32_t q, float scale) {
  // q is an exact bf16x2 (q - z); (q - z)·s rounds once in fp32 (as ref) and once to bf16.
  const float lo = __fmul_rn(__uint_as_float(q << 16), scale);
  const float hi = __fmul_rn(__uint_as_float(q & 0xFFFF0000u), scale);
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// One warp per (tile, chunk): 16 rows × 64 columns of bf16 weights, 8-byte stores.
template <int BITS>
__global__ void __launch_bounds__(kThreads) wna16_dequant_kernel(const DequantParams p) {
  constexpr int V = BITS / 4;
  const int64_t item = blockIdx.x * static_cast<int64_t>(kThreads / 32) + (threadIdx.x >> 5);
  if (item >= p.tiles * p.chunks) return;
  const int lane = static_cast<int>(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
  const int64_t local = item / p.chunks, chunk = item - local * p.chunks, tile = p.tile0 + local;
  uint4 v[V];
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = __ldcs(p.codes + ((tile * p.chunks + chunk) * V + i) * 32 + lane);
  const int64_t kp = p.chunks * 64;
  uint16_t* row0 = p.dst + (local * 16 + g) * kp + chunk * 64 + t * 4;
  uint16_t* row1 = row0 + 8 * kp;
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const int64_t at = (tile * p.padded_groups + (chunk * 4 + s) / p.steps_per_group) * 8 + g;
    const float2 scale = __ldg(p.scales + at);
    uint32_t nz0, nz1, a[4];
    neg_zeros<BITS>(p.zeros ? __ldg(p.zeros + at) : p.zero_pair, nz0, nz1);
    dequant_step<BITS>(v, s, nz0, nz1, a);
    *reinterpret_cast<uint2*>(row0 + s * 16) = make_uint2(scaled_bf16x2(a[0], scale.x), scaled_bf16x2(a[2], scale.x));
    *reinterpret_cast<uint2*>(row1 + s * 16) = make_uint2(scaled_bf16x2(a[1], scale.y), scaled_bf16x2(a[3], scale.y));
  }
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t slice_tiles(const Wna16GpuLayout& L) {
  const auto tile_bytes = static_cast<size_t>(16 * L.padded_cols() * 2);
  return std::min<int64_t>(L.tiles, std::max<int64_t>(1, static_cast<int64_t>(kWna16DequantSliceBytes / tile_bytes)));
}

// ---- cuBLASLt ----------------------------------------------------------------------------------

cublasLtHandle_t lt_handle() {
  static std::mutex mutex;
  static std::vector<cublasLtHandle_t> handles;  // per device, kept for the process's life
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (handles.size() <= static_cast<size_t>(device)) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  if (!handles[static_cast<size_t>(device)]) LOWBIT_CUBLAS_CHECK(cublasLtCreate(&handles[static_cast<size_t>(device)]));
  return handles[static_cast<size_t>(device)];
}

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct LtObjects {  // RAII for one call's descriptors
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The heuristic's first choice per problem (the query costs more than a small GEMM).
bool cached_algo(const std::array<int64_t, 13>& key, cublasLtMatmulAlgo_t* algo,
                 const cublasLtMatmulAlgo_t* store) {
  static std::mutex mutex;
  static std::map<std::array<int64_t, 13>, cublasLtMatmulAlgo_t> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (store) {
    cache[key] = *store;
    return true;
  }
  auto it = cache.find(key);
  if (it == cache.end()) return false;
  *algo = it->second;
  return true;
}

}  // namespace

void lt_bf16_gemm(const uint16_t* x, int64_t ldx, int64_t m, const uint16_t* w, int64_t ldw,
                  int64_t n, int64_t k, const uint16_t* bias, uint16_t* d, int64_t ldd,
                  void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  LOWBIT_CHECK_AS(Internal, k > 0, "lt_bf16_gemm: k = 0");
  cublasLtHandle_t handle = lt_handle();
  LtObjects o;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&o.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  // Column-major view: D (n × m, ld ldd) = op(A) (A: k × n, ld ldw, transposed) · B (k × m, ld ldx).
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o.a, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldw));
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o.b, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ldx));
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&o.d, CUDA_R_16BF, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldd));

  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  const uint32_t align_a = alignment(w), align_b = alignment(x), align_d = alignment(d);
  const std::array<int64_t, 13> key = {device, m, n, k, ldx, ldw, ldd, bias != nullptr, align_a,
                                       align_b, align_d, static_cast<int64_t>(workspace_bytes),
                                       bias ? alignment(bias) : 0};
  cublasLtMatmulAlgo_t algo;
  if (!cached_algo(key, &algo, nullptr)) {
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&o.pref));
    const uint64_t max_workspace = workspace_bytes;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
    // Split-k partial sums are added in fp32, never in the bf16 output type (the first H200 run
    // showed bf16 reductions losing ~0.5% on small n).
    const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask, sizeof(reduction_mask)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, o.op, o.a, o.b, o.d, o.d, o.pref, 1, &result, &found));
    if (found == 0) {
      throw Unsupported("lt_bf16_gemm: cuBLASLt has no BF16 algorithm for m=" + std::to_string(m) +
                        " n=" + std::to_string(n) + " k=" + std::to_string(k));
    }
    algo = result.algo;
    cached_algo(key, nullptr, &algo);
  }
  const float alpha = 1.0f, beta = 0.0f;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmul(handle, o.op, &alpha, w, o.a, x, o.b, &beta, d, o.d, d, o.d, &algo,
                                     workspace, workspace_bytes, stream));
}

void launch_wna16_dequant(const Wna16GpuWeights& w, int64_t tile0, int64_t tiles, uint16_t* dst,
                          cudaStream_t stream) {
  const Wna16GpuLayout& L = w.layout;
  if (tiles == 0 || L.chunks == 0) return;
  DequantParams p;
  p.codes = reinterpret_cast<const uint4*>(w.codes.data());
  p.scales = reinterpret_cast<const float2*>(w.scales.data());
  p.zeros = L.has_zeros ? reinterpret_cast<const uint16_t*>(w.zeros.data()) : nullptr;
  const uint32_t z0 = 1u << (L.bits - 1);
  p.zero_pair = z0 | (z0 << 8);
  p.chunks = L.chunks;
  p.padded_groups = L.padded_groups;
  p.steps_per_group = L.steps_per_group;
  p.tile0 = tile0;
  p.tiles = tiles;
  p.dst = dst;
  const int64_t warps_per_block = kThreads / 32;
  const dim3 grid(static_cast<unsigned>((tiles * L.chunks + warps_per_block - 1) / warps_per_block));
  if (L.bits == 4) {
    wna16_dequant_kernel<4><<<grid, kThreads, 0, stream>>>(p);
  } else {
    wna16_dequant_kernel<8><<<grid, kThreads, 0, stream>>>(p);
  }
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_wna16_gather(const uint16_t* x, int64_t m, const Wna16GpuWeights& w, uint16_t* xp,
                         cudaStream_t stream) {
  const int64_t total = m * w.layout.padded_cols();
  if (total == 0) return;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 4096);
  wna16_gather_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, m, w.layout.k, w.column_of.size() ? w.column_of.data() : nullptr, w.layout.padded_cols(), xp);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace detail

namespace {

// AUTO resolved; nothing to dequantize (k = 0 or n = 0) runs the stream kernel (bias only).
Wna16GpuPath resolve(Wna16GpuPath path, int64_t m, const Wna16GpuWeights& w) {
  if (path == Wna16GpuPath::AUTO) path = wna16_auto_path(m, w);
  if (w.layout.chunks == 0 || w.layout.tiles == 0) path = Wna16GpuPath::STREAM;
  return path;
}

size_t gather_bytes(int64_t m, const Wna16GpuLayout& L) {
  return L.gather_x ? detail::align_up(static_cast<size_t>(m * L.padded_cols() * 2)) : 0;
}

}  // namespace

// AUTO's model (times in µs on an H200; constants from the measurements of bench/NOTES.md, rounded):
// STREAM runs ceil(m / 64) launches, each reading the packed weights once at ~3 TB/s or doing its
// tensor-core work (mma.sync plus the dequantization) at ~230 TFLOP/s scaled by how much of one
// wave of resident blocks the block kernel's grid fills (264 on the H200: two per SM), whichever is
// longer, plus ~3 µs per launch; DEQUANT_GEMM reads the packed weights and writes bf16 ones (~3
// TB/s), then cuBLASLt reads them again or computes at ~650 TFLOP/s, plus ~6 µs for the two
// launches per slice. With one pass over the weights STREAM wins to m = 64 on every Llama-8B shape
// (measured); beyond, the model decides: at 128 rows the wide layers (gate/up) stream and the
// narrow ones (q/k/v, o, down) dequantize.
Wna16GpuPath wna16_auto_path(int64_t m, const Wna16GpuWeights& weights) {
  if (m <= detail::kWna16StreamMaxRows) return Wna16GpuPath::STREAM;
  const Wna16GpuLayout& L = weights.layout;
  const double packed = static_cast<double>(weights.codes.bytes() + weights.scales.bytes() + weights.zeros.bytes());
  const double weights_n = static_cast<double>(L.tiles * 16) * static_cast<double>(L.padded_cols());
  const double launches = std::ceil(static_cast<double>(m) / static_cast<double>(detail::kWna16StreamMaxRows));
  const double rows = std::ceil(static_cast<double>(m) / launches);
  constexpr int64_t kResident = 264;
  const int64_t blocks = (L.tiles + detail::kWna16BlockTiles - 1) / detail::kWna16BlockTiles;
  const double fill = std::min(1.0, static_cast<double>(blocks * detail::wna16_block_splits(blocks, L.chunks, kResident)) /
                                        static_cast<double>(kResident));
  const double stream_us = launches * (3.0 + std::max(packed / 3.0e6, 2.0 * rows * weights_n / (230e6 * fill)));
  const double slices = std::ceil(static_cast<double>(L.tiles) / static_cast<double>(std::max<int64_t>(detail::slice_tiles(L), 1)));
  const double dequant_us = slices * 6.0 + (packed + 2.0 * weights_n) / 3.0e6 +
                            std::max(2.0 * weights_n / 3.3e6, 2.0 * static_cast<double>(m) * weights_n / 650e6);
  // WGMMA is not taken: measured slower than these two on every Llama-8B shape (bench/NOTES.md,
  // session 30).
  return stream_us <= dequant_us ? Wna16GpuPath::STREAM : Wna16GpuPath::DEQUANT_GEMM;
}

size_t wna16_workspace_bytes(int64_t m, const Wna16GpuWeights& weights, Wna16GpuPath path) {
  if (m <= 0) return 0;
  const Wna16GpuLayout& L = weights.layout;
  const Wna16GpuPath resolved = resolve(path, m, weights);
  if (resolved == Wna16GpuPath::WGMMA)
    return detail::align_up(static_cast<size_t>(m * L.padded_cols() * 2));  // x in k order
  size_t bytes = gather_bytes(m, L);
  if (resolved == Wna16GpuPath::DEQUANT_GEMM) {
    bytes += detail::align_up(static_cast<size_t>(detail::slice_tiles(L) * 16 * L.padded_cols() * 2)) +
             detail::kWna16LtWorkspaceBytes;
  }
  return bytes;
}

namespace {

// The argument checks both entry points share (fn names the caller; y_align: its element size).
// False when there is nothing to do (m == 0 or no output features).
bool check_call(const char* fn, const uint16_t* x, int64_t m, const Wna16GpuWeights& weights,
                const void* y, const void* bias, uintptr_t y_align, void* workspace,
                size_t workspace_bytes, Wna16GpuPath path) {
  const std::string f = fn;
  const Wna16GpuLayout& L = weights.layout;
  LOWBIT_CHECK(m >= 0, f + ": m = " + std::to_string(m) + " is negative");
  if (m == 0 || L.n == 0) return false;
  LOWBIT_CHECK(y != nullptr, f + ": y is null");
  LOWBIT_CHECK(L.k == 0 || x != nullptr, f + ": x is null");
  LOWBIT_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(y) % y_align == 0 &&
                   reinterpret_cast<uintptr_t>(bias) % y_align == 0,
               f + ": x must be 16-byte aligned, y and bias " + std::to_string(y_align) +
                   "-byte aligned");
  const size_t need = wna16_workspace_bytes(m, weights, path);
  LOWBIT_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr),
               f + ": workspace of " + std::to_string(workspace_bytes) + " bytes, m = " +
                   std::to_string(m) + " needs " + std::to_string(need));
  return true;
}

// x in the kernels' column order: gathered into the workspace's start when the layout asks.
struct PackedX {
  const uint16_t* x;
  int64_t ldx;
  char* rest;  // the workspace after the gathered copy
};
PackedX packed_x(const uint16_t* x, int64_t m, const Wna16GpuWeights& weights, void* workspace,
                 cudaStream_t stream) {
  const Wna16GpuLayout& L = weights.layout;
  auto* scratch = static_cast<char*>(workspace);
  if (!L.gather_x) return {x, L.k, scratch};
  auto* gathered = reinterpret_cast<uint16_t*>(scratch);
  detail::launch_wna16_gather(x, m, weights, gathered, stream);
  return {gathered, L.padded_cols(), scratch + gather_bytes(m, L)};
}

// The STREAM path over m rows: launches of at most 64 rows (each streams the weights once), as
// even as possible; launch(first_row, rows) issues one.
template <typename Launch>
void stream_launches(int64_t m, Launch launch) {
  const int64_t launches = (m + detail::kWna16StreamMaxRows - 1) / detail::kWna16StreamMaxRows;
  for (int64_t l = 0, i0 = 0; l < launches; ++l) {
    const int64_t rows = (m - i0) / (launches - l);
    launch(i0, rows);
    i0 += rows;
  }
}

}  // namespace

void wna16_gemm(const uint16_t* x, int64_t m, const Wna16GpuWeights& weights, uint16_t* y,
                void* workspace, size_t workspace_bytes, cudaStream_t stream, const uint16_t* bias,
                Wna16GpuPath path) {
  if (!check_call("wna16_gemm", x, m, weights, y, bias, 2, workspace, workspace_bytes, path)) return;
  const Wna16GpuLayout& L = weights.layout;
  path = resolve(path, m, weights);
  if (path == Wna16GpuPath::WGMMA) {
    auto* xw = static_cast<uint16_t*>(workspace);
    detail::launch_wna16_wgmma_x(x, m, weights, xw, stream);
    detail::launch_wna16_wgmma(xw, L.padded_cols(), m, weights, bias, y, stream);
    return;
  }
  const PackedX px = packed_x(x, m, weights, workspace, stream);
  if (path == Wna16GpuPath::STREAM) {
    stream_launches(m, [&](int64_t i0, int64_t rows) {
      detail::launch_wna16_stream(px.x ? px.x + i0 * px.ldx : nullptr, px.ldx, rows, weights, bias,
                                  y + i0 * L.n, stream);
    });
    return;
  }
  const int64_t slice = detail::slice_tiles(L);
  auto* dequantized = reinterpret_cast<uint16_t*>(px.rest);
  void* lt_workspace = px.rest + detail::align_up(static_cast<size_t>(slice * 16 * L.padded_cols() * 2));
  for (int64_t tile0 = 0; tile0 * 16 < L.n; tile0 += slice) {
    const int64_t tiles = std::min(slice, L.tiles - tile0);
    const int64_t rows = std::min(tiles * 16, L.n - tile0 * 16);
    detail::launch_wna16_dequant(weights, tile0, tiles, dequantized, stream);
    detail::lt_bf16_gemm(px.x, px.ldx, m, dequantized, L.padded_cols(), rows, L.padded_cols(),
                         bias ? bias + tile0 * 16 : nullptr, y + tile0 * 16, L.n, lt_workspace,
                         detail::kWna16LtWorkspaceBytes, stream);
  }
}

void wna16_gemm_f32out(const uint16_t* x, int64_t m, const Wna16GpuWeights& weights, float* y,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const float* bias) {
  if (!check_call("wna16_gemm_f32out", x, m, weights, y, bias, 4, workspace, workspace_bytes,
                  Wna16GpuPath::STREAM)) {
    return;
  }
  const PackedX px = packed_x(x, m, weights, workspace, stream);
  stream_launches(m, [&](int64_t i0, int64_t rows) {
    detail::launch_wna16_stream_f32(px.x ? px.x + i0 * px.ldx : nullptr, px.ldx, rows, weights,
                                    bias, y + i0 * weights.layout.n, stream);
  });
}

}  // namespace lowbit::kernels::cuda
