// `lowbit quantize --device cuda` in every build: with the CUDA backend and a GPU it quantizes;
// otherwise it fails with exit code 2 and one line saying why (a build without the backend, or no
// usable device), never an internal error, and writes nothing. The GPU results themselves are
// checked by tests/unit/quant_gpu (lowbit_quant_gpu_tests).
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

namespace fs = std::filesystem;

fs::path scratch_out(const std::string& name) {
  fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "quantize-device" / name;
  fs::remove_all(dir);
  fs::remove_all(dir.string() + ".tmp");
  fs::create_directories(dir.parent_path());
  return dir;
}

std::string gptq_args(const fs::path& out, const std::string& scheme) {
  return "quantize " + quoted(fs::path(repo_path("models/ref-llama-19m"))) + " -o " + quoted(out) +
         " --scheme " + scheme + " --algo gptq --dataset " +
         quoted(fs::path(repo_path("data/text/calibration.txt"))) +
         " --num-samples 4 --seq-len 64 --no-progress";
}

bool says_no_gpu(const std::string& output) {
  const bool no_backend = output.find("built without the CUDA backend") != std::string::npos;
  const bool no_device = output.find("no CUDA device") != std::string::npos;
  return (no_backend || no_device) && output.find("--device cuda") != std::string::npos;
}

TEST(QuantizeDeviceCliTest, CudaQuantizesOrFailsClearly) {
  const fs::path out = scratch_out("w4a16");
  const CliResult r = run_lowbit(gptq_args(out, "W4A16") + " --device cuda");
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  if (r.exit_code == 0) {
    EXPECT_TRUE(fs::exists(out / "config.json")) << r.output;
    return;
  }
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(says_no_gpu(r.output)) << r.output;
  EXPECT_FALSE(fs::exists(out)) << r.output;
  EXPECT_FALSE(fs::exists(out.string() + ".tmp")) << r.output;
}

TEST(QuantizeDeviceCliTest, WhatTheGpuCannotRunIsRefusedBeforeAnyWork) {
  // Static FP8 input scales need range observers: refused on the GPU (or, without one, the
  // missing device is what is reported), exit code 2 either way, nothing written.
  const fs::path out = scratch_out("fp8-static");
  const CliResult r = run_lowbit(gptq_args(out, "FP8") + " --device cuda");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const bool refused = r.output.find("static input activation scales") != std::string::npos &&
                       r.output.find("--device cpu") != std::string::npos;
  EXPECT_TRUE(refused || says_no_gpu(r.output)) << r.output;
  EXPECT_FALSE(fs::exists(out.string() + ".tmp")) << r.output;
}

TEST(QuantizeDeviceCliTest, SeveralGpusNeedCudaAndThatManyGpus) {
  // --tp above 1 splits the calibration over GPUs: on the cpu it is refused, naming the fix.
  const fs::path cpu_out = scratch_out("tp2-cpu");
  const CliResult cpu = run_lowbit(gptq_args(cpu_out, "W4A16") + " --device cpu --tp 2");
  EXPECT_EQ(cpu.exit_code, 2) << cpu.output;
  EXPECT_NE(cpu.output.find("add --device cuda"), std::string::npos) << cpu.output;
  EXPECT_FALSE(fs::exists(cpu_out)) << cpu.output;
  // More GPUs than any machine here has: refused saying how many are visible (or that there is
  // no GPU / no CUDA backend at all), before anything is written.
  const fs::path many_out = scratch_out("tp64");
  const CliResult many = run_lowbit(gptq_args(many_out, "W4A16") + " --device cuda --tp 64");
  EXPECT_EQ(many.exit_code, 2) << many.output;
  const bool says_count =
      many.output.find("--tensor-parallel-size 64: only") != std::string::npos &&
      many.output.find("visible") != std::string::npos;
  EXPECT_TRUE(says_count || says_no_gpu(many.output)) << many.output;
  EXPECT_FALSE(fs::exists(many_out.string() + ".tmp")) << many.output;
  // Two GPUs: quantizes where there are two, otherwise fails clearly (one GPU: the count).
  const fs::path two_out = scratch_out("tp2-cuda");
  const CliResult two = run_lowbit(gptq_args(two_out, "W4A16") + " --device cuda --tp 2");
  EXPECT_EQ(two.output.find("internal error"), std::string::npos) << two.output;
  if (two.exit_code == 0) {
    EXPECT_TRUE(fs::exists(two_out / "config.json")) << two.output;
  } else {
    EXPECT_EQ(two.exit_code, 2) << two.output;
    EXPECT_TRUE(says_no_gpu(two.output) ||
                two.output.find("only 1 CUDA device is visible") != std::string::npos)
        << two.output;
  }
}

TEST(QuantizeDeviceCliTest, CpuIsTheDefault) {
  const CliResult help = run_lowbit("quantize --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--device"), std::string::npos) << help.output;
  const CliResult bad = run_lowbit(gptq_args(scratch_out("tpu"), "W4A16") + " --device tpu");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--device"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace lowbit::testing
