// `lowbit quantize` as a user runs it: bad input gives one clear error, exit code 2 and no output
// directory; a run killed with SIGKILL in the middle of GPTQ and resumed with --resume writes the
// same checkpoint, byte for byte, as a run that was never interrupted.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = repo_path("models/ref-llama-19m");
const fs::path kCalibration = repo_path("data/text/calibration.txt");

fs::path scratch_dir(const std::string& name) {
  fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "quantize" / name;
  fs::remove_all(dir);
  fs::remove_all(dir.string() + ".tmp");
  fs::create_directories(dir.parent_path());
  return dir;
}

// One error line naming `mentions`, exit code 2, and nothing written at `out`.
void expect_refused(const std::string& args, const fs::path& out,
                    const std::vector<std::string>& mentions) {
  const CliResult r = run_lowbit("quantize " + args + " --no-progress");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const std::string& m : mentions) EXPECT_NE(r.output.find(m), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out.string() + ".tmp")) << r.output;
}

TEST(QuantizeCliTest, UnknownScheme) {
  const fs::path out = scratch_dir("unknown-scheme");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --scheme W5A3 --algo rtn", out, {"W5A3"});
  EXPECT_FALSE(fs::exists(out));
}

TEST(QuantizeCliTest, UnknownModifierInRecipe) {
  const fs::path out = scratch_dir("unknown-modifier");
  const fs::path recipe = out.string() + "-recipe.yaml";
  write_file(recipe, "default_stage:\n  default_modifiers:\n    SparseGPTModifier:\n      sparsity: 0.5\n");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --recipe " + quoted(recipe), out,
                 {"SparseGPTModifier", recipe.filename().string()});
}

TEST(QuantizeCliTest, RecipeWithWrongType) {
  const fs::path out = scratch_dir("wrong-type");
  const fs::path recipe = out.string() + "-recipe.yaml";
  write_file(recipe, "default_stage:\n  default_modifiers:\n    GPTQModifier:\n      scheme: W4A16\n"
                     "      targets: [Linear]\n      block_size: abc\n");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --recipe " + quoted(recipe), out,
                 {"block_size"});
}

TEST(QuantizeCliTest, TargetsThatMatchNothing) {
  const fs::path out = scratch_dir("no-match");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --algo rtn --targets 're:.*nothing$'", out,
                 {"re:.*nothing$"});
}

// `--ignore ""` on a tied model: nothing ignored, lm_head untied and quantized (the checkpoint
// itself is compared with llm-compressor's in LlmCompressorRtnTest.TiedLmHead); the recipe says
// `ignore: []` as llm-compressor's does, and the result loads and generates.
TEST(QuantizeCliTest, EmptyIgnoreQuantizesATiedLmHead) {
  const fs::path out = scratch_dir("tied-head");
  const fs::path tied = repo_path("tests/golden/arch/llama3-ropescaled-tied");
  CliResult r = run_lowbit("quantize " + quoted(tied) + " -o " + quoted(out) +
                           " --scheme W4A16 --algo rtn --ignore '' --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("untying it"), std::string::npos) << r.output;
  std::ifstream recipe(out / "recipe.yaml");
  const std::string text((std::istreambuf_iterator<char>(recipe)), {});
  EXPECT_NE(text.find("ignore: []"), std::string::npos) << text;
  std::ifstream config(out / "config.json");
  EXPECT_EQ(nlohmann::json::parse(config).at("tie_word_embeddings"), false);
  r = run_lowbit("generate " + quoted(out) + " --prompt-ids 1,2,3 -n 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(QuantizeCliTest, GroupSizeNotDividingTheInputDim) {
  const fs::path out = scratch_dir("group-size");
  const fs::path recipe = out.string() + "-recipe.yaml";
  // 384 and 1024 input features: 100 divides neither.
  write_file(recipe, "default_stage:\n  default_modifiers:\n    QuantizationModifier:\n"
                     "      ignore: [lm_head]\n      config_groups:\n        group_0:\n"
                     "          targets: [Linear]\n          weights: {num_bits: 4, type: int, "
                     "symmetric: true, strategy: group, group_size: 100}\n");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --recipe " + quoted(recipe), out,
                 {"group_size 100", "model.layers.0.self_attn.q_proj"});
}

TEST(QuantizeCliTest, MseObserverOnStaticInputs) {
  const fs::path out = scratch_dir("input-observer");
  const fs::path recipe = out.string() + "-recipe.yaml";
  write_file(recipe, "default_stage:\n  default_modifiers:\n    QuantizationModifier:\n"
                     "      ignore: [lm_head]\n      config_groups:\n        group_0:\n"
                     "          targets: [Linear]\n          weights: {num_bits: 8, type: int, "
                     "symmetric: true, strategy: channel}\n          input_activations: {num_bits: 8, "
                     "type: int, symmetric: true, strategy: tensor, dynamic: false, observer: mse}\n");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --recipe " + quoted(recipe) +
                     " --dataset " + quoted(kCalibration) + " --num-samples 2 --seq-len 64",
                 out, {"group_0", "observer 'mse'"});
}

