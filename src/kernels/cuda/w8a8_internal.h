// Internals shared by the W8A8 GPU files (w8a8_gemm.cu, fp8_gemm.cu, int8_gemm.cu,
// w8a8_kernels.cu): the packed weights, the cuBLASLt runner with its algorithm cache, the scratch
// layout and the launchers of lowbit's own epilogue and SIMT kernels. Not a public header.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/w8a8_gemm.h"

namespace lowbit::kernels::cuda {

struct W8a8GpuWeights::Impl {
  Type type = Type::FP8;
  int64_t n = 0, k = 0;
  int device = 0;
  bool e4m3_mma = false;  // the device has e4m3 tensor-core mma (sm_89+): the FP8 GEMV runs
  DeviceBuffer<uint8_t> codes;  // [n, k]: e4m3 bit patterns, or signed int8 codes

  // FP8 scales, in every layout a path wants.
  int64_t block_rows = 1, block_cols = 1, grid_rows = 1, grid_cols = 1;
  DeviceBuffer<float> scale_grid;  // [grid_rows, grid_cols] as given: SIMT
  bool k_const = false;            // block_cols >= k: one scale per output row
  bool per_tensor = false;         // one scale in all
  DeviceBuffer<float> row_scales;  // [n] when k_const: OUTER_VEC_32F (and [0]: SCALAR_32F)
  bool vec128 = false;             // scale constant over each 1 x 128 segment of a row
  DeviceBuffer<float> vec128_scales;  // [ceil(k/128)][n], outer-dim-major: VEC128_32F
  bool blk128 = false;             // scale constant over each 128 x 128 tile
  int64_t blk128_ld = 0;           // ceil(k/128) rounded up to 4: cuBLASLt's padded stride
  DeviceBuffer<float> blk128_scales;  // [ceil(n/128)][blk128_ld]: BLK128x128_32F

  // INT weights (codes are code - 2^(bits-1)).
  int bits = 8;
  int64_t group_size = 0, groups = 1;
  DeviceBuffer<float> int_scales;   // [n, groups]
  DeviceBuffer<int8_t> int_zeros;   // [n, groups], zero - 2^(bits-1); empty when symmetric
  DeviceBuffer<int32_t> colsum;     // [n]: Σ_k code, for the static activation zero point
  bool imma = false;                // one group, no zero points: cuBLASLt IMMA + epilogue

  // cuBLASLt algorithms per problem (see LtProblem::key); nullopt: cuBLASLt has none.
  mutable std::mutex mu;
  mutable std::map<std::array<int64_t, 8>, std::optional<cublasLtMatmulAlgo_t>> algos;

  size_t bytes() const {
    return codes.bytes() + scale_grid.bytes() + row_scales.bytes() + vec128_scales.bytes() +
           blk128_scales.bytes() + int_scales.bytes() + int_zeros.bytes() + colsum.bytes();
  }
};

namespace w8a8 {

// cuBLASLt's own default workspace on Hopper (enough for every split-K plan it picks).
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
// Staged fp32 / int32 products are processed in row chunks of at most this many bytes, so that
// the epilogue reads them back from L2 (50 MB) rather than HBM (and, as every chunk reuses the same
// buffer, its dirty lines are mostly overwritten in L2 instead of written back), and the scratch
// stays bounded. Tests lower it to exercise several chunks on small shapes; set it before
// computing workspace sizes, never while products run.
constexpr size_t kDefaultStageChunkBytes = size_t(32) << 20;
size_t stage_chunk_bytes();
void set_stage_chunk_bytes(size_t bytes);

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
inline size_t align256(size_t bytes) { return (bytes + 255) & ~size_t(255); }
inline uint32_t pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// Rows per chunk of a staged [rows, n] product of 4-byte values: a multiple of 128 rows (at least
// 128) whose stage fits stage_chunk_bytes(), never more than m.
inline int64_t stage_chunk_rows(int64_t m, int64_t n) {
  int64_t rows = static_cast<int64_t>(stage_chunk_bytes() / (static_cast<size_t>(n) * 4)) / 128 * 128;
  if (rows < 128) rows = 128;
  return rows < m ? rows : m;
}

// Offsets (bytes) of each scratch buffer in the caller's workspace.
struct Layout {
  int64_t m = 0, m_pad = 0;   // rows, and rows rounded up to 4 (cuBLASLt's 1x128 scales)
  int64_t scale_cols = 1;     // activation scale columns (1, or k / group)
  int64_t chunk_rows = 0;     // staged-product chunk
  size_t codes = 0, scales = 0, amax = 0, stage = 0, lt = 0, total = 0;
};
// scale_cols: the most activation-scale columns any path writes for this call.
Layout plan_layout(const W8a8GpuWeights::Impl& w, int64_t m, int64_t scale_cols);
// The workspace that holds plan_layout(m') for every m' <= m (what w8a8_workspace_bytes promises):
// plan_layout(m) alone is not enough, because a row count that is not a multiple of 4 reserves
// the bf16 output of its padded rows (m_pad x n) while a multiple of 4 does not, so m - 1 can need
// more than m (a workspace sized for 2048 rows was short for 1037..2047 rows on the 8B shape's
// gate/up, and the serving engine's mixed steps hit those). Every other term grows with m.
size_t workspace_for_up_to(const W8a8GpuWeights::Impl& w, int64_t m, int64_t scale_cols);

// One cuBLASLt product D[n, m] = op(A)ᵀ·B in column-major terms (A: weights [k, n] viewed
// transposed, B: codes [k, m], D: [n, m], all ld = their row count).
struct LtProblem {
  cudaDataType_t ab_type = CUDA_R_8F_E4M3;
  cudaDataType_t d_type = CUDA_R_16BF;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  int64_t n = 0, m = 0, k = 0;
  int32_t a_mode = -1, b_mode = -1;  // cublasLtMatmulMatrixScale_t; -1: no scale pointers
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  const void* bias = nullptr;  // bf16 [n] through CUBLASLT_EPILOGUE_BIAS
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
};

// One cuBLASLt product, described once: the constructor builds the descriptors and looks up (or
// asks the heuristic for, then caches in w) an algorithm. available() is false when cuBLASLt has
// none for this problem; run() then must not be called. Throws Internal on a cuBLASLt failure.
class LtMatmul {
 public:
  LtMatmul(const W8a8GpuWeights::Impl& w, const LtProblem& p);
  ~LtMatmul();
  LtMatmul(LtMatmul&& other) noexcept;
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  LtMatmul& operator=(LtMatmul&&) = delete;

