// cuBLASLt BF16 GEMM with plans cached per shape and pointer alignment (see gemm_bf16.h for the
// row-major → column-major mapping and the alignment rules).
#include "kernels/cuda/gemm_bf16.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

// Not in an anonymous namespace: BlasLt::Impl (external linkage) holds these.
namespace gemm_detail {

// Everything a plan depends on. Alignments are the pointers' actual ones capped at 16 bytes (what
// cuBLASLt's vector kernels need at most); a plan chosen for 16-byte-aligned pointers must not run
// on 2-byte-aligned ones, so they are part of the key.
struct PlanKey {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool f32_out = false;
  bool has_bias = false;
  uint8_t align_x = 0;
  uint8_t align_w = 0;
  uint8_t align_y = 0;
  uint8_t align_bias = 0;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    const auto mix = [&h](uint64_t v) {
      h ^= v;
      h *= 1099511628211ull;
    };
    mix(static_cast<uint64_t>(key.m));
    mix(static_cast<uint64_t>(key.n));
    mix(static_cast<uint64_t>(key.k));
    mix((uint64_t(key.f32_out) << 1) | uint64_t(key.has_bias));
    mix((uint64_t(key.align_x) << 24) | (uint64_t(key.align_w) << 16) |
        (uint64_t(key.align_y) << 8) | uint64_t(key.align_bias));
    return static_cast<size_t>(h);
  }
};

// A ready-to-run cuBLASLt call for one key: descriptors plus the algorithm the heuristic chose.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // W_c: [k, n] column-major, ld k, used transposed
  cublasLtMatrixLayout_t b = nullptr;  // X_c: [k, m] column-major, ld k
  cublasLtMatrixLayout_t d = nullptr;  // Y_c: [n, m] column-major, ld n (also C; beta = 0)
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    // No throw from a destructor: failures here only leak host descriptors.
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

uint8_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint8_t align = 16;
  while (align > 1 && address % align != 0) align = static_cast<uint8_t>(align / 2);
  return align;
}

}  // namespace gemm_detail

using gemm_detail::alignment_of;
using gemm_detail::Plan;
using gemm_detail::PlanKey;
using gemm_detail::PlanKeyHash;

struct BlasLt::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;

  ~Impl() {
    plans.clear();  // descriptors before the handle
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  const Plan& plan_for(const PlanKey& key, const void* bias);
};

BlasLt::BlasLt(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  LOWBIT_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  if (workspace_bytes > 0) LOWBIT_CUDA_CHECK(cudaMalloc(&impl_->workspace, workspace_bytes));
  impl_->workspace_bytes = workspace_bytes;
}

BlasLt::~BlasLt() = default;
BlasLt::BlasLt(BlasLt&&) noexcept = default;
BlasLt& BlasLt::operator=(BlasLt&&) noexcept = default;

size_t BlasLt::workspace_bytes() const { return impl_ ? impl_->workspace_bytes : 0; }
size_t BlasLt::cached_plans() const { return impl_ ? impl_->plans.size() : 0; }

const Plan& BlasLt::Impl::plan_for(const PlanKey& key, const void* bias) {
  if (auto it = plans.find(key); it != plans.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  const cudaDataType_t out_type = key.f32_out ? CUDA_R_32F : CUDA_R_16BF;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                     &trans_a, sizeof(trans_a)));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                     &trans_b, sizeof(trans_b)));
  if (key.has_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &epilogue, sizeof(epilogue)));
    // The heuristic reads the bias pointer's alignment from here.
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof(bias)));
  }
  const auto m = static_cast<uint64_t>(key.m);
  const auto n = static_cast<uint64_t>(key.n);
  const auto k = static_cast<uint64_t>(key.k);
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, k, n, key.k));
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, k, m, key.k));
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, out_type, n, m, key.n));

  cublasLtMatmulPreference_t pref = nullptr;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  // The preference is only needed for the query: destroy it on every path out.
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t max_workspace = workspace_bytes;
  // Split-K partial sums in fp32 only: the in-place and output-type schemes would add them up in
  // bf16 and lose the fp32 accumulation this function promises.
  const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  const uint32_t align_a = key.align_w;
  const uint32_t align_b = key.align_x;
  const uint32_t align_d = key.align_y;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask, sizeof(reduction_mask)));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, plan->op, plan->a, plan->b, plan->d, plan->d, pref, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    throw Unsupported("gemm_bf16: cuBLASLt has no algorithm for m=" + std::to_string(key.m) +
                      " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k) +
                      " (pointer alignments x/w/y " + std::to_string(key.align_x) + "/" +
                      std::to_string(key.align_w) + "/" + std::to_string(key.align_y) +
                      " bytes)");
  }
  LOWBIT_CUBLAS_CHECK(status);
  plan->algo = result.algo;
  return *plans.emplace(key, std::move(plan)).first->second;
}

