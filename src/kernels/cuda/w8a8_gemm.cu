// The pieces of the W8A8 GPU products that FP8 and INT share (w8a8_gemm.h): the packed weights'
// handle, the scratch layout, argument checks and the cuBLASLt runner with its algorithm cache.
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/w8a8_internal.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

const char* w8a8_path_name(W8a8Path path) {
  switch (path) {
    case W8a8Path::AUTO: return "auto";
    case W8a8Path::LT_SCALED: return "cublaslt-scaled";
    case W8a8Path::LT_EPILOGUE: return "cublaslt+epilogue";
    case W8a8Path::SIMT: return "simt";
    case W8a8Path::GEMV: return "gemv";
  }
  return "?";
}

W8a8GpuWeights::W8a8GpuWeights() = default;
W8a8GpuWeights::~W8a8GpuWeights() = default;
W8a8GpuWeights::W8a8GpuWeights(W8a8GpuWeights&&) noexcept = default;
W8a8GpuWeights& W8a8GpuWeights::operator=(W8a8GpuWeights&&) noexcept = default;
W8a8GpuWeights::W8a8GpuWeights(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

const W8a8GpuWeights::Impl& W8a8GpuWeights::impl() const {
  LOWBIT_CHECK(impl_ != nullptr, "W8a8GpuWeights: empty (not packed)");
  return *impl_;
}
W8a8GpuWeights::Type W8a8GpuWeights::type() const { return impl().type; }
int64_t W8a8GpuWeights::rows() const { return impl().n; }
int64_t W8a8GpuWeights::cols() const { return impl().k; }
size_t W8a8GpuWeights::bytes() const { return impl_ ? impl_->bytes() : 0; }

namespace w8a8 {

namespace {

// One cuBLASLt handle per device for the whole process. cuBLASLt handles may be used from several
// host threads at once (all per-call state is in the descriptors and the caller's workspace). They
// are never destroyed: destroying them from a static destructor would race the CUDA runtime's own
// teardown at exit.
cublasLtHandle_t lt_handle() {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasLtHandle_t handle = nullptr;
    LOWBIT_CUBLAS_CHECK(cublasLtCreate(&handle));
    it = handles.emplace(device, handle).first;
  }
  return it->second;
}

struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  Preference() { LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d)); }
  ~Preference() {
    if (d != nullptr) cublasLtMatmulPreferenceDestroy(d);
  }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
    LOWBIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d, attr, &value, sizeof(value)));
  }
};

}  // namespace

namespace {
std::atomic<size_t> g_stage_chunk_bytes{kDefaultStageChunkBytes};
}  // namespace

size_t stage_chunk_bytes() { return g_stage_chunk_bytes.load(std::memory_order_relaxed); }
void set_stage_chunk_bytes(size_t bytes) {
  g_stage_chunk_bytes.store(bytes, std::memory_order_relaxed);
}

Layout plan_layout(const W8a8GpuWeights::Impl& w, int64_t m, int64_t scale_cols) {
  Layout l;
  l.m = m;
  l.m_pad = round_up(m, 4);
  l.scale_cols = scale_cols;
  l.chunk_rows = stage_chunk_rows(m, w.n);
  const size_t codes = align256(static_cast<size_t>(l.m_pad * w.k));
  const size_t scales = align256(static_cast<size_t>(scale_cols * l.m_pad) * sizeof(float));
  // Staged products: fp32 / int32 chunks (LT_EPILOGUE), or the bf16 output of the padded rows
  // when cuBLASLt's 1x128 scales make it compute m_pad > m rows.
  size_t stage = align256(static_cast<size_t>(l.chunk_rows * w.n) * 4);
  if (l.m_pad != m) stage = std::max(stage, align256(static_cast<size_t>(l.m_pad * w.n) * 2));
  l.codes = 0;
  l.scales = l.codes + codes;
  l.amax = l.scales + scales;
  l.stage = l.amax + 256;
  l.lt = l.stage + stage;
  l.total = l.lt + kLtWorkspaceBytes;
  return l;
}

size_t workspace_for_up_to(const W8a8GpuWeights::Impl& w, int64_t m, int64_t scale_cols) {
  // Terms other than the padded stage are nondecreasing in m; the padded stage of any m' <= m is
  // at most round_up(m - 1, 4) x n when m is a multiple of 4 (m - 1 has it), else round_up(m, 4) x n.
  size_t total = plan_layout(w, m, scale_cols).total;
  if (m >= 2) total = std::max(total, plan_layout(w, m - 1, scale_cols).total);
  return total;
}

namespace {

template <typename T>
void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  LOWBIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                 static_cast<uint64_t>(cols), rows));
  return layout;
}

}  // namespace

