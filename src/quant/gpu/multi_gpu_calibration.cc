// MultiGpuCalibrationBackend: the shard split, the host thread per GPU, and the Hessian reduction
// (peer copies in slabs onto the first GPU, a weighted add there).
#include "quant/gpu/multi_gpu_calibration.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "core/log.h"
#include "gpu/gpu_model.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "lowbit/error.h"
#include "quant/gpu/multi_gpu_kernels.h"

namespace lowbit::quant::gpu {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs fn(i) for i in [0, count), each on its own host thread (0 on the caller's), and rethrows
// the exception of the lowest i that threw once all have returned. Each backend call sets its own
// device first, so the threads need nothing else.
template <typename Fn>
void run_parallel(size_t count, const Fn& fn) {
  std::vector<std::exception_ptr> errors(count);
  auto guarded = [&](size_t i) {
    try {
      fn(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < count; ++i) threads.emplace_back(guarded, i);
  if (count > 0) guarded(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// The cut index in [lo, hi] whose running token count is nearest to k/parts of the total (the
// earliest on a tie), comparing parts · prefix[b] with k · total to stay in integers.
size_t nearest_cut(const std::vector<int64_t>& prefix, size_t lo, size_t hi, int64_t k,
                   int64_t parts) {
  const int64_t target = k * prefix.back();
  size_t best = lo;
  int64_t best_distance = -1;
  for (size_t b = lo; b <= hi; ++b) {
    const int64_t d = parts * prefix[b] - target;
    const int64_t distance = d < 0 ? -d : d;
    if (best_distance >= 0 && distance >= best_distance) {
      if (d > 0) break;  // past the target: only farther from here on
      continue;
    }
    best = b;
    best_distance = distance;
  }
  return best;
}

}  // namespace

std::vector<SampleShard> split_samples(const std::vector<int64_t>& lengths, int parts) {
  LOWBIT_CHECK(parts >= 1, "split_samples: parts must be >= 1, got " + std::to_string(parts));
  const size_t n = lengths.size();
  const auto p = static_cast<size_t>(parts);
  std::vector<int64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    LOWBIT_CHECK(lengths[i] >= 0, "split_samples: sample " + std::to_string(i) +
                                      " has a negative length " + std::to_string(lengths[i]));
    prefix[i + 1] = prefix[i] + lengths[i];
  }
  std::vector<size_t> cut(p + 1, n);
  cut[0] = 0;
  if (n < p) {
    for (size_t k = 1; k <= n; ++k) cut[k] = k;  // one sample each; the rest empty
  } else {
    for (size_t k = 1; k < p; ++k) {
      // At least one sample for shard k-1 and for each of shards k .. p-1.
      const size_t lo = cut[k - 1] + 1, hi = n - (p - k);
      cut[k] = nearest_cut(prefix, lo, hi, static_cast<int64_t>(k), parts);
    }
  }
  std::vector<SampleShard> shards(p);
  for (size_t k = 0; k < p; ++k) {
    shards[k].begin = cut[k];
    shards[k].end = cut[k + 1];
    shards[k].tokens = prefix[cut[k + 1]] - prefix[cut[k]];
  }
  return shards;
}

// The reduction's own stream on the first GPU and the slab its peers' Hessians are copied into.
struct MultiGpuCalibrationBackend::Reducer {
  // 64 MiB: an 8B down_proj Hessian (822 MB) crosses in 13 slabs; NVLink copies of that size run
  // near their peak, and the scratch stays small beside the states.
  static constexpr size_t kSlabFloats = size_t(1) << 24;

  int device = 0;
  cudaStream_t stream = nullptr;
  kernels::cuda::DeviceBuffer<float> slab;

  explicit Reducer(int d) : device(d) {
    LOWBIT_CUDA_CHECK(cudaSetDevice(device));
    LOWBIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~Reducer() {
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    slab = {};
  }
};

MultiGpuCalibrationBackend::MultiGpuCalibrationBackend(std::vector<int> devices,
                                                       int64_t chunk_tokens)
    : devices_(std::move(devices)) {
  LOWBIT_CHECK(!devices_.empty(), "MultiGpuCalibrationBackend: no devices");
  for (int d : devices_) {
    LOWBIT_CHECK(d >= 0, "MultiGpuCalibrationBackend: device " + std::to_string(d));
    backends_.push_back(std::make_unique<CudaCalibrationBackend>(d, chunk_tokens));
  }
}

MultiGpuCalibrationBackend::~MultiGpuCalibrationBackend() {
  reducer_.reset();
  // Each backend's streams and buffers are released with its own device current.
  for (auto& b : backends_) {
    cudaSetDevice(b->device());
    b.reset();
  }
}

std::string MultiGpuCalibrationBackend::name() const {
  std::string list;
  for (int d : devices_) list += (list.empty() ? "" : ",") + std::to_string(d);
  return "cuda (GPUs " + list + ")";
}

std::string MultiGpuCalibrationBackend::unsupported(const models::Model& model,
                                                    const OneshotPlan& plan) const {
  return backends_[0]->unsupported(model, plan);
}

void MultiGpuCalibrationBackend::begin(const models::Model& model, const CalibrationSet& samples) {
  LOWBIT_CHECK(!samples.empty(), "--device cuda: no calibration samples");
  std::vector<int64_t> lengths;
  for (const std::vector<int32_t>& s : samples) lengths.push_back(static_cast<int64_t>(s.size()));
  shards_ = split_samples(lengths, static_cast<int>(backends_.size()));
  active_ = 0;
  while (active_ < shards_.size() && shards_[active_].end > shards_[active_].begin) ++active_;
  if (active_ < backends_.size()) {
    log_warn("--tensor-parallel-size " + std::to_string(backends_.size()) + ": only " +
             std::to_string(samples.size()) + " calibration samples, so " +
             std::to_string(backends_.size() - active_) + " GPU(s) stay idle");
  }
  // One after the other: begin() embeds the samples with a copy of the embedding table (1 GB for
  // an 8B model) on each GPU, a second or so in all, and keeps each GPU's peak to one table.
  std::string summary;
  for (size_t i = 0; i < active_; ++i) {
    const SampleShard& s = shards_[i];
    const CalibrationSet part(samples.begin() + static_cast<std::ptrdiff_t>(s.begin),
                              samples.begin() + static_cast<std::ptrdiff_t>(s.end));
    backends_[i]->begin(model, part);
    summary += (i == 0 ? "GPU " : ", GPU ") + std::to_string(devices_[i]) + ": samples " +
               std::to_string(s.begin) + ".." + std::to_string(s.end - 1) + " (" +
               std::to_string(s.end - s.begin) + " samples, " + std::to_string(s.tokens) +
               " tokens)";
  }
  if (!reducer_) reducer_ = std::make_unique<Reducer>(devices_[0]);
  log_info("data-parallel calibration on " + std::to_string(active_) + " GPUs: " + summary);
}

void MultiGpuCalibrationBackend::calibrate(int layer, const std::vector<LinearRole>& inputs) {
  LOWBIT_CHECK_AS(Internal, active_ > 0, "MultiGpuCalibrationBackend: calibrate before begin");
  const auto start = Clock::now();
  std::vector<double> hessian_before(active_);
  for (size_t i = 0; i < active_; ++i) hessian_before[i] = backends_[i]->hessian_seconds();
  run_parallel(active_, [&](size_t i) { backends_[i]->calibrate(layer, inputs); });
  double slowest = 0.0;
  for (size_t i = 0; i < active_; ++i) {
    slowest = std::max(slowest, backends_[i]->hessian_seconds() - hessian_before[i]);
  }
  const auto reduce_start = Clock::now();
  reduce(inputs);
  hessian_seconds_ += slowest + seconds_since(reduce_start);
  forward_seconds_ += seconds_since(start);
}

void MultiGpuCalibrationBackend::reduce(const std::vector<LinearRole>& inputs) {
  if (active_ < 2) return;
  Reducer& r = *reducer_;
  std::vector<LinearRole> done;  // a role listed twice is summed once
  for (LinearRole role : inputs) {
    if (std::find(done.begin(), done.end(), role) != done.end()) continue;
    done.push_back(role);
    std::vector<CudaCalibrationBackend::KeptHessian> parts;
    int64_t total = 0;
    for (size_t i = 0; i < active_; ++i) {
      parts.push_back(backends_[i]->kept_hessian(role));  // finalized, its stream synchronized
      total += parts.back().samples;
      LOWBIT_CHECK_AS(Internal, parts.back().cols == parts[0].cols,
                      "MultiGpuCalibrationBackend: Hessians of different sizes");
    }
    const auto count = static_cast<size_t>(parts[0].cols * parts[0].cols);
    const auto n = static_cast<double>(total);
    LOWBIT_CUDA_CHECK(cudaSetDevice(r.device));
    float* y = parts[0].data;
    // H = Σ (n_i / n) · H_i: the first add also scales the first GPU's own H_0 by n_0 / n.
    double self = static_cast<double>(parts[0].samples) / n;
    for (size_t i = 1; i < active_; ++i) {
      const double weight = static_cast<double>(parts[i].samples) / n;
      if (devices_[i] == r.device) {
        scale_add_f32(y, self, parts[i].data, weight, static_cast<int64_t>(count), r.stream);
      } else {
        if (r.slab.size() == 0) r.slab = kernels::cuda::DeviceBuffer<float>(Reducer::kSlabFloats);
        for (size_t offset = 0; offset < count; offset += r.slab.size()) {
          const size_t m = std::min(r.slab.size(), count - offset);
          LOWBIT_CUDA_CHECK(cudaMemcpyPeerAsync(r.slab.data(), r.device, parts[i].data + offset,
                                                devices_[i], m * sizeof(float), r.stream));
          scale_add_f32(y + offset, self, r.slab.data(), weight, static_cast<int64_t>(m), r.stream);
        }
      }
      self = 1.0;
    }
    // Before the next role's finalizations and before GPTQ reads it on the first GPU's stream.
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(r.stream));
  }
}

GptqResult MultiGpuCalibrationBackend::gptq(std::vector<float>& w, int64_t rows, int64_t cols,
                                            LinearRole input, const QuantArgs& args,
                                            const GptqOptions& options, DType compute) {
  return backends_[0]->gptq(w, rows, cols, input, args, options, compute);
}

GptqResult MultiGpuCalibrationBackend::gptq_linear(models::Linear& linear, LinearRole input,
                                                   const QuantArgs& args,
                                                   const GptqOptions& options, DType compute) {
  GptqResult r = backends_[0]->gptq_linear(linear, input, args, options, compute);
  // The first GPU's copy was updated in place (bf16 fast path) or will be uploaded again (the
  // tensor was replaced); the others hold the weight from before GPTQ.
  for (size_t i = 1; i < backends_.size(); ++i) backends_[i]->forget_upload(linear);
  return r;
}

void MultiGpuCalibrationBackend::propagate(int layer) {
  LOWBIT_CHECK_AS(Internal, active_ > 0, "MultiGpuCalibrationBackend: propagate before begin");
  const auto start = Clock::now();
  run_parallel(active_, [&](size_t i) { backends_[i]->propagate(layer); });
  forward_seconds_ += seconds_since(start);
}

double MultiGpuCalibrationBackend::forward_seconds() const { return forward_seconds_; }
double MultiGpuCalibrationBackend::hessian_seconds() const { return hessian_seconds_; }

std::vector<float> MultiGpuCalibrationBackend::download_states(size_t index) const {
  for (size_t i = 0; i < active_; ++i) {
    if (index >= shards_[i].begin && index < shards_[i].end) {
      return backends_[i]->download_states(index - shards_[i].begin);
    }
  }
  throw InvalidArgument("download_states: no sample " + std::to_string(index));
}

std::vector<float> MultiGpuCalibrationBackend::download_hessian(LinearRole input) const {
  LOWBIT_CUDA_CHECK(cudaSetDevice(devices_[0]));
  return backends_[0]->download_hessian(input);
}

std::unique_ptr<quant::CalibrationBackend> make_multi_gpu_calibration_backend(int gpus) {
  LOWBIT_CHECK(gpus >= 1, "--tensor-parallel-size must be >= 1, got " + std::to_string(gpus));
  ::lowbit::gpu::require_device(0);
  const int visible = ::lowbit::gpu::device_count();
  if (gpus > visible) {
    throw InvalidArgument("--tensor-parallel-size " + std::to_string(gpus) + ": only " +
                          std::to_string(visible) + " CUDA device" +
                          (visible == 1 ? " is" : "s are") + " visible to this process (GPUs 0.." +
                          std::to_string(visible - 1) + ")");
  }
  if (gpus == 1) return make_cuda_calibration_backend(0);
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(d);
  return std::make_unique<MultiGpuCalibrationBackend>(std::move(devices));
}

}  // namespace lowbit::quant::gpu