namespace {

void check_gemm_args(const char* name, const void* x, int64_t m, int64_t k, const void* w,
                     int64_t n, const void* y, size_t y_elem, const void* bias, size_t bias_elem) {
  const std::string fn = name;
  LOWBIT_CHECK(m >= 0, fn + ": m (rows of x) is " + std::to_string(m) + ", must be >= 0");
  LOWBIT_CHECK(n >= 1 && k >= 1, fn + ": weight shape [n=" + std::to_string(n) +
                                     ", k=" + std::to_string(k) + "] must have n, k >= 1");
  LOWBIT_CHECK(w != nullptr, fn + ": w must be non-null");
  LOWBIT_CHECK(m == 0 || (x != nullptr && y != nullptr), fn + ": x and y must be non-null");
  const auto aligned = [](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  LOWBIT_CHECK(aligned(x, 2), fn + ": x is not 2-byte aligned (bf16 elements)");
  LOWBIT_CHECK(aligned(w, 2), fn + ": w is not 2-byte aligned (bf16 elements)");
  LOWBIT_CHECK(aligned(y, y_elem), fn + ": y is not " + std::to_string(y_elem) + "-byte aligned");
  LOWBIT_CHECK(bias == nullptr || aligned(bias, bias_elem),
               fn + ": bias is not " + std::to_string(bias_elem) + "-byte aligned");
}

void run_gemm(BlasLt& blas, const void* x, int64_t m, int64_t k, const void* w, int64_t n, void* y,
              bool f32_out, cudaStream_t stream, const void* bias, float alpha) {
  BlasLt::Impl* impl = blas.impl();
  LOWBIT_CHECK_AS(Internal, impl != nullptr, "gemm_bf16: BlasLt used after being moved from");
  PlanKey key;
  key.m = m;
  key.n = n;
  key.k = k;
  key.f32_out = f32_out;
  key.has_bias = bias != nullptr;
  key.align_x = alignment_of(x);
  key.align_w = alignment_of(w);
  key.align_y = alignment_of(y);
  key.align_bias = bias != nullptr ? alignment_of(bias) : uint8_t{16};
  const Plan& plan = impl->plan_for(key, bias);
  if (bias != nullptr) {
    // Host-side attribute write: the descriptor belongs to this BlasLt (one thread at a time).
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof(bias)));
  }
  const float beta = 0.0f;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmul(impl->handle, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y,
                                     plan.d, y, plan.d, &plan.algo, impl->workspace,
                                     impl->workspace_bytes, stream));
}

}  // namespace

void gemm_bf16(BlasLt& blas, const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
               uint16_t* y, cudaStream_t stream, const uint16_t* bias, float alpha) {
  check_gemm_args("gemm_bf16", x, m, k, w, n, y, 2, bias, 2);
  if (m == 0) return;
  run_gemm(blas, x, m, k, w, n, y, false, stream, bias, alpha);
}

void gemm_bf16_f32out(BlasLt& blas, const uint16_t* x, int64_t m, int64_t k, const uint16_t* w,
                      int64_t n, float* y, cudaStream_t stream, const float* bias, float alpha) {
  check_gemm_args("gemm_bf16_f32out", x, m, k, w, n, y, 4, bias, 4);
  if (m == 0) return;
  run_gemm(blas, x, m, k, w, n, y, true, stream, bias, alpha);
}

}  // namespace lowbit::kernels::cuda
