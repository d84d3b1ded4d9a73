// FP8 W8A8 on the GPU (w8a8_gemm.h): packing Fp8Weights, and the three paths of w8a8_gemm for
// fp8 activations.
#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/w8a8_internal.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

using w8a8::ceil_div;
using w8a8::round_up;

namespace {

void check_fp8_weights(const Fp8Weights& w) {
  const std::string f = "pack_fp8_for_gpu: ";
  LOWBIT_CHECK(w.rows > 0 && w.cols > 0, f + "empty shape");
  LOWBIT_CHECK(w.block_rows > 0 && w.block_cols > 0, f + "block_rows and block_cols must be > 0");
  LOWBIT_CHECK(w.codes.size() == static_cast<size_t>(w.rows * w.cols),
               f + "codes has " + std::to_string(w.codes.size()) + " values, expected " +
                   std::to_string(w.rows * w.cols));
  const int64_t grid = ceil_div(w.rows, w.block_rows) * ceil_div(w.cols, w.block_cols);
  LOWBIT_CHECK(w.scales.size() == static_cast<size_t>(grid),
               f + "scales has " + std::to_string(w.scales.size()) + " values, expected " +
                   std::to_string(grid));
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  return DeviceBuffer<T>(std::span<const T>(host));
}

}  // namespace

W8a8GpuWeights pack_fp8_for_gpu(const Fp8Weights& w) {
  check_fp8_weights(w);
  auto impl = std::make_unique<W8a8GpuWeights::Impl>();
  W8a8GpuWeights::Impl& p = *impl;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&p.device));
  int major = 0, minor = 0;
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, p.device));
  LOWBIT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, p.device));
  p.e4m3_mma = major * 10 + minor >= 89;
  p.type = W8a8GpuWeights::Type::FP8;
  p.n = w.rows;
  p.k = w.cols;
  p.block_rows = std::min(w.block_rows, w.rows);
  p.block_cols = std::min(w.block_cols, w.cols);
  p.grid_rows = ceil_div(w.rows, w.block_rows);
  p.grid_cols = ceil_div(w.cols, w.block_cols);
  // The codes are already cuBLASLt's "TN" A operand: [n, k] row-major = [k, n] column-major.
  p.codes = upload(w.codes);
  p.scale_grid = upload(w.scales);
  p.k_const = w.block_cols >= w.cols;
  p.per_tensor = p.k_const && w.block_rows >= w.rows;
  if (p.k_const) {
    std::vector<float> rows(static_cast<size_t>(p.n));
    for (int64_t r = 0; r < p.n; ++r) rows[static_cast<size_t>(r)] = w.scale(r, 0);
    p.row_scales = upload(rows);
  }
  // Which of cuBLASLt's block layouts can express these scales (a block that is a multiple of
  // 128, or spans the matrix, repeats its scale over whole 128-wide tiles).
  const int64_t kb = ceil_div(p.k, 128), nb = ceil_div(p.n, 128);
  const bool cols_128 = w.block_cols % 128 == 0 || w.block_cols >= w.cols;
  const bool rows_128 = w.block_rows % 128 == 0 || w.block_rows >= w.rows;
  p.blk128 = cols_128 && rows_128;
  p.vec128 = cols_128;
  if (p.blk128) {
    p.blk128_ld = round_up(kb, 4);  // cuBLASLt pads the inner block count to 4 (16 bytes)
    std::vector<float> blk(static_cast<size_t>(nb * p.blk128_ld), 1.0f);
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t c = 0; c < kb; ++c) {
        blk[static_cast<size_t>(b * p.blk128_ld + c)] = w.scale(b * 128, c * 128);
      }
    }
    p.blk128_scales = upload(blk);
  } else if (p.vec128) {
    std::vector<float> vec(static_cast<size_t>(kb * p.n));
    for (int64_t c = 0; c < kb; ++c) {
      for (int64_t r = 0; r < p.n; ++r) vec[static_cast<size_t>(c * p.n + r)] = w.scale(r, c * 128);
    }
    p.vec128_scales = upload(vec);
  }
  return W8a8GpuWeights(std::move(impl));
}

