// `lowbit recommend` as a user runs it: the recipes in text and JSON, refusals, --gpu auto through
// nvidia-smi, --compare, and the exit code 2 with the flag named for bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

namespace fs = std::filesystem;

nlohmann::json json_of(const CliResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  if (brace == std::string::npos) return nullptr;
  return nlohmann::json::parse(r.output.substr(brace));
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A directory holding a fake nvidia-smi that prints `output` and exits with `code`.
fs::path fake_nvidia_smi(const std::string& tag, const std::string& output, int code) {
  const fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / ("recommend-" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_file(dir / "nvidia-smi", "#!/bin/sh\nprintf '" + output + "'\nexit " +
                                     std::to_string(code) + "\n");
  fs::permissions(dir / "nvidia-smi", fs::perms::owner_all);
  return dir;
}

TEST(RecommendCommand, SeventyBOnOneH100) {
  const nlohmann::json j = json_of(run_lowbit("recommend --gpu H100 --model-params 70B --json"));
  EXPECT_EQ(j["scheme"], "W4A16");
  EXPECT_EQ(j["algo"], "awq");
  EXPECT_EQ(j["kv_cache"], "fp8");
  EXPECT_EQ(j["branch"], "hopper-ada");
  EXPECT_TRUE(contains(j["commands"]["quantize"].get<std::string>(),
                       "lowbit quantize MODEL_DIR -o MODEL_DIR-W4A16-kvfp8 --scheme W4A16"));
  EXPECT_TRUE(contains(j["commands"]["vllm_serve"].get<std::string>(), "--kv-cache-dtype fp8"));
  // The GPU kernel of a CUDA build, or the reason a CPU-only build has none.
  const std::string on_target = j["lowbit"]["on_target"].get<std::string>();
  EXPECT_TRUE(contains(on_target, "runs it on the H100 with kernel wna16_cuda") ||
              contains(on_target, "built without the CUDA backend"))
      << on_target;
  EXPECT_TRUE(j["model"]["assumed_shape"].get<bool>());

  const CliResult text = run_lowbit("recommend --gpu H100 --model-params 70B");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* part : {"Produce it", "Serve it", "Why (seed 004", "  hardware: ",
                           "  bottleneck: ", "  context: ", "  accuracy: ", "  memory: ",
                           "What the target can compute",
                           "  no:  NVFP4, NVFP4A16, MXFP4, MXFP4A16 - needs the FP4",
                           "What lowbit can run today"}) {
    EXPECT_TRUE(contains(text.output, part)) << part << "\n" << text.output;
  }
}

TEST(RecommendCommand, SeedRecipesFromTheCommandLine) {
  EXPECT_EQ(json_of(run_lowbit("recommend --gpu H100 --num-gpus 8 --model-params 8B --json"))
                ["scheme"],
            "FP8_DYNAMIC");
  const nlohmann::json doc = json_of(run_lowbit(
      "recommend --gpu B200 --model-params 8B --workload long-context --context 131072 --json"));
  EXPECT_EQ(doc["scheme"], "NVFP4");
  EXPECT_EQ(doc["kv_cache"], "fp8");
  EXPECT_EQ(json_of(run_lowbit("recommend --gpu GB300 --num-gpus 72 --model-params 405B "
                               "--workload batch --json"))["scheme"],
            "NVFP4");
}

TEST(RecommendCommand, RefusesWhatTheGpuCannotCompute) {
  const nlohmann::json hopper =
      json_of(run_lowbit("recommend --gpu H100 --model-params 8B --scheme NVFP4 --json"));
  EXPECT_FALSE(hopper["requested"]["runs"].get<bool>());
  EXPECT_TRUE(contains(hopper["requested"]["reason"].get<std::string>(), "Blackwell"));
  EXPECT_NE(hopper["scheme"], "NVFP4");
  const nlohmann::json ampere =
      json_of(run_lowbit("recommend --gpu A100 --model-params 8B --scheme FP8_DYNAMIC --json"));
  EXPECT_FALSE(ampere["requested"]["runs"].get<bool>());
  EXPECT_TRUE(contains(ampere["requested"]["reason"].get<std::string>(), "FP8 tensor cores"));
  EXPECT_NE(ampere["scheme"], "FP8_DYNAMIC");
  const CliResult text = run_lowbit("recommend --gpu A100 --model-params 8B --scheme FP8_DYNAMIC");
  EXPECT_TRUE(contains(text.output, "Requested scheme FP8_DYNAMIC: refused: FP8 W8A8 needs FP8 "
                                    "tensor cores"))
      << text.output;
}

// Puts `dir` first on PATH for the lowbit processes started while it lives.
class PathPrefix {
 public:
  explicit PathPrefix(const fs::path& dir) : old_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    setenv("PATH", (dir.string() + ":" + old_).c_str(), 1);
  }
  ~PathPrefix() { setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

TEST(RecommendCommand, AutoDetectsGpusThroughNvidiaSmi) {
  {
    PathPrefix path(fake_nvidia_smi(
        "two-h100", "NVIDIA H100 80GB HBM3, 81559, 9.0\\nNVIDIA H100 80GB HBM3, 81559, 9.0\\n",
        0));
    const nlohmann::json j = json_of(run_lowbit("recommend --gpu auto --model-params 8B --json"));
    EXPECT_TRUE(contains(j["target"].get<std::string>(), "2 x NVIDIA H100 (Hopper, sm_90"))
        << j["target"];
    EXPECT_EQ(j["branch"], "hopper-ada");
    EXPECT_EQ(j["memory"]["replicas"], 2);
  }
  {
    PathPrefix path(fake_nvidia_smi("failing", "NVIDIA-SMI has failed\\n", 9));
    const nlohmann::json j = json_of(run_lowbit("recommend --gpu auto --model-params 8B --json"));
    EXPECT_EQ(j["branch"], "cpu");
    EXPECT_TRUE(contains(j["assumptions"][0].get<std::string>(), "no GPU found"))
        << j["assumptions"];
  }
}

TEST(RecommendCommand, CountsAModelDirectoryLikeInspect) {
  const std::string model = quoted(fs::path(repo_path("models/ref-llama-19m")));
  const nlohmann::json j =
      json_of(run_lowbit("recommend --gpu none --model-params " + model + " --json"));
  const CliResult inspect = run_lowbit("inspect " + model);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  const std::string count = std::to_string(j["model"]["params"].get<int64_t>());
  EXPECT_TRUE(contains(inspect.output, "(" + count + ")")) << count << "\n" << inspect.output;
  EXPECT_FALSE(j["model"]["assumed_shape"].get<bool>());
  EXPECT_EQ(j["branch"], "cpu");
}

TEST(RecommendCommand, ComparePicksByMeasurement) {
  const fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "recommend-compare";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // lowbit-compare/1 by hand: baseline ppl 10, delta_ppl = ppl / 10 - 1.
  write_file(dir / "compare.json", R"({
    "format": "lowbit-compare/1", "model": "models/ref-llama-19m",
    "created": "2026-11-29T18:30:00Z",
    "protocol": {"ppl_text": "data/text/heldout.txt", "ctx": 512},
    "baseline": {"name": "BF16", "size_bytes": 37761792, "bits_per_weight": 16, "ppl": 10.0},
    "schemes": [
      {"scheme": "FP8_DYNAMIC", "algo": "rtn", "size_bytes": 20000000, "bits_per_weight": 8,
       "ppl": 10.05, "delta_ppl": 0.005, "kld_mean": 0.003},
      {"scheme": "W4A16", "algo": "gptq", "size_bytes": 12000000, "bits_per_weight": 4.125,
       "ppl": 10.2, "delta_ppl": 0.02, "kld_mean": 0.02}
    ]})");
  const std::string compare = " --compare " + quoted(dir / "compare.json");
  const nlohmann::json balanced =
      json_of(run_lowbit("recommend --gpu H100 --model-params 8B --json" + compare));
  EXPECT_EQ(balanced["scheme"], "W4A16");
  EXPECT_EQ(balanced["algo"], "gptq");
  EXPECT_EQ(balanced["measured"]["chosen"], "W4A16");
  const nlohmann::json strict = json_of(
      run_lowbit("recommend --gpu H100 --model-params 8B --accuracy strict --json" + compare));
  EXPECT_EQ(strict["scheme"], "FP8_DYNAMIC");  // +2% is over strict's 1%

  write_file(dir / "bad.json", R"({"format": "lowbit-compare/1"})");
  const CliResult bad = run_lowbit("recommend --gpu H100 --model-params 8B --compare " +
                                   quoted(dir / "bad.json"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "bad.json")) << bad.output;
}

TEST(RecommendCommand, BadInputExitsTwoNamingTheFlag) {
  const CliResult gpu = run_lowbit("recommend --gpu H999 --model-params 8B");
  EXPECT_EQ(gpu.exit_code, 2) << gpu.output;
  for (const char* part : {"--gpu", "H999", "H100", "A100", "L40S", "GB300", "MI300X"}) {
    EXPECT_TRUE(contains(gpu.output, part)) << part << "\n" << gpu.output;
  }
  for (const char* params : {"70X", "abc", "-5B"}) {
    const CliResult r = run_lowbit(std::string("recommend --gpu H100 --model-params ") + params);
    EXPECT_EQ(r.exit_code, 2) << params << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "--model-params")) << r.output;
  }
  const CliResult missing = run_lowbit("recommend --gpu H100");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, "--model-params")) << missing.output;
  const CliResult workload = run_lowbit("recommend --gpu H100 --model-params 8B --workload rag");
  EXPECT_EQ(workload.exit_code, 2) << workload.output;
  EXPECT_TRUE(contains(workload.output, "--workload")) << workload.output;
  const CliResult scheme = run_lowbit("recommend --gpu H100 --model-params 8B --scheme W9A9");
  EXPECT_EQ(scheme.exit_code, 2) << scheme.output;
  EXPECT_TRUE(contains(scheme.output, "--scheme")) << scheme.output;
}

}  // namespace
}  // namespace lowbit::testing
