// GGUF Q4_0 / Q8_0 projections on the int kernels, as the CLI shows it (quant/methods/gguf.cc):
// `lowbit inspect` counts the modules by type, loading logs the wna16 kernel it selected for them
// (a silent fallback to decoding would log nothing, or dequant), and `lowbit quantize` refuses to
// quantize such a module again. Logits: tests/unit/models/gguf_model_test.cc.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

const std::string kQ4_0 = "tests/golden/gguf/ref-llama-2l-q4_0.gguf";
const std::string kQ8_0 = "tests/golden/gguf/ref-llama-2l-q8_0.gguf";
const std::string kQ4KM = "tests/golden/gguf/ref-llama-2l-q4_k_m.gguf";

TEST(GgufIntKernelsCli, InspectCountsTheModulesOnTheIntKernels) {
  auto r = run_lowbit("inspect " + repo_path(kQ4_0));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("int kernels      Q4_0: 15 module(s) (wna16, W4A16 group 32)"),
            std::string::npos)
      << r.output;
  // llama-quantize's Q4_K_M: output and blk.1.attn_v are Q8_0, blk.1.ffn_down Q6_K.
  r = run_lowbit("inspect " + repo_path(kQ4KM));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("int kernels      Q6_K: 1 module(s) (wna16, 6-bit group 16); "
                          "Q8_0: 2 module(s) (wna16, W8A16 group 32)"),
            std::string::npos)
      << r.output;
}

TEST(GgufIntKernelsCli, LoadingSelectsWna16) {
  for (const std::string& file : {kQ4_0, kQ8_0}) {
    auto r = run_lowbit("generate " + repo_path(file) + " --prompt-ids 0,534,3418 -n 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("Selected wna16_"), std::string::npos) << file << "\n" << r.output;
    EXPECT_NE(r.output.find(" for 15 module(s)"), std::string::npos) << file << "\n" << r.output;
  }
  auto r = run_lowbit("generate " + repo_path(kQ4_0) +
                      " --prompt-ids 0,534,3418 -n 2 --linear-backend dequant");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Selected dequant_"), std::string::npos) << r.output;
}

TEST(GgufIntKernelsCli, QuantizingAnIntModuleAgainIsRefused) {
  auto r = run_lowbit("quantize " + repo_path(kQ8_0) + " --scheme W4A16 -o " +
                      quoted(std::filesystem::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "gguf-requantized"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.layers.0.self_attn.q_proj is already quantized (gguf"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace lowbit::testing
