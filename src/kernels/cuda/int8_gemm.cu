// Integer W8A8 / W4A8 on the GPU (w8a8_gemm.h): packing IntWeights (codes widened to signed int8),
// and the IMMA + epilogue and SIMT paths of w8a8_gemm for int8 activations.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/act_quant.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/w8a8_internal.h"
#include "lowbit/error.h"

namespace lowbit::kernels::cuda {

namespace {

void check_int_weights(const IntWeights& w) {
  const std::string f = "pack_int8_for_gpu: ";
  LOWBIT_CHECK(w.bits >= 2 && w.bits <= 8, f + "bits " + std::to_string(w.bits) + " not in 2..8");
  LOWBIT_CHECK(w.rows > 0 && w.cols > 0, f + "empty shape");
  LOWBIT_CHECK(w.group_size > 0, f + "group_size must be > 0");
  const auto cells = static_cast<size_t>(w.rows * w.cols);
  const auto slots = static_cast<size_t>(w.rows * w.groups());
  LOWBIT_CHECK(w.codes.size() == cells, f + "codes has " + std::to_string(w.codes.size()) +
                                            " values, expected " + std::to_string(cells));
  LOWBIT_CHECK(w.scales.size() == slots, f + "scales has " + std::to_string(w.scales.size()) +
                                             " values, expected " + std::to_string(slots));
  LOWBIT_CHECK(w.zeros.empty() || w.zeros.size() == slots,
               f + "zeros has " + std::to_string(w.zeros.size()) + " values, expected " +
                   std::to_string(slots));
  const unsigned limit = 1u << w.bits;
  for (uint8_t c : w.codes) LOWBIT_CHECK(c < limit, f + "a code is out of range for the bit width");
  for (uint8_t z : w.zeros) LOWBIT_CHECK(z < limit, f + "a zero point is out of range for the bit width");
  if (!w.g_idx.empty()) {
    LOWBIT_CHECK(w.g_idx.size() == static_cast<size_t>(w.cols), f + "g_idx has the wrong size");
    for (int64_t c = 0; c < w.cols; ++c) {
      if (w.g_idx[static_cast<size_t>(c)] != c / w.group_size) {
        throw Unsupported(f + "activation-order g_idx (columns out of group order)");
      }
    }
  }
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  return DeviceBuffer<T>(std::span<const T>(host));
}

}  // namespace

W8a8GpuWeights pack_int8_for_gpu(const IntWeights& w) {
  check_int_weights(w);
  auto impl = std::make_unique<W8a8GpuWeights::Impl>();
  W8a8GpuWeights::Impl& p = *impl;
  LOWBIT_CUDA_CHECK(cudaGetDevice(&p.device));
  p.type = W8a8GpuWeights::Type::INT;
  p.n = w.rows;
  p.k = w.cols;
  p.bits = w.bits;
  p.group_size = std::min(w.group_size, w.cols);
  p.groups = w.groups();
  const int half = 1 << (w.bits - 1);
  // Signed codes (code - 2^(bits-1)) fit int8 for every width, so IMMA multiplies them directly.
  std::vector<uint8_t> codes(w.codes.size());
  std::vector<int32_t> colsum(static_cast<size_t>(p.n), 0);
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t c = 0; c < p.k; ++c) {
      const size_t i = static_cast<size_t>(r * p.k + c);
      const int v = static_cast<int>(w.codes[i]) - half;
      codes[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
      colsum[static_cast<size_t>(r)] += v;
    }
  }
  p.codes = upload(codes);
  p.colsum = upload(colsum);
  p.int_scales = upload(w.scales);
  bool zeros = false;
  if (!w.zeros.empty()) {
    std::vector<int8_t> z(w.zeros.size());
    for (size_t i = 0; i < z.size(); ++i) {
      z[i] = static_cast<int8_t>(static_cast<int>(w.zeros[i]) - half);
      zeros = zeros || z[i] != 0;
    }
    // Zero points equal to the implicit 2^(bits-1) everywhere are no zero points at all.
    if (zeros) p.int_zeros = upload(z);
  }
  // IMMA sums in int32: |code · q| <= 2^14 per term stays exact up to k = 2^16 (with the static
  // zero point's correction too); longer rows take SIMT, which converts every 32-term partial.
  p.imma = p.groups == 1 && !zeros && p.k <= 65536;
  return W8a8GpuWeights(std::move(impl));
}

