// One linear layer of a GpuModel: y [m, n] = x [m, k] · Wᵀ (+ bias), bf16 in and out, on the kernel
// its weights call for (gpu_model.h says which). Built once at load from the CPU model's
// models::Linear (dense or run by a quantization method), whole or one GPU's part of it (a Split,
// gpu/tensor_parallel.h); internal to src/gpu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm_bf16.h"
#include "kernels/cuda/gemv_bf16.h"
#include "kernels/cuda/w8a8_gemm.h"
#include "gpu/tensor_parallel.h"
#include "kernels/cuda/wna16_gemm.h"
#include "models/layers/linear.h"

namespace lowbit::gpu {

// Dense layers with at most this many rows of x run on the streaming GEMV (kernels/cuda/
// gemv_bf16.h) instead of cuBLASLt; decode steps (one row per sequence) are that small. Its cost
// does not grow with m up to the kernel's limit (8), where cuBLASLt's does little either.
inline constexpr int64_t kGemvMaxRows = 8;
static_assert(kGemvMaxRows <= kernels::cuda::kGemvMaxRows, "the GEMV kernel takes at most 8 rows");

// False when the environment sets LOWBIT_GPU_GEMV=0: the decode-step kernels of issue 5's fusion
// work (the GEMV and the fused RoPE + KV write) are then replaced by the cuBLASLt / small-op
// sequence, for A/B runs. Read once per process.
bool gemv_kernels_enabled();

class GpuLinear {
 public:
  enum class Kind : uint8_t { DENSE, WNA16, W8A8_FP8, W8A8_INT };

  GpuLinear() = default;
  GpuLinear(GpuLinear&&) noexcept = default;
  GpuLinear& operator=(GpuLinear&&) noexcept = default;

  // Row-wise concatenation of dense layers (fused q/k/v, gate/up), each cut to its split (row
  // splits: column-parallel parts); each part must be dense (no method, no input quantization).
  // Biases: all parts or none have one (absent → zeros).
  static GpuLinear fused_dense(const std::vector<const models::Linear*>& parts,
                               const std::vector<Split>& splits, const std::string& name);
  // Row-wise concatenation of FP8 W8A8 layers that quantize their shared input the same way
  // (dynamic schemes, or equal static scales) and scale their weights per tensor or per channel:
  // each part's scales become per-row scales of the fused layer, so the products are those of
  // the parts, in one GEMV / GEMM and one activation quantization instead of one per part.
  // nullopt when the parts do not qualify (then run them one by one).
  static std::optional<GpuLinear> fused_fp8(const std::vector<const models::Linear*>& parts,
                                            const std::vector<Split>& splits, int rank,
                                            const std::string& name);
  // Row-wise concatenation of weight-only int layers (W4A16 / W8A16: q/k/v, gate/up) with one packed
  // layout (same bits, columns, group size and g_idx; symmetric parts get their implicit zero point
  // written out when another part has zero points): one GEMV launch instead of one per part, the
  // same products. nullopt when the parts do not qualify.
  static std::optional<GpuLinear> fused_wna16(const std::vector<const models::Linear*>& parts,
                                              const std::vector<Split>& splits, int rank,
                                              const std::string& name);
  // One layer (its `split`) on the kernel its weights call for. `rank` decides who adds the bias
  // of a column split (rank 0). `name` ("layers.3.self_attn.q_proj") and `method_name` (the
  // checkpoint's quantization) appear in Unsupported messages.
  static GpuLinear from(const models::Linear& linear, const Split& split, int rank,
                        const std::string& name, const std::string& method_name);
  // The LM head (its vocabulary rows `split`), with fp32 logits: a 4- or 8-bit weight-only head
  // (W4A16 / W8A16, GGUF Q4_0 / Q8_0) stays packed for the wna16 kernel (a quarter / half of the
  // bf16 bytes per decode step); any other quantized head is dequantized to bf16. `shared`
  // non-null: use that device table (a tied embedding, cut to the same rows) instead of uploading.
  static GpuLinear lm_head(const models::Linear& linear, const Split& split,
                           const std::string& method_name, const uint16_t* shared);
  // A dense [n, k] layer of random bf16 weights made on the device (GpuModelOptions::random_weights).
  static GpuLinear random_dense(int64_t n, int64_t k, uint64_t seed);
  // The LM head over a device table (random_weights: the random embedding or its own random rows).
  static GpuLinear dense_view(const uint16_t* weight, int64_t n, int64_t k);

  bool empty() const { return n_ == 0; }
  Kind kind() const { return kind_; }
  const char* kernel_name() const;
  // Whether run() takes the streaming GEMV for m rows of x at x.
  bool uses_gemv(const uint16_t* x, int64_t m, int64_t x_stride) const;
  int64_t rows() const { return n_; }  // output features
  int64_t cols() const { return k_; }  // input features
  size_t device_bytes() const;         // weights (and bias) read by one call
  bool shares_weight() const { return weight_ptr_ != nullptr && weight_.size() == 0; }

  // Scratch run() needs for up to m rows; run_f32() for up to m rows.
  size_t workspace_bytes(int64_t m) const;
  size_t workspace_bytes_f32(int64_t m) const;

  void run(kernels::cuda::BlasLt& blas, const uint16_t* x, int64_t m, uint16_t* y,
           void* workspace, size_t workspace_bytes, cudaStream_t stream) const;
  // fp32 output (dense, or wna16 built by lm_head): the LM head.
  void run_f32(kernels::cuda::BlasLt& blas, const uint16_t* x, int64_t m, float* y,
               cudaStream_t stream, void* workspace = nullptr, size_t workspace_bytes = 0) const;

 private:
  Kind kind_ = Kind::DENSE;
  int64_t n_ = 0, k_ = 0;
  kernels::cuda::DeviceBuffer<uint16_t> weight_;  // dense [n, k] bf16 (empty when shared)
  const uint16_t* weight_ptr_ = nullptr;          // weight_ or a shared table
  kernels::cuda::DeviceBuffer<uint16_t> bias_;    // bf16 [n], or empty
  kernels::cuda::DeviceBuffer<float> bias_f32_;   // the LM head's bias in fp32, or empty
  std::unique_ptr<kernels::cuda::Wna16GpuWeights> wna16_;
  std::unique_ptr<kernels::cuda::W8a8GpuWeights> w8a8_;
  kernels::cuda::Fp8Activations fp8_act_;
  kernels::Int8Activations int8_act_;
};

// A dense weight as bf16 bits (F32 / F16 / BF16 tensors; bf16 copied as is, the others rounded to
// nearest even).
std::vector<uint16_t> to_bf16_bits(const Tensor& weight);

}  // namespace lowbit::gpu
