// The one-shot peer all-reduce (gpu/peer_all_reduce.h) on two GPUs against the host: the sum of
// the ranks' bf16 values in rank order in fp32, rounded once to bf16, bit for bit on every rank
// (the kernel promises that order, and identical bits on every GPU). Repeated calls exercise both
// staging halves and the call counters; a CUDA graph replayed with new data exercises the device-side
// counting. Skips unless two CUDA devices with peer access are visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <random>
#include <thread>
#include <vector>

#include "core/float_convert.h"
#include "gpu/gpu_model.h"
#include "gpu/peer_all_reduce.h"
#include "kernels/cuda/device_buffer.h"

namespace lowbit::gpu {
namespace {

struct RankState {
  cudaStream_t stream = nullptr;
  kernels::cuda::DeviceBuffer<uint16_t> data;
};

std::vector<uint16_t> random_bits(int64_t n, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(normal(rng));
  return v;
}

std::vector<uint16_t> expected_sum(const std::vector<std::vector<uint16_t>>& inputs) {
  std::vector<uint16_t> out(inputs[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    float acc = 0.0f;
    for (const auto& in : inputs) acc += bf16_to_f32(in[i]);
    out[i] = f32_to_bf16(acc);
  }
  return out;
}

class PeerAllReduceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
    ar_ = PeerAllReduce::create({0, 1}, kMax);
    if (!ar_) GTEST_SKIP() << "no peer access between devices 0 and 1";
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(r);
      cudaStreamCreateWithFlags(&ranks_[r].stream, cudaStreamNonBlocking);
      ranks_[r].data = kernels::cuda::DeviceBuffer<uint16_t>(static_cast<size_t>(kMax));
    }
  }
  void TearDown() override {
    for (int r = 0; r < 2; ++r) {
      if (ranks_[r].stream != nullptr) cudaStreamDestroy(ranks_[r].stream);
    }
  }
  // Uploads each rank's input, runs `body(rank)` on one thread per rank, downloads the results.
  std::vector<std::vector<uint16_t>> run(const std::vector<std::vector<uint16_t>>& inputs,
                                         const std::function<void(int)>& body) {
    std::vector<std::vector<uint16_t>> out(2);
    auto rank = [&](int r) {
      cudaSetDevice(r);
      cudaMemcpy(ranks_[r].data.data(), inputs[r].data(), inputs[r].size() * 2, cudaMemcpyHostToDevice);
      body(r);
      out[r].resize(inputs[r].size());
      cudaMemcpyAsync(out[r].data(), ranks_[r].data.data(), inputs[r].size() * 2,
                      cudaMemcpyDeviceToHost, ranks_[r].stream);
      cudaStreamSynchronize(ranks_[r].stream);
    };
    std::thread other(rank, 1);
    rank(0);
    other.join();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return out;
  }

  static constexpr int64_t kMax = 64 * 4096;
  std::unique_ptr<PeerAllReduce> ar_;
  RankState ranks_[2];
};

TEST_F(PeerAllReduceTest, SumsInRankOrderIdenticallyOnEveryRank) {
  // One row of a small and a large hidden size, a chunk of rows, the largest accepted size;
  // each size twice (both staging halves).
  int seed = 0;
  for (int64_t count : {int64_t{8}, int64_t{4096}, int64_t{8192}, int64_t{16 * 4096}, kMax, int64_t{8}}) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      const std::vector<std::vector<uint16_t>> in = {random_bits(count, ++seed), random_bits(count, ++seed)};
      const auto out = run(in, [&](int r) {
        ar_->run(r, ranks_[r].data.data(), count, ranks_[r].stream);
      });
      const std::vector<uint16_t> want = expected_sum(in);
      EXPECT_EQ(out[0], want) << "count " << count;
      EXPECT_EQ(out[1], want) << "count " << count;
    }
  }
  EXPECT_FALSE(ar_->accepts(kMax + 8));
  EXPECT_FALSE(ar_->accepts(12));  // not a multiple of 8
}

TEST_F(PeerAllReduceTest, CountsCallsInsideReplayedGraphs) {
  constexpr int64_t kCount = 4096;
  cudaGraphExec_t exec[2] = {nullptr, nullptr};
  // Capture two calls per graph on each rank (no data moves during capture).
  run({random_bits(kCount, 1), random_bits(kCount, 2)}, [&](int r) {
    cudaGraph_t graph = nullptr;
    cudaStreamBeginCapture(ranks_[r].stream, cudaStreamCaptureModeThreadLocal);
    ar_->run(r, ranks_[r].data.data(), kCount, ranks_[r].stream);
    ar_->run(r, ranks_[r].data.data(), kCount, ranks_[r].stream);
    cudaStreamEndCapture(ranks_[r].stream, &graph);
    cudaGraphInstantiate(&exec[r], graph, 0);
    cudaGraphDestroy(graph);
  });
  for (int replay = 0; replay < 3; ++replay) {
    const std::vector<std::vector<uint16_t>> in = {random_bits(kCount, 10 + replay),
                                                   random_bits(kCount, 20 + replay)};
    const auto out = run(in, [&](int r) { cudaGraphLaunch(exec[r], ranks_[r].stream); });
    // Twice: the first call sums the inputs (a + b), the second sums that result on both ranks.
    const std::vector<uint16_t> once = expected_sum(in);
    const std::vector<uint16_t> twice = expected_sum({once, once});
    EXPECT_EQ(out[0], twice) << "replay " << replay;
    EXPECT_EQ(out[1], twice) << "replay " << replay;
  }
  for (auto* e : exec) {
    if (e != nullptr) cudaGraphExecDestroy(e);
  }
}

}  // namespace
}  // namespace lowbit::gpu
