// GPTQ's device kernels: the element-wise set-up and tear-down (permutation, dead columns, the
// factorization's input and output) and the column loop over one block of columns.
#include "quant/gpu/gptq_kernels.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "kernels/cuda/cuda_check.h"

namespace lowbit::quant::gpu::detail {

namespace {

constexpr int kThreads = 256;      // element-wise kernels
constexpr int kBlockThreads = 128;  // column loop: all load and store, the first tile_rows compute

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8));
}

__global__ void flag_nonfinite_kernel(const float* x, int64_t n, unsigned int* flag) {
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(x[i]);
  if (__any_sync(0xFFFFFFFFu, bad) && (threadIdx.x & 31) == 0) atomicOr(flag, 1u);
}

__global__ void permute_kernel(const float* w, float* out, int64_t rows, int64_t cols,
                               const int64_t* perm, const uint8_t* dead) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, k = i % cols;
    const bool is_dead = dead != nullptr && dead[k] != 0;
    out[i] = is_dead ? 0.0f : w[r * cols + (perm ? perm[k] : k)];
  }
}

__global__ void unpermute_round_kernel(const float* wp, float* out, int64_t rows, int64_t cols,
                                       const int64_t* perm, RoundTo to) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, k = i % cols;
    out[r * cols + (perm ? perm[k] : k)] = round_to(wp[i], to);
  }
}

__global__ void widen_bf16_kernel(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __uint_as_float(static_cast<uint32_t>(in[i]) << 16);
}

// round_bf16 leaves the low 16 bits zero (NaN too: its quiet bit is set), so its top half is
// f32_to_bf16 of the rounded value: the bits set_weight would store.
__global__ void unpermute_bf16_kernel(const float* wp, uint16_t* out, int64_t rows, int64_t cols,
                                      const int64_t* perm) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, k = i % cols;
    out[r * cols + (perm ? perm[k] : k)] =
        static_cast<uint16_t>(__float_as_uint(round_bf16(wp[i])) >> 16);
  }
}

// a[p + q·n] (column-major, p <= q) = A[q][p] with A[i][j] = Hp[n-1-i][n-1-j]: consecutive threads
// take consecutive p, i.e. consecutive (reversed) columns of one row of h.
__global__ void build_factor_input_kernel(const float* h, double* a, int64_t n,
                                          const int64_t* perm, const double* diag) {
  const int64_t total = n * n;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = t % n, q = t / n;
    double v = 0.0;
    if (p == q) {
      v = diag[n - 1 - p];
    } else if (p < q) {
      const int64_t i = n - 1 - q, j = n - 1 - p;  // Hp[i][j]
      v = static_cast<double>(h[(perm ? perm[i] : i) * n + (perm ? perm[j] : j)]);
    }
    a[t] = v;
  }
}

// u[i][j] = (Uc⁻¹)[n-1-j][n-1-i] = a[n² - 1 - (i·n + j)] for j >= i: a reversal, coalesced.
__global__ void extract_u_kernel(const double* a, float* u, int64_t n) {
  const int64_t total = n * n;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / n, j = t % n;
    u[t] = j >= i ? static_cast<float>(a[total - 1 - t]) : 0.0f;
  }
}