namespace {

bool act_per_row(const Fp8Activations& act) { return act.scheme != Fp8ActScheme::PER_GROUP; }

int64_t fp8_scale_cols(const W8a8GpuWeights::Impl& w, const Fp8Activations& act) {
  int64_t cols = ceil_div(w.k, 128);  // the block path writes one column per 128-wide k tile
  if (!act_per_row(act)) cols = std::max(cols, w.k / std::max<int64_t>(act.group_size, 1));
  return cols;
}

void check_fp8_act(const W8a8GpuWeights::Impl& w, const Fp8Activations& act) {
  if (act.scheme == Fp8ActScheme::PER_TENSOR_STATIC) {
    LOWBIT_CHECK(std::isfinite(act.static_scale) && act.static_scale > 0.0f,
                 "w8a8_gemm (fp8): static_scale must be finite and positive");
  }
  if (act.scheme == Fp8ActScheme::PER_GROUP) {
    LOWBIT_CHECK(act.group_size >= 1 && w.k % act.group_size == 0,
                 "w8a8_gemm (fp8): activation group_size " + std::to_string(act.group_size) +
                     " does not divide k = " + std::to_string(w.k));
  }
}

// How cuBLASLt would apply the scales, if it can.
enum class Flavor { NONE, SCALAR, OUTER, BLOCK };

Flavor scaled_flavor(const W8a8GpuWeights::Impl& w, const Fp8Activations& act) {
  const bool row = act_per_row(act);
  const bool tensor = act.scheme == Fp8ActScheme::PER_TENSOR_STATIC ||
                      act.scheme == Fp8ActScheme::PER_TENSOR_DYNAMIC;
  if (row && w.k_const) return tensor && w.per_tensor ? Flavor::SCALAR : Flavor::OUTER;
  if ((row || act.group_size == 128) && (w.blk128 || w.vec128)) return Flavor::BLOCK;
  return Flavor::NONE;
}

struct Scratch {
  uint8_t* qx;
  float* sx;
  float* amax;
  void* stage;
  void* lt;
};

Scratch carve(void* workspace, const w8a8::Layout& l) {
  auto* base = static_cast<char*>(workspace);
  return {reinterpret_cast<uint8_t*>(base + l.codes), reinterpret_cast<float*>(base + l.scales),
          reinterpret_cast<float*>(base + l.amax), base + l.stage, base + l.lt};
}

// Quantizes x into rows_out rows of codes; per-row scales are written to `reps` columns.
void quantize(const Fp8Activations& act, const uint16_t* x, int64_t m, int64_t rows_out,
              int64_t k, const Scratch& s, int64_t scale_ld, int reps, cudaStream_t stream) {
  detail::ActQuantArgs a;
  a.x = x;
  a.m = m;
  a.rows_out = rows_out;
  a.k = k;
  a.fp8 = true;
  a.q = s.qx;
  a.scales = s.sx;
  a.scale_ld = scale_ld;
  a.scale_reps = reps;
  switch (act.scheme) {
    case Fp8ActScheme::PER_TOKEN: break;
    case Fp8ActScheme::PER_GROUP: a.group = act.group_size; break;
    case Fp8ActScheme::PER_TENSOR_STATIC:
      a.dynamic = false;
      a.static_scale = act.static_scale;
      break;
    case Fp8ActScheme::PER_TENSOR_DYNAMIC:
      a.dynamic = false;
      a.tensor_amax = s.amax;
      break;
  }
  detail::launch_act_quant(a, stream);
}

struct Call {
  const W8a8GpuWeights::Impl& w;
  const Fp8Activations& act;
  const uint16_t* x;
  int64_t m;
  const uint16_t* bias;
  uint16_t* y;
  const w8a8::Layout& l;
  Scratch s;
  cudaStream_t stream;
};

// LT_SCALED: cuBLASLt applies the scales. Returns false (nothing launched) without an algorithm.
bool run_scaled(const Call& c) {
  const W8a8GpuWeights::Impl& w = c.w;
  const Flavor flavor = scaled_flavor(w, c.act);
  if (flavor == Flavor::NONE) return false;
  w8a8::LtProblem p;
  p.n = w.n;
  p.k = w.k;
  p.a = w.codes.data();
  p.b = c.s.qx;
  p.m = c.m;
  p.d = c.y;
  int reps = 1;
  if (flavor == Flavor::BLOCK) {
    // 1x128 activation scales, outer-dim-major with the row count padded to 4.
    p.m = c.l.m_pad;
    if (p.m != c.m) p.d = c.s.stage;
    p.a_mode = w.blk128 ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                        : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    p.a_scale = w.blk128 ? w.blk128_scales.data() : w.vec128_scales.data();
    p.b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    reps = static_cast<int>(ceil_div(w.k, 128));
  } else {
    const int32_t mode = flavor == Flavor::SCALAR ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
                                                  : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    p.a_mode = p.b_mode = mode;
    p.a_scale = w.row_scales.data();
  }
  p.b_scale = c.s.sx;
  // The bias inside cuBLASLt's epilogue if it has such a kernel, else added afterwards.
  p.bias = c.bias;
  std::optional<w8a8::LtMatmul> gemm;
  gemm.emplace(w, p);
  if (!gemm->available() && c.bias != nullptr) {
    p.bias = nullptr;
    gemm.emplace(w, p);
  }
  if (!gemm->available()) return false;
  const int64_t ld = flavor == Flavor::BLOCK ? c.l.m_pad : c.m;
  quantize(c.act, c.x, c.m, p.m, w.k, c.s, ld, reps, c.stream);
  gemm->run(c.s.lt, c.stream);
  if (p.d != c.y) {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(c.y, p.d, static_cast<size_t>(c.m * w.n) * 2,
                                      cudaMemcpyDeviceToDevice, c.stream));
  }
  if (c.bias != nullptr && p.bias == nullptr) w8a8::launch_add_bias(c.y, c.m, w.n, c.bias, c.stream);
  return true;
}

