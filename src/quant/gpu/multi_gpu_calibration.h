// GPTQ's calibration on several GPUs of one machine (`lowbit quantize --device cuda --tp N`):
// data-parallel, as llm-compressor's distributed oneshot calibrates. Every GPU holds a copy of the
// current decoder layer and the hidden states of its own share of the samples (a contiguous run of
// them, balanced by tokens), and runs calibrate() and propagate() over that share, all GPUs at
// once (one host thread each). The Hessians are then summed onto the first GPU with the sample
// counts as weights: GPU i's H_i = 2/n_i · Σ x xᵀ over its n_i samples, so
// H = 2/n · Σ x xᵀ = Σ (n_i / n) · H_i — the Hessian one GPU would compute over all n samples, up
// to the order of fp32 additions. GPTQ runs on the first GPU with that Hessian (spreading different
// modules' GPTQ over the GPUs is a later step); every GPU then propagates its share through the
// quantized layer. Memory: each GPU holds its share's states and one layer, so a calibration set
// too large for one GPU's memory spreads over N.
//
// The first GPU's gptq_linear() writes the quantized weight into its own uploaded copy; the other
// GPUs are told to upload that Linear again (CudaCalibrationBackend::forget_upload) before their
// next propagate().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quant/gpu/calibration_cuda.h"

namespace lowbit::quant::gpu {

// Samples [begin, end) (`tokens` tokens in all) go to one GPU.
struct SampleShard {
  size_t begin = 0, end = 0;
  int64_t tokens = 0;
};

// Cuts samples of the given token counts into `parts` contiguous shards, in order (shard k's
// samples come before shard k+1's, so the shards concatenated are the samples as given): the cut
// between shards k-1 and k falls at the sample boundary whose running token count is nearest to
// k/parts of the total (the earlier boundary on a tie), leaving every shard at least one sample
// while there are enough. Deterministic: depends only on the counts. When there are fewer samples
// than parts, the last shards are empty (begin == end == the sample count). InvalidArgument when
// parts < 1 or a count is negative.
std::vector<SampleShard> split_samples(const std::vector<int64_t>& lengths, int parts);

class MultiGpuCalibrationBackend : public quant::CalibrationBackend {
 public:
  // One CudaCalibrationBackend per entry of `devices` (CUDA device numbers; the same device may
  // appear more than once, which runs the reduction's same-device path on one GPU). Touches no
  // device until begin().
  explicit MultiGpuCalibrationBackend(
      std::vector<int> devices, int64_t chunk_tokens = CudaCalibrationBackend::kDefaultChunkTokens);
  ~MultiGpuCalibrationBackend() override;
  MultiGpuCalibrationBackend(const MultiGpuCalibrationBackend&) = delete;
  MultiGpuCalibrationBackend& operator=(const MultiGpuCalibrationBackend&) = delete;

  // "cuda (GPUs 0,1)".
  std::string name() const override;
  std::string unsupported(const models::Model& model, const OneshotPlan& plan) const override;
  // Splits the samples (split_samples) and begins each GPU on its shard, one after the other.
  // GPUs left without a sample (fewer samples than GPUs) sit out the whole run, with a warning.
  void begin(const models::Model& model, const CalibrationSet& samples) override;
  // Every GPU over its shard at once, then the Hessians summed onto the first GPU.
  void calibrate(int layer, const std::vector<LinearRole>& inputs) override;
  // On the first GPU, with the summed Hessian.
  GptqResult gptq(std::vector<float>& w, int64_t rows, int64_t cols, LinearRole input,
                  const QuantArgs& args, const GptqOptions& options, DType compute) override;
  GptqResult gptq_linear(models::Linear& linear, LinearRole input, const QuantArgs& args,
                         const GptqOptions& options, DType compute) override;
  // Every GPU over its shard at once.
  void propagate(int layer) override;
  // Wall time of the parallel sections: calibrate() (with the reduction) and propagate(); the
  // Hessians' share: the slowest GPU's Hessian time in each calibrate() plus the reduction.
  double forward_seconds() const override;
  double hessian_seconds() const override;

  // For tests: the shards of the last begin(); sample `index`'s states (an index into the samples
  // begin() was given, whichever GPU holds it); the summed Hessian of `input`.
  const std::vector<SampleShard>& shards() const { return shards_; }
  std::vector<float> download_states(size_t index) const;
  std::vector<float> download_hessian(LinearRole input) const;

 private:
  struct Reducer;
  // Sums the first `active_` backends' Hessians of `inputs` into the first one's.
  void reduce(const std::vector<LinearRole>& inputs);

  std::vector<int> devices_;
  std::vector<std::unique_ptr<CudaCalibrationBackend>> backends_;
  std::vector<SampleShard> shards_;
  size_t active_ = 0;  // backends with samples: the first active_
  std::unique_ptr<Reducer> reducer_;
  double forward_seconds_ = 0.0, hessian_seconds_ = 0.0;
};

// `--device cuda --tp gpus`: a CudaCalibrationBackend on GPU 0 for 1, else a
// MultiGpuCalibrationBackend over GPUs 0 .. gpus-1. Unsupported when no CUDA device is usable;
// InvalidArgument when fewer than `gpus` are visible (saying how many are).
std::unique_ptr<quant::CalibrationBackend> make_multi_gpu_calibration_backend(int gpus);

}  // namespace lowbit::quant::gpu