namespace {

void check_int_act(const Int8Activations& act) {
  if (act.dynamic) return;
  LOWBIT_CHECK(std::isfinite(act.static_scale) && act.static_scale > 0.0f,
               "w8a8_gemm (int): static_scale must be finite and positive");
  LOWBIT_CHECK(act.static_zero >= -128 && act.static_zero <= 127,
               "w8a8_gemm (int): static_zero outside [-128, 127]");
}

void quantize(const Int8Activations& act, const uint16_t* x, int64_t m, int64_t k, int8_t* qx,
              float* sx, cudaStream_t stream) {
  detail::ActQuantArgs a;
  a.x = x;
  a.m = m;
  a.rows_out = m;
  a.k = k;
  a.fp8 = false;
  a.q = qx;
  a.scales = sx;
  a.scale_ld = m;
  a.dynamic = act.dynamic;
  if (!act.dynamic) {
    a.static_scale = act.static_scale;
    a.static_zero = static_cast<float>(act.static_zero);
  }
  detail::launch_act_quant(a, stream);
}

}  // namespace

size_t w8a8_workspace_bytes(const W8a8GpuWeights& w, int64_t m, const Int8Activations& act) {
  LOWBIT_CHECK(m >= 0, "w8a8_workspace_bytes: m must be >= 0");
  check_int_act(act);
  return w8a8::workspace_for_up_to(w.impl(), m, 1);
}

W8a8Path w8a8_gemm(const W8a8GpuWeights& w, const uint16_t* x, int64_t m, const Int8Activations& act,
                   const uint16_t* bias, uint16_t* y, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, W8a8Path path) {
  const W8a8GpuWeights::Impl& impl = w.impl();
  check_int_act(act);
  const w8a8::Layout l = w8a8::plan_layout(impl, m, 1);
  w8a8::check_gemm_args(w, W8a8GpuWeights::Type::INT, x, m, y, workspace, workspace_bytes, l.total);
  if (m == 0) return path;
  const std::string what = "w8a8_gemm (int, " + w8a8::problem_name(impl, m) + "): ";
  auto* base = static_cast<char*>(workspace);
  auto* qx = reinterpret_cast<int8_t*>(base + l.codes);
  auto* sx = reinterpret_cast<float*>(base + l.scales);
  auto* stage = reinterpret_cast<int32_t*>(base + l.stage);
  void* lt = base + l.lt;
  const int32_t zx = act.dynamic ? 0 : act.static_zero;

  if (path == W8a8Path::LT_SCALED) {
    throw Unsupported(what + "cuBLASLt has no scaled int8 product; use LT_EPILOGUE (IMMA)");
  }
  if (path == W8a8Path::GEMV) throw Unsupported(what + "the GEMV path is FP8 only");
  if (path == W8a8Path::LT_EPILOGUE && !impl.imma) {
    throw Unsupported(what + "IMMA needs per-channel (one group) weights without zero points");
  }
  if (path == W8a8Path::AUTO || path == W8a8Path::LT_EPILOGUE) {
    // int8 x int8 → int32 in row chunks (IMMA: "TN", int32 compute and scale type), each scaled
    // by the epilogue while it is still in L2.
    std::vector<w8a8::LtMatmul> gemms;
    bool available = impl.imma;
    for (int64_t row0 = 0; available && row0 < m; row0 += l.chunk_rows) {
      w8a8::LtProblem p;
      p.ab_type = CUDA_R_8I;
      p.d_type = CUDA_R_32I;
      p.compute = CUBLAS_COMPUTE_32I;
      p.scale_type = CUDA_R_32I;
      p.n = impl.n;
      p.k = impl.k;
      p.m = std::min(l.chunk_rows, m - row0);
      p.a = impl.codes.data();
      p.b = qx + row0 * impl.k;
      p.d = stage;
      gemms.emplace_back(impl, p);
      available = gemms.back().available();
    }
    if (available) {
      quantize(act, x, m, impl.k, qx, sx, stream);
      for (size_t i = 0; i < gemms.size(); ++i) {
        const int64_t row0 = static_cast<int64_t>(i) * l.chunk_rows;
        gemms[i].run(lt, stream);
        w8a8::launch_epilogue_i32(stage, std::min(l.chunk_rows, m - row0), impl.n, sx + row0,
                                  impl.int_scales.data(), impl.colsum.data(), zx, bias,
                                  y + row0 * impl.n, stream);
      }
      return W8a8Path::LT_EPILOGUE;
    }
    if (path == W8a8Path::LT_EPILOGUE) throw Unsupported(what + "cuBLASLt has no IMMA algorithm");
  }
  quantize(act, x, m, impl.k, qx, sx, stream);
  w8a8::IntSimtArgs a;
  a.qx = qx;
  a.sx = sx;
  a.zx = zx;
  a.w = &impl;
  a.bias = bias;
  a.y = y;
  a.m = m;
  w8a8::launch_int_simt(a, stream);
  return W8a8Path::SIMT;
}

}  // namespace lowbit::kernels::cuda