// LT_EPILOGUE: unit-scale cuBLASLt product into fp32 chunks, lowbit's epilogue scales them.
bool run_epilogue(const Call& c) {
  const W8a8GpuWeights::Impl& w = c.w;
  if (!act_per_row(c.act) || !w.k_const) return false;
  // Every chunk's product is planned before anything is launched, so that a missing algorithm
  // (chunks may differ in row count and pointer alignment) falls back cleanly.
  std::vector<w8a8::LtMatmul> gemms;
  for (int64_t row0 = 0; row0 < c.m; row0 += c.l.chunk_rows) {
    w8a8::LtProblem p;
    p.d_type = CUDA_R_32F;
    p.n = w.n;
    p.k = w.k;
    p.m = std::min(c.l.chunk_rows, c.m - row0);
    p.a = w.codes.data();
    p.b = c.s.qx + row0 * w.k;
    p.d = c.s.stage;
    gemms.emplace_back(w, p);
    if (!gemms.back().available()) return false;
  }
  quantize(c.act, c.x, c.m, c.m, w.k, c.s, c.m, 1, c.stream);
  for (size_t i = 0; i < gemms.size(); ++i) {
    const int64_t row0 = static_cast<int64_t>(i) * c.l.chunk_rows;
    gemms[i].run(c.s.lt, c.stream);
    w8a8::launch_epilogue_f32(static_cast<const float*>(c.s.stage),
                              std::min(c.l.chunk_rows, c.m - row0), w.n, c.s.sx + row0,
                              w.row_scales.data(), c.bias, c.y + row0 * w.n, c.stream);
  }
  return true;
}

