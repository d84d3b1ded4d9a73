// gptq_quantize_cuda: gptq.cc's steps with the Hessian, the factorization and the column loop on
// the device. The host runs the shared set-up (gptq_setup.h) on H's diagonal and the weight, then
// queues: the damped, permuted, reversed Hessian in double → cuSOLVER potrf + trtri (retrying with
// ten times the damping as the CPU does) → U in fp32 → per block of columns the column-loop kernel
// and the lazy update as an fp32 cuBLAS GEMM → the inverse permutation with the final rounding.
#include "quant/gpu/gptq_cuda.h"

#include <cublas_v2.h>
#include <cusolverDn.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <string>
#include <unordered_map>

#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"
#include "quant/algos/gptq_setup.h"
#include "quant/gpu/gptq_kernels.h"
#include "quant/scheme/qparams.h"

#define LOWBIT_CUSOLVER_CHECK(call)                                                          \
  do {                                                                                       \
    const cusolverStatus_t lowbit_cusolver_status_ = (call);                                 \
    if (lowbit_cusolver_status_ != CUSOLVER_STATUS_SUCCESS) {                                \
      const std::string lowbit_message_ = std::string(__FILE__) + ":" +                      \
                                          std::to_string(__LINE__) + ": " + #call +          \
                                          ": cuSOLVER status " +                             \
                                          std::to_string(static_cast<int>(lowbit_cusolver_status_)); \
      if (lowbit_cusolver_status_ == CUSOLVER_STATUS_ALLOC_FAILED)                           \
        throw ::lowbit::OutOfMemory(lowbit_message_);                                        \
      throw ::lowbit::Internal(lowbit_message_);                                             \
    }                                                                                        \
  } while (0)

namespace lowbit::quant::gpu {

namespace {

using detail::CodeKind;
using detail::QuantSpec;
using detail::RoundTo;

// Stream-ordered scratch: allocated and freed in the stream's order, so neither synchronizes the
// device (cudaFree would), and the driver's pool reuses the memory between calls.
template <typename T>
class AsyncBuffer {
 public:
  AsyncBuffer(size_t count, cudaStream_t stream, const char* what) : stream_(stream) {
    if (count == 0) return;
    const cudaError_t status =
        cudaMallocAsync(reinterpret_cast<void**>(&data_), count * sizeof(T), stream);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw OutOfMemory("gptq_quantize_cuda: no device memory for " + std::string(what) + " (" +
                        std::to_string(count * sizeof(T)) + " bytes)");
    }
    LOWBIT_CUDA_CHECK(status);
  }
  ~AsyncBuffer() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);  // no throw from a destructor
  }
  AsyncBuffer(const AsyncBuffer&) = delete;
  AsyncBuffer& operator=(const AsyncBuffer&) = delete;
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  cudaStream_t stream_;
};

template <typename T>
void upload(T* dst, const std::vector<T>& src, cudaStream_t stream) {
  // From pageable memory: returns once `src` is staged, so it may go out of scope right after.
  if (!src.empty())
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(T),
                                      cudaMemcpyHostToDevice, stream));
}

struct Handles {
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  cusolverDnParams_t params = nullptr;
};

// One set per host thread and device, created on first use and deliberately never destroyed: a
// thread_local or static destructor may run after the CUDA runtime has shut down at exit.
Handles& handles_for(cudaStream_t stream) {
  thread_local std::unordered_map<int, Handles> cache;
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  auto it = cache.find(device);
  if (it == cache.end()) {
    Handles h;
    LOWBIT_CUBLAS_CHECK(cublasCreate(&h.blas));
    // Plain fp32 GEMMs (never TF32): the lazy update must round like the CPU's fp32 GEMM.
    LOWBIT_CUBLAS_CHECK(cublasSetMathMode(h.blas, CUBLAS_DEFAULT_MATH));
    LOWBIT_CUSOLVER_CHECK(cusolverDnCreate(&h.solver));
    LOWBIT_CUSOLVER_CHECK(cusolverDnCreateParams(&h.params));
    // The pool's default release threshold (0) unmaps freed memory at every synchronize, so each
    // call would map its ~3 GB of scratch (an 8B down_proj) afresh: keep it for the next call.
    cudaMemPool_t pool = nullptr;
    LOWBIT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    LOWBIT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    it = cache.emplace(device, h).first;
  }
  LOWBIT_CUBLAS_CHECK(cublasSetStream(it->second.blas, stream));
  LOWBIT_CUSOLVER_CHECK(cusolverDnSetStream(it->second.solver, stream));
  return it->second;
}