// The column loop over block [i1, i1 + bw) for rows [row0, row0 + tile_rows): the weights and
// errors of the tile (and U's diagonal block when it fits) in shared memory, one thread per row
// sweeping the block's columns in order — gptq.cc's quantize_block, operation for operation.
// Rows are padded to bw + 1 floats so that the threads' same-column accesses hit distinct banks.
__global__ void __launch_bounds__(kBlockThreads)
    block_kernel(float* w, int64_t rows, int64_t cols, int64_t i1, int bw, const float* u,
                 float* err, QuantSpec q, int tile_rows, bool u_shared, double* loss) {
  extern __shared__ float smem[];
  const int stride = bw + 1;
  float* ws = smem;
  float* es = ws + tile_rows * stride;
  float* us = es + tile_rows * stride;
  const int64_t row0 = blockIdx.x * int64_t(tile_rows);
  const int nrows = static_cast<int>(min(int64_t(tile_rows), rows - row0));
  for (int t = threadIdx.x; t < nrows * bw; t += blockDim.x) {
    const int r = t / bw, c = t % bw;
    ws[r * stride + c] = w[(row0 + r) * cols + i1 + c];
  }
  const float* ub = u + i1 * cols + i1;
  int64_t ustride = cols;
  if (u_shared) {
    for (int t = threadIdx.x; t < bw * bw; t += blockDim.x) us[t] = ub[(t / bw) * cols + t % bw];
    ub = us;
    ustride = bw;
  }
  __syncthreads();

  double row_loss = 0.0;
  if (threadIdx.x < nrows) {
    const int64_t row = row0 + threadIdx.x;
    const int64_t gr = q.row_div == 0 ? 0 : row / q.row_div;
    const float* srow = q.scale + gr * q.grid_cols;
    const float* zrow = q.zero ? q.zero + gr * q.grid_cols : nullptr;
    float* wr = ws + threadIdx.x * stride;
    float* er = es + threadIdx.x * stride;
    float block_loss = 0.0f;
    for (int i = 0; i < bw; ++i) {
      const float* ui = ub + i * ustride;
      const int32_t gc = q.col_group[i1 + i];
      const float x = wr[i];
      const float qv = fake_quantize(x, srow[gc], zrow ? zrow[gc] : 0.0f, q);
      const float e = __fdiv_rn(__fsub_rn(x, qv), ui[i]);
#pragma unroll 4
      for (int j = i + 1; j < bw; ++j) wr[j] = __fsub_rn(wr[j], __fmul_rn(e, ui[j]));
      wr[i] = qv;
      er[i] = e;
      block_loss = __fadd_rn(block_loss, __fmul_rn(e, e));
    }
    row_loss = static_cast<double>(__fdiv_rn(block_loss, 2.0f));
  }
  __syncthreads();
  for (int t = threadIdx.x; t < nrows * bw; t += blockDim.x) {
    const int r = t / bw, c = t % bw;
    w[(row0 + r) * cols + i1 + c] = ws[r * stride + c];
    err[(row0 + r) * bw + c] = es[r * stride + c];
  }
  for (int offset = 16; offset > 0; offset /= 2)
    row_loss += __shfl_down_sync(0xFFFFFFFFu, row_loss, offset);
  if ((threadIdx.x & 31) == 0 && row_loss != 0.0) atomicAdd(loss, row_loss);
}

}  // namespace

void launch_flag_nonfinite(const float* x, int64_t n, unsigned int* flag, cudaStream_t stream) {
  if (n == 0) return;
  flag_nonfinite_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, flag);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_permute_columns(const float* w, float* out, int64_t rows, int64_t cols,
                            const int64_t* perm, const uint8_t* dead, cudaStream_t stream) {
  permute_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(w, out, rows, cols, perm, dead);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_unpermute_round(const float* wp, float* out, int64_t rows, int64_t cols,
                            const int64_t* perm, RoundTo to, cudaStream_t stream) {
  unpermute_round_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(wp, out, rows, cols,
                                                                         perm, to);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_widen_bf16(const uint16_t* in, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  widen_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, out, n);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_unpermute_bf16(const float* wp, uint16_t* out, int64_t rows, int64_t cols,
                           const int64_t* perm, cudaStream_t stream) {
  unpermute_bf16_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(wp, out, rows, cols,
                                                                        perm);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_build_factor_input(const float* h, double* a, int64_t n, const int64_t* perm,
                               const double* diag, cudaStream_t stream) {
  build_factor_input_kernel<<<grid_for(n * n), kThreads, 0, stream>>>(h, a, n, perm, diag);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

void launch_extract_u(const double* a, float* u, int64_t n, cudaStream_t stream) {
  extract_u_kernel<<<grid_for(n * n), kThreads, 0, stream>>>(a, u, n);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

size_t block_kernel_smem(int tile_rows, int64_t bw, bool u_shared) {
  const size_t tiles = 2 * static_cast<size_t>(tile_rows) * static_cast<size_t>(bw + 1);
  return sizeof(float) * (tiles + (u_shared ? static_cast<size_t>(bw * bw) : 0));
}

void prepare_block_kernel(size_t bytes) {
  // The limit is per device and only ever raised, so that a launch prepared by another thread
  // with a larger size keeps working.
  static std::mutex mutex;
  static std::map<int, size_t> raised;
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  size_t& current = raised[device];
  if (bytes <= current) return;
  LOWBIT_CUDA_CHECK(cudaFuncSetAttribute(block_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
  current = bytes;
}

void launch_block(float* w, int64_t rows, int64_t cols, int64_t i1, int64_t bw, const float* u,
                  float* err, const QuantSpec& spec, int tile_rows, bool u_shared, double* loss,
                  cudaStream_t stream) {
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  const size_t smem = block_kernel_smem(tile_rows, bw, u_shared);
  block_kernel<<<static_cast<unsigned>(tiles), kBlockThreads, smem, stream>>>(
      w, rows, cols, i1, static_cast<int>(bw), u, err, spec, tile_rows, u_shared, loss);
  LOWBIT_CUDA_CHECK_LAUNCH();
}

}  // namespace lowbit::quant::gpu::detail