// GEMV: the per-row quantization, then the streaming kernel. False (nothing launched) when it
// does not apply.
bool run_gemv(const Call& c) {
  if (!act_per_row(c.act) || !w8a8::fp8_gemv_applies(c.w, c.m)) return false;
  quantize(c.act, c.x, c.m, c.m, c.w.k, c.s, c.m, 1, c.stream);
  w8a8::launch_fp8_gemv(c.s.qx, c.s.sx, c.w, c.bias, c.y, c.m, c.stream);
  return true;
}

void run_simt(const Call& c) {
  const bool row = act_per_row(c.act);
  quantize(c.act, c.x, c.m, c.m, c.w.k, c.s, c.l.m_pad, 1, c.stream);
  w8a8::Fp8SimtArgs a;
  a.qx = c.s.qx;
  a.sx = c.s.sx;
  a.sx_group = row ? c.w.k : c.act.group_size;
  a.sx_ld = c.l.m_pad;
  a.w = &c.w;
  a.bias = c.bias;
  a.y = c.y;
  a.m = c.m;
  w8a8::launch_fp8_simt(a, c.stream);
}

}  // namespace

bool w8a8_gemv_applies(const W8a8GpuWeights& w, int64_t m, const Fp8Activations& act) {
  const W8a8GpuWeights::Impl& impl = w.impl();
  return impl.type == W8a8GpuWeights::Type::FP8 && act_per_row(act) && w8a8::fp8_gemv_applies(impl, m);
}

size_t w8a8_workspace_bytes(const W8a8GpuWeights& w, int64_t m, const Fp8Activations& act) {
  LOWBIT_CHECK(m >= 0, "w8a8_workspace_bytes: m must be >= 0");
  const W8a8GpuWeights::Impl& impl = w.impl();
  check_fp8_act(impl, act);
  return w8a8::workspace_for_up_to(impl, m, fp8_scale_cols(impl, act));
}

W8a8Path w8a8_gemm(const W8a8GpuWeights& w, const uint16_t* x, int64_t m, const Fp8Activations& act,
                   const uint16_t* bias, uint16_t* y, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, W8a8Path path) {
  const W8a8GpuWeights::Impl& impl = w.impl();
  check_fp8_act(impl, act);
  const w8a8::Layout l = w8a8::plan_layout(impl, m, fp8_scale_cols(impl, act));
  w8a8::check_gemm_args(w, W8a8GpuWeights::Type::FP8, x, m, y, workspace, workspace_bytes, l.total);
  if (m == 0) return path;
  const Call c{impl, act, x, m, bias, y, l, carve(workspace, l), stream};
  const std::string what = "w8a8_gemm (fp8, " + w8a8::problem_name(impl, m) + "): ";
  switch (path) {
    case W8a8Path::AUTO:
      if (run_scaled(c)) return W8a8Path::LT_SCALED;
      if (run_epilogue(c)) return W8a8Path::LT_EPILOGUE;
      run_simt(c);
      return W8a8Path::SIMT;
    case W8a8Path::LT_SCALED:
      if (scaled_flavor(impl, act) == Flavor::NONE) {
        throw Unsupported(what + "cuBLASLt cannot express these weight and activation scales");
      }
      if (!run_scaled(c)) throw Unsupported(what + "cuBLASLt has no scaled FP8 algorithm");
      return path;
    case W8a8Path::LT_EPILOGUE:
      if (!act_per_row(act) || !impl.k_const) {
        throw Unsupported(what + "the epilogue path needs per-tensor or per-channel weight scales "
                                 "and per-token or per-tensor activation scales");
      }
      if (!run_epilogue(c)) throw Unsupported(what + "cuBLASLt has no FP8 algorithm");
      return path;
    case W8a8Path::SIMT:
      run_simt(c);
      return path;
    case W8a8Path::GEMV:
      if (!run_gemv(c)) {
        throw Unsupported(what + "the GEMV needs at most 8 rows, per-tensor or per-channel weight "
                                 "scales, per-row activation scales, k % 16 == 0 and an sm_89+ GPU");
      }
      return path;
  }
  throw InvalidArgument(what + "unknown path");
}

}  // namespace lowbit::kernels::cuda