TEST(QuantizeCliTest, EmptyAndTooShortCalibrationData) {
  const fs::path out = scratch_dir("calibration");
  const fs::path empty = out.string() + "-empty.txt";
  write_file(empty, "");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --algo gptq --dataset " + quoted(empty),
                 out, {empty.filename().string()});
  const fs::path tiny = out.string() + "-tiny.txt";
  write_file(tiny, "A few words only.");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --algo gptq --seq-len 512 --dataset " +
                     quoted(tiny),
                 out, {tiny.filename().string(), "--seq-len"});
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --algo gptq", out, {"--dataset"});
}

TEST(QuantizeCliTest, OutputInsideTheInput) {
  const fs::path model = scratch_copy("models/ref-llama-19m", "quantize-input");
  const fs::path out = model / "quantized";
  expect_refused(quoted(model) + " -o " + quoted(out) + " --algo rtn", out, {"inside the input"});
  EXPECT_FALSE(fs::exists(out));
}

TEST(QuantizeCliTest, NonEmptyOutputNeedsOverwrite) {
  const fs::path out = scratch_dir("non-empty");
  fs::create_directories(out);
  write_file(out / "keep.txt", "mine");
  expect_refused(quoted(kModel) + " -o " + quoted(out) + " --algo rtn", out, {"--overwrite"});
  EXPECT_EQ(read_file(out / "keep.txt"), "mine");
  const CliResult r = run_lowbit("quantize " + quoted(kModel) + " -o " + quoted(out) +
                                 " --algo rtn --overwrite --no-progress");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out / "keep.txt"));
  EXPECT_TRUE(fs::exists(out / "config.json"));
}

std::map<std::string, std::string> directory_contents(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_file(e.path());
  }
  return files;
}

int layers_done(const fs::path& progress) {
  try {
    std::ifstream in(progress);
    return nlohmann::json::parse(in).value("layers_done", 0);
  } catch (const std::exception&) {
    return 0;  // not written yet, or being replaced
  }
}

TEST(QuantizeCliTest, KilledGptqRunResumesToTheSameBytes) {
  // 16 × 256 tokens (4096, four times down_proj's 1024 inputs, so every Hessian is well posed):
  // the bytes must match whatever the calibration set, and a layer still takes far longer than
  // the 20 ms between two looks at the progress file below.
  const std::string args = " --scheme W4A16 --algo gptq --dataset " + quoted(kCalibration) +
                           " --num-samples 16 --seq-len 256 --no-progress --threads 2";
  const fs::path reference = scratch_dir("resume-reference");
  CliResult r = run_lowbit("quantize " + quoted(kModel) + " -o " + quoted(reference) + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const fs::path out = scratch_dir("resume-killed");
  const fs::path pid_file = out.string() + ".pid";
  const std::string background = std::string(LOWBIT_BIN) + " quantize " + quoted(kModel) + " -o " +
                                 quoted(out) + args + " > /dev/null 2>&1 & echo $! > " +
                                 quoted(pid_file);
  ASSERT_EQ(std::system(background.c_str()), 0);
  const fs::path progress = out.string() + ".tmp/.lowbit-resume/progress.json";
  // Kill it once at least two of the eight layers are saved (the run takes several seconds).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (layers_done(progress) < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const pid_t pid = std::stoi(read_file(pid_file));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int saved = layers_done(progress);
  ASSERT_GE(saved, 2);
  ASSERT_LT(saved, 8) << "the run finished before it could be killed";
  ASSERT_FALSE(fs::exists(out)) << "a killed run must not leave an output directory";

  // Without --resume the leftover is refused, not silently overwritten.
  r = run_lowbit("quantize " + quoted(kModel) + " -o " + quoted(out) + args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--resume"), std::string::npos) << r.output;

  r = run_lowbit("quantize " + quoted(kModel) + " -o " + quoted(out) + args + " --resume --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"resumed_layers\": " + std::to_string(saved)), std::string::npos)
      << r.output;
  EXPECT_EQ(directory_contents(out), directory_contents(reference));
}

}  // namespace
}  // namespace lowbit::testing
