// --device on generate, ppl and bench. The same test runs in every build: with the CUDA backend and
// a GPU the command works; otherwise it fails with exit code 2 and one line saying why (a build
// without the backend, or no usable device), never an internal error. The GPU results themselves
// are checked by tests/unit/gpu (lowbit_gpu_tests).
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

const char* kModel = "models/ref-llama-19m";

void expect_runs_or_says_why(const CliResult& r) {
  if (r.exit_code == 0) return;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const bool no_backend = r.output.find("built without the CUDA backend") != std::string::npos;
  const bool no_device = r.output.find("no CUDA device") != std::string::npos ||
                         r.output.find("does not exist") != std::string::npos;  // --tp > GPUs
  EXPECT_TRUE(no_backend || no_device) << r.output;
  EXPECT_NE(r.output.find("--device cuda"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

TEST(CliDeviceTest, CudaRunsOrFailsClearly) {
  auto r = run_lowbit(std::string("generate ") + kModel +
                      " --prompt-ids 0,44,470 -n 2 --ignore-eos --output-ids --device cuda");
  expect_runs_or_says_why(r);
  if (r.exit_code == 0) {
    EXPECT_NE(r.output.find('['), std::string::npos) << r.output;
  }
  expect_runs_or_says_why(run_lowbit(std::string("ppl ") + kModel + " --text " +
                                     repo_path("data/text/heldout.txt") +
                                     " --max-windows 1 --ctx 64 --json --device cuda"));
  expect_runs_or_says_why(run_lowbit(std::string("bench ") + kModel +
                                     " --prompt-tokens 16 --decode-tokens 4 --repeats 1 --json "
                                     "--device cuda"));
}

TEST(CliDeviceTest, CpuIsTheDefaultAndUnknownDevicesAreRejected) {
  const auto cpu = run_lowbit(std::string("generate ") + kModel +
                              " --prompt-ids 0,44,470 -n 2 --ignore-eos --output-ids --device cpu");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
  const auto plain = run_lowbit(std::string("generate ") + kModel +
                                " --prompt-ids 0,44,470 -n 2 --ignore-eos --output-ids");
  EXPECT_EQ(plain.output, cpu.output);
  const auto bad = run_lowbit(std::string("generate ") + kModel + " --prompt-ids 0 --device tpu");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--device"), std::string::npos) << bad.output;
}

TEST(CliDeviceTest, TensorParallelismNeedsTheGpuAndRandomWeightsTheGpu) {
  // --tensor-parallel-size splits a model over GPUs: on the CPU it is a usage error, not ignored.
  const std::string text = repo_path("data/text/heldout.txt");
  for (const std::string command : {"generate", "ppl", "bench", "serve"}) {
    const std::string input = command == "generate" ? " --prompt-ids 0"
                              : command == "ppl"     ? " --text " + text
                                                     : "";
    const auto r = run_lowbit(command + " " + kModel + input + " --tp 2");
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.output;
    EXPECT_NE(r.output.find("add --device cuda"), std::string::npos) << command << ": " << r.output;
  }
  const auto random = run_lowbit(std::string("bench ") + kModel + " --random-weights");
  EXPECT_EQ(random.exit_code, 2) << random.output;
  EXPECT_NE(random.output.find("--random-weights"), std::string::npos) << random.output;
  // On the GPU, a build without the backend or a machine without GPUs says why.
  expect_runs_or_says_why(run_lowbit(std::string("bench ") + kModel +
                                     " --prompt-tokens 16 --decode-tokens 4 --repeats 1 --json "
                                     "--device cuda --tp 2 --random-weights"));
}

}  // namespace
}  // namespace lowbit::testing