LtMatmul::LtMatmul(const W8a8GpuWeights::Impl& w, const LtProblem& p) : p_(p) {
  handle_ = lt_handle();
  // On a throw below the destructor does not run: the members are released by the guard.
  struct Guard {
    LtMatmul* self;
    ~Guard() {
      if (self != nullptr) self->release();
    }
  } guard{this};
  LOWBIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, p.compute, p.scale_type));
  set_attr(desc_, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attr(desc_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (p.a_mode >= 0) {
    set_attr(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, p.a_mode);
    set_attr(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.a_scale);
  }
  if (p.b_mode >= 0) {
    set_attr(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, p.b_mode);
    set_attr(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.b_scale);
  }
  if (p.bias != nullptr) {
    set_attr(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_attr(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    set_attr(desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF));
  }
  a_ = make_layout(p.ab_type, p.k, p.n);
  b_ = make_layout(p.ab_type, p.k, p.m);
  d_ = make_layout(p.d_type, p.n, p.m);

  const uint32_t align_b = pointer_alignment(p.b), align_d = pointer_alignment(p.d);
  const std::array<int64_t, 8> key{p.m,      p.ab_type,         p.d_type, p.a_mode,
                                   p.b_mode, p.bias != nullptr, align_b,  align_d};
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.algos.find(key);
  if (it == w.algos.end()) {
    Preference pref;
    pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kLtWorkspaceBytes);
    // Split-K partial sums added in bf16 would round k/split times: keep them in fp32.
    if (p.d_type == CUDA_R_16BF) {
      pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
               static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    }
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, pointer_alignment(p.a));
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d);
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    // An unsupported combination of types and scale modes is reported as a status (NOT_SUPPORTED
    // or INVALID_VALUE) or as zero results, depending on the check that rejects it: both mean
    // "no algorithm here", and the caller falls back.
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_, b_, d_, d_,
                                                                 pref.d, 1, &result, &count);
    std::optional<cublasLtMatmulAlgo_t> found;
    if (status == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
      found = result.algo;
    }
    it = w.algos.emplace(key, found).first;
  }
  algo_ = it->second;
  guard.self = nullptr;
}

LtMatmul::~LtMatmul() { release(); }

void LtMatmul::release() noexcept {
  if (d_ != nullptr) cublasLtMatrixLayoutDestroy(d_);
  if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
  if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
  d_ = b_ = a_ = nullptr;
  desc_ = nullptr;
}

LtMatmul::LtMatmul(LtMatmul&& other) noexcept
    : p_(other.p_),
      handle_(other.handle_),
      desc_(std::exchange(other.desc_, nullptr)),
      a_(std::exchange(other.a_, nullptr)),
      b_(std::exchange(other.b_, nullptr)),
      d_(std::exchange(other.d_, nullptr)),
      algo_(other.algo_) {}

void LtMatmul::run(void* lt_workspace, cudaStream_t stream) const {
  LOWBIT_CHECK_AS(Internal, algo_.has_value(), "LtMatmul::run without an algorithm");
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const int32_t alpha_i = 1, beta_i = 0;
  const bool int_scale = p_.scale_type == CUDA_R_32I;
  const void* alpha = int_scale ? static_cast<const void*>(&alpha_i) : &alpha_f;
  const void* beta = int_scale ? static_cast<const void*>(&beta_i) : &beta_f;
  LOWBIT_CUBLAS_CHECK(cublasLtMatmul(handle_, desc_, alpha, p_.a, a_, p_.b, b_, beta, p_.d, d_,
                                     p_.d, d_, &*algo_, lt_workspace, kLtWorkspaceBytes, stream));
}

void check_gemm_args(const W8a8GpuWeights& w, W8a8GpuWeights::Type want, const uint16_t* x,
                     int64_t m, const uint16_t* y, const void* workspace, size_t workspace_bytes,
                     size_t needed) {
  const char* what = want == W8a8GpuWeights::Type::FP8 ? "w8a8_gemm (fp8): " : "w8a8_gemm (int): ";
  const std::string f = what;
  const W8a8GpuWeights::Impl& impl = w.impl();
  LOWBIT_CHECK(impl.type == want, f + "the weights were packed as " +
                                      (impl.type == W8a8GpuWeights::Type::FP8 ? "fp8" : "int") +
                                      " but the activations are of the other kind");
  LOWBIT_CHECK(m >= 0 && m < (int64_t(1) << 31), f + "m must be in [0, 2^31)");
  if (m == 0) return;
  LOWBIT_CHECK(x != nullptr, f + "x is null");
  LOWBIT_CHECK(y != nullptr, f + "y is null");
  LOWBIT_CHECK(reinterpret_cast<uintptr_t>(x) % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 2 == 0,
               f + "x and y must be 2-byte aligned");
  LOWBIT_CHECK(workspace != nullptr, f + "workspace is null");
  LOWBIT_CHECK(reinterpret_cast<uintptr_t>(workspace) % 256 == 0,
               f + "workspace must be 256-byte aligned");
  LOWBIT_CHECK(workspace_bytes >= needed, f + "workspace has " + std::to_string(workspace_bytes) +
                                              " bytes, needs " + std::to_string(needed));
  int device = 0;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&device));
  LOWBIT_CHECK(device == impl.device, f + "the weights live on device " +
                                          std::to_string(impl.device) + ", the current device is " +
                                          std::to_string(device));
}

std::string problem_name(const W8a8GpuWeights::Impl& w, int64_t m) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(w.n) + " k=" + std::to_string(w.k);
}

}  // namespace w8a8
}  // namespace lowbit::kernels::cuda