RoundTo round_to_of(DType d) {  // quant::round_to_dtype's cases
  switch (d) {
    case DType::BF16: return RoundTo::BF16;
    case DType::F16: return RoundTo::F16;
    case DType::F8_E4M3: return RoundTo::F8E4M3;
    default: return RoundTo::F32;
  }
}

bool all_finite(const float* h, int64_t count, cudaStream_t stream) {
  AsyncBuffer<unsigned int> flag(1, stream, "the Hessian check");
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(unsigned int), stream));
  detail::launch_flag_nonfinite(h, count, flag.get(), stream);
  unsigned int host = 0;
  LOWBIT_CUDA_CHECK(
      cudaMemcpyAsync(&host, flag.get(), sizeof(host), cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host == 0;
}

std::vector<float> download_diagonal(const float* h, int64_t n, cudaStream_t stream) {
  std::vector<float> d(static_cast<size_t>(n));
  LOWBIT_CUDA_CHECK(cudaMemcpy2DAsync(d.data(), sizeof(float), h, (n + 1) * sizeof(float),
                                      sizeof(float), n, cudaMemcpyDeviceToHost, stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return d;
}

// The permuted diagonal with gptq.cc's dead-column rule (H[k,k] = 0 → 1, W[:, k] = 0).
struct ColumnPlan {
  std::vector<int64_t> perm;  // empty: no activation order
  std::vector<float> diag;
  std::vector<uint8_t> dead;  // empty: no dead column
};

ColumnPlan plan_columns(const std::vector<float>& diag, std::vector<int64_t> perm,
                        GptqResult* result) {
  ColumnPlan plan;
  plan.perm = std::move(perm);
  const size_t n = diag.size();
  plan.diag.resize(n);
  for (size_t k = 0; k < n; ++k) plan.diag[k] = plan.perm.empty() ? diag[k] : diag[plan.perm[k]];
  for (size_t k = 0; k < n; ++k) {
    if (plan.diag[k] != 0.0f) continue;
    if (plan.dead.empty()) plan.dead.assign(n, 0);
    plan.diag[k] = 1.0f;
    plan.dead[k] = 1;
    ++result->dead_columns;
  }
  return plan;
}

// factorize() of gptq.cc on the device: U (row-major fp32 [n, n]) of H + frac·mean(diag)·I, in
// double, with the same damping retries, warnings and failure.
void factorize(const float* h, int64_t n, const ColumnPlan& plan, const int64_t* perm,
               const GptqOptions& o, Handles& hs, float* u, GptqResult* result,
               cudaStream_t stream) {
  const float mean = mean_diagonal(plan.diag.data(), n, 1);
  AsyncBuffer<double> a(static_cast<size_t>(n * n), stream, "the Hessian in double");
  AsyncBuffer<double> diag(static_cast<size_t>(n), stream, "the damped diagonal");
  AsyncBuffer<int> info(1, stream, "cuSOLVER's status");
  size_t dev_potrf = 0, host_potrf = 0, dev_trtri = 0, host_trtri = 0;
  LOWBIT_CUSOLVER_CHECK(cusolverDnXpotrf_bufferSize(hs.solver, hs.params, CUBLAS_FILL_MODE_UPPER,
                                                    n, CUDA_R_64F, a.get(), n, CUDA_R_64F,
                                                    &dev_potrf, &host_potrf));
  LOWBIT_CUSOLVER_CHECK(cusolverDnXtrtri_bufferSize(hs.solver, CUBLAS_FILL_MODE_UPPER,
                                                    CUBLAS_DIAG_NON_UNIT, n, CUDA_R_64F, a.get(),
                                                    n, &dev_trtri, &host_trtri));
  const size_t dev_bytes = std::max(dev_potrf, dev_trtri);
  AsyncBuffer<char> work(dev_bytes, stream, "cuSOLVER's workspace");
  std::vector<char> host_work(std::max(host_potrf, host_trtri));
  void* host_ptr = host_work.empty() ? nullptr : host_work.data();
  std::vector<double> damped(static_cast<size_t>(n));
  int status = 0;
  double frac = o.dampening_frac;
  for (int attempt = 0; attempt <= o.max_damping_retries; ++attempt, frac *= 10.0) {
    const float damp = static_cast<float>(frac) * mean;
    for (int64_t k = 0; k < n; ++k) damped[k] = static_cast<double>(plan.diag[k] + damp);
    upload(diag.get(), damped, stream);
    detail::launch_build_factor_input(h, a.get(), n, perm, diag.get(), stream);
    LOWBIT_CUSOLVER_CHECK(cusolverDnXpotrf(hs.solver, hs.params, CUBLAS_FILL_MODE_UPPER, n,
                                           CUDA_R_64F, a.get(), n, CUDA_R_64F, work.get(),
                                           dev_potrf, host_ptr, host_potrf, info.get()));
    LOWBIT_CUDA_CHECK(
        cudaMemcpyAsync(&status, info.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    LOWBIT_CHECK_AS(Internal, status >= 0,
                    "gptq_quantize_cuda: potrf rejected argument " + std::to_string(-status));
    if (status == 0) {
      LOWBIT_CUSOLVER_CHECK(cusolverDnXtrtri(hs.solver, CUBLAS_FILL_MODE_UPPER,
                                             CUBLAS_DIAG_NON_UNIT, n, CUDA_R_64F, a.get(), n,
                                             work.get(), dev_trtri, host_ptr, host_trtri,
                                             info.get()));
      LOWBIT_CUDA_CHECK(
          cudaMemcpyAsync(&status, info.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
      LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
      LOWBIT_CHECK_AS(Internal, status == 0,
                      "gptq_quantize_cuda: trtri of the Cholesky factor returned " +
                          std::to_string(status));
      detail::launch_extract_u(a.get(), u, n, stream);
      result->retries = attempt;
      result->dampening_used = frac;
      return;
    }
    if (attempt < o.max_damping_retries) warn_damping_retry(frac);
  }
  throw_factorization_failed(frac / 10.0, o.max_damping_retries);
}

// The column loop: per block of block_size columns the kernel, then W[:, i2:] -= Err·U[i1:i2, i2:]
// (column-major for cuBLAS: W[:, i2:]ᵀ is [tail, rows] with ld cols, U[i1:i2, i2:]ᵀ [tail, bw]
// with ld cols, Errᵀ [bw, rows] with ld bw). C = -1·(A·B) + 1·C rounds once, like the CPU's
// prod-then-subtract. Returns the loss.
double column_loop(float* wp, int64_t rows, int64_t cols, const float* u, const QuantSpec& spec,
                   int64_t block_size, cublasHandle_t blas, cudaStream_t stream) {
  const int64_t bw_max = std::min(block_size, cols);
  int device = 0, smem_max = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  LOWBIT_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t limit = static_cast<size_t>(smem_max);
  const bool u_shared = detail::block_kernel_smem(32, bw_max, true) <= limit;
  int tile_rows = 32;
  while (tile_rows > 1 && detail::block_kernel_smem(tile_rows, bw_max, u_shared) > limit)
    tile_rows /= 2;
  const size_t smem = detail::block_kernel_smem(tile_rows, bw_max, u_shared);
  LOWBIT_CHECK_AS(Unsupported, smem <= limit,
                  "gptq_quantize_cuda: block_size " + std::to_string(block_size) +
                      " needs more shared memory than the device has per block (" +
                      std::to_string(smem_max) + " bytes); use block_size <= 1024");
  detail::prepare_block_kernel(smem);

  AsyncBuffer<float> err(static_cast<size_t>(rows * bw_max), stream, "the column errors");
  AsyncBuffer<double> loss(1, stream, "the loss");
  LOWBIT_CUDA_CHECK(cudaMemsetAsync(loss.get(), 0, sizeof(double), stream));
  const float minus_one = -1.0f, one = 1.0f;
  for (int64_t i1 = 0; i1 < cols; i1 += block_size) {
    const int64_t i2 = std::min(i1 + block_size, cols), bw = i2 - i1;
    detail::launch_block(wp, rows, cols, i1, bw, u, err.get(), spec, tile_rows, u_shared,
                         loss.get(), stream);
    if (i2 == cols) break;
    LOWBIT_CUBLAS_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(cols - i2),
                                    static_cast<int>(rows), static_cast<int>(bw), &minus_one,
                                    u + i1 * cols + i2, static_cast<int>(cols), err.get(),
                                    static_cast<int>(bw), &one, wp + i2, static_cast<int>(cols)));
  }
  double host = 0.0;
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(&host, loss.get(), sizeof(double), cudaMemcpyDeviceToHost,
                                    stream));
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

// gptq.cc's ColumnQuantizer as device arrays (the scales divided by the global scale on the host,
// as it does).
struct DeviceQuantSpec {
  QuantSpec spec;
  AsyncBuffer<float> scale, zero;
  AsyncBuffer<int32_t> col_group;

  DeviceQuantSpec(const QParams& qp, const QuantArgs& args, const std::vector<int32_t>& groups,
                  cudaStream_t stream)
      : scale(qp.scale.size(), stream, "the scales"),
        zero(args.symmetric ? 0 : qp.zero_point.size(), stream, "the zero points"),
        col_group(groups.size(), stream, "the column groups") {
    std::vector<float> eff = qp.scale;
    if (qp.global_scale > 0.0f)
      for (float& s : eff) s = s / qp.global_scale;
    upload(scale.get(), eff, stream);
    if (zero.get() != nullptr) upload(zero.get(), qp.zero_point, stream);
    upload(col_group.get(), groups, stream);
    spec.scale = scale.get();
    spec.zero = zero.get();
    spec.col_group = col_group.get();
    spec.grid_cols = qp.grid_cols;
    spec.row_div = args.strategy == Strategy::Tensor  ? 0
                   : args.strategy == Strategy::Block ? args.block_rows
                                                      : 1;
    spec.qmin = static_cast<float>(args.qmin());
    spec.qmax = static_cast<float>(args.qmax());
    spec.code = args.type == QuantType::Int ? CodeKind::Int
                : args.num_bits == 8        ? CodeKind::Fp8
                                            : CodeKind::Fp4;
    spec.dequant = qp.global_scale > 0.0f ? RoundTo::F32 : round_to_of(qp.scale_dtype);
  }
};

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

// Events around the weight's upload (0, 1) and download (2, 3), read after the last synchronize.
class CopyEvents {
 public:
  explicit CopyEvents(bool on) {
    if (!on) return;
    for (cudaEvent_t& e : events_) LOWBIT_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~CopyEvents() {
    for (cudaEvent_t e : events_)
      if (e != nullptr) cudaEventDestroy(e);
  }
  CopyEvents(const CopyEvents&) = delete;
  CopyEvents& operator=(const CopyEvents&) = delete;
  void record(int i, cudaStream_t stream) {
    if (events_[i] != nullptr) LOWBIT_CUDA_CHECK(cudaEventRecord(events_[i], stream));
  }
  double seconds() const {  // upload + download, after the stream is synchronized
    if (events_[0] == nullptr) return 0.0;
    float up = 0.0f, down = 0.0f;
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&up, events_[0], events_[1]));
    LOWBIT_CUDA_CHECK(cudaEventElapsedTime(&down, events_[2], events_[3]));
    return (up + down) / 1000.0;
  }

 private:
  cudaEvent_t events_[4] = {};
};

// The weight's way onto the device and back: `fill` queues d_w (fp32 [rows, cols]) from the host;
// `drain` queues the result back from the permuted d_wp (with the column order d_perm).
using Fill = std::function<void(float* d_w)>;
using Drain = std::function<void(const float* d_wp, const int64_t* d_perm, float* d_w)>;

// gptq_quantize_cuda's steps; `w` is the host fp32 weight the set-up observes.
GptqResult run_gptq(const std::vector<float>& w, int64_t rows, int64_t cols,
                    const float* device_hessian, const QuantArgs& args, const GptqOptions& options,
                    DType compute, cudaStream_t stream, const Fill& fill, const Drain& drain,
                    GptqTimes* times) {
  const auto start = Clock::now();
  const size_t h_size = device_hessian != nullptr ? static_cast<size_t>(cols * cols) : 0;
  check_gptq_inputs(
      w, rows, cols, h_size, [&] { return all_finite(device_hessian, cols * cols, stream); }, args,
      options);
  LOWBIT_CHECK_AS(Unsupported, rows < INT_MAX && cols < INT_MAX,
                  "gptq_quantize_cuda: weight " + std::to_string(rows) + "x" +
                      std::to_string(cols) + " is too large for cuBLAS' 32-bit sizes");
  GptqResult result;
  const ActOrder act = gptq_actorder(args);
  const std::vector<float> diag = download_diagonal(device_hessian, cols, stream);
  std::vector<int64_t> perm;
  if (act != ActOrder::None) perm = activation_order(diag);
  std::vector<int32_t> col_group;
  if (act == ActOrder::Group) {
    const std::vector<float> wp = permute_columns(w, rows, cols, perm);
    fit_gptq_qparams(wp.data(), rows, cols, act, perm, args, compute, options.global_scale,
                     &result, &col_group);
  } else {
    fit_gptq_qparams(w.data(), rows, cols, act, perm, args, compute, options.global_scale,
                     &result, &col_group);
  }
  const ColumnPlan plan = plan_columns(diag, std::move(perm), &result);
  const auto device_start = Clock::now();

  Handles& hs = handles_for(stream);
  CopyEvents events(times != nullptr);
  AsyncBuffer<int64_t> d_perm(plan.perm.size(), stream, "the column order");
  AsyncBuffer<uint8_t> d_dead(plan.dead.size(), stream, "the dead columns");
  upload(d_perm.get(), plan.perm, stream);
  upload(d_dead.get(), plan.dead, stream);
  AsyncBuffer<float> d_u(static_cast<size_t>(cols * cols), stream, "U");
  factorize(device_hessian, cols, plan, d_perm.get(), options, hs, d_u.get(), &result, stream);

  const size_t count = static_cast<size_t>(rows * cols);
  AsyncBuffer<float> d_w(count, stream, "the weight");
  AsyncBuffer<float> d_wp(count, stream, "the permuted weight");
  events.record(0, stream);
  fill(d_w.get());
  events.record(1, stream);
  detail::launch_permute_columns(d_w.get(), d_wp.get(), rows, cols, d_perm.get(), d_dead.get(),
                                 stream);
  const DeviceQuantSpec spec(result.qparams, args, col_group, stream);
  result.loss = column_loop(d_wp.get(), rows, cols, d_u.get(), spec.spec, options.block_size,
                            hs.blas, stream);
  events.record(2, stream);
  drain(d_wp.get(), d_perm.get(), d_w.get());
  events.record(3, stream);
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (times != nullptr) {
    const double copies = events.seconds();
    times->host += std::chrono::duration<double>(device_start - start).count();
    times->device +=
        std::chrono::duration<double>(Clock::now() - device_start).count() - copies;
    times->copies += copies;
    ++times->calls;
  }
  return result;
}

}  // namespace

GptqResult gptq_quantize_cuda(std::vector<float>& w, int64_t rows, int64_t cols,
                              const float* device_hessian, const QuantArgs& args,
                              const GptqOptions& options, DType compute, cudaStream_t stream,
                              GptqTimes* times) {
  const Fill fill = [&](float* d_w) { upload(d_w, w, stream); };
  const Drain drain = [&](const float* d_wp, const int64_t* d_perm, float* d_w) {
    detail::launch_unpermute_round(d_wp, d_w, rows, cols, d_perm, round_to_of(compute), stream);
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(w.data(), d_w, w.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream));
  };
  return run_gptq(w, rows, cols, device_hessian, args, options, compute, stream, fill, drain,
                  times);
}

GptqResult gptq_quantize_cuda_bf16(const uint16_t* w_bf16, const std::vector<float>& w_f32,
                                   uint16_t* out_bf16, uint16_t* out_device, int64_t rows,
                                   int64_t cols, const float* device_hessian, const QuantArgs& args,
                                   const GptqOptions& options, cudaStream_t stream,
                                   GptqTimes* times) {
  LOWBIT_CHECK(w_bf16 != nullptr && out_bf16 != nullptr,
               "gptq_quantize_cuda_bf16: null weight or output");
  const size_t count = static_cast<size_t>(std::max<int64_t>(rows, 0) * std::max<int64_t>(cols, 0));
  // The bf16 bits land here, are widened into the fp32 weight, and hold the result on the way out.
  AsyncBuffer<uint16_t> bits(count, stream, "the bf16 weight");
  const Fill fill = [&](float* d_w) {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(bits.get(), w_bf16, count * sizeof(uint16_t),
                                      cudaMemcpyHostToDevice, stream));
    detail::launch_widen_bf16(bits.get(), d_w, static_cast<int64_t>(count), stream);
  };
  const Drain drain = [&](const float* d_wp, const int64_t* d_perm, float*) {
    detail::launch_unpermute_bf16(d_wp, bits.get(), rows, cols, d_perm, stream);
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(out_bf16, bits.get(), count * sizeof(uint16_t),
                                      cudaMemcpyDeviceToHost, stream));
    if (out_device != nullptr) {
      LOWBIT_CUDA_CHECK(cudaMemcpyAsync(out_device, bits.get(), count * sizeof(uint16_t),
                                        cudaMemcpyDeviceToDevice, stream));
    }
  };
  return run_gptq(w_f32, rows, cols, device_hessian, args, options, DType::BF16, stream, fill,
                  drain, times);
}

}  // namespace lowbit::quant::gpu