  bool available() const { return algo_.has_value(); }
  void run(void* lt_workspace, cudaStream_t stream) const;

 private:
  void release() noexcept;
  LtProblem p_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  std::optional<cublasLtMatmulAlgo_t> algo_;
};

// Epilogue of the LT_EPILOGUE paths, for `rows` rows of a staged product [rows, n]:
// y = bf16(acc · sx[i] · sw[c] + bias[c]) with acc = fp32 stage (fp8) or, for int32 stages,
// acc = (float)(stage - zx · colsum[c]).
void launch_epilogue_f32(const float* stage, int64_t rows, int64_t n, const float* sx,
                         const float* sw, const uint16_t* bias, uint16_t* y, cudaStream_t stream);
void launch_epilogue_i32(const int32_t* stage, int64_t rows, int64_t n, const float* sx,
                         const float* sw, const int32_t* colsum, int32_t zx, const uint16_t* bias,
                         uint16_t* y, cudaStream_t stream);
// y[i][c] = bf16(y[i][c] + bias[c]): when cuBLASLt's scaled kernels take no bias epilogue.
void launch_add_bias(uint16_t* y, int64_t rows, int64_t n, const uint16_t* bias,
                     cudaStream_t stream);

// SIMT products (any granularity). Activation scale of (row i, column c):
// sx[(c / sx_group) * sx_ld + i]; codes qx [m, k].
struct Fp8SimtArgs {
  const uint8_t* qx = nullptr;
  const float* sx = nullptr;
  int64_t sx_group = 0, sx_ld = 0;
  const W8a8GpuWeights::Impl* w = nullptr;
  const uint16_t* bias = nullptr;
  uint16_t* y = nullptr;
  int64_t m = 0;
};
void launch_fp8_simt(const Fp8SimtArgs& a, cudaStream_t stream);

// The FP8 GEMV of decode steps (gemv_fp8.cu): m <= kFp8GemvMaxRows rows, weight scales constant
// along k (row_scales), k a multiple of 16, a GPU with e4m3 tensor cores (sm_89+). qx [m, k]
// (16-byte aligned), sx [m]: per-row activation scales.
inline constexpr int64_t kFp8GemvMaxRows = 8;
bool fp8_gemv_applies(const W8a8GpuWeights::Impl& w, int64_t m);
void launch_fp8_gemv(const uint8_t* qx, const float* sx, const W8a8GpuWeights::Impl& w,
                     const uint16_t* bias, uint16_t* y, int64_t m, cudaStream_t stream);

struct IntSimtArgs {
  const int8_t* qx = nullptr;
  const float* sx = nullptr;  // [m]
  int32_t zx = 0;
  const W8a8GpuWeights::Impl* w = nullptr;
  const uint16_t* bias = nullptr;
  uint16_t* y = nullptr;
  int64_t m = 0;
};
void launch_int_simt(const IntSimtArgs& a, cudaStream_t stream);

// Common argument checks of both w8a8_gemm overloads (InvalidArgument naming the argument).
void check_gemm_args(const W8a8GpuWeights& w, W8a8GpuWeights::Type want, const uint16_t* x,
                     int64_t m, const uint16_t* y, const void* workspace, size_t workspace_bytes,
                     size_t needed);

std::string problem_name(const W8a8GpuWeights::Impl& w, int64_t m);

}  // namespace w8a8
}  // namespace lowbit::kernels::cuda
