// Quantization methods as a user meets them: `lowbit methods`, plugins, online quantization, the
// errors for checkpoints a method cannot load.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <map>
#include <regex>
#include <set>

#include "cli_runner.h"
#include "formats/safetensors.h"

namespace lowbit::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = repo_path("models/ref-llama-19m");
const fs::path kPlugin = LOWBIT_EXAMPLE_PLUGIN;

// 4 windows x 511 scored tokens: online int8 / fp8 weights move perplexity by 0.1-0.5% here,
// the 1% bound is about bugs (a wrong scale costs tens of percent), not about noise.
double perplexity_of(const std::string& arguments, int windows = 4) {
  const CliResult r = run_lowbit("ppl " + arguments + " --text " +
                                 quoted(fs::path(repo_path("data/text/heldout.txt"))) +
                                 " --max-windows " + std::to_string(windows) + " --json -t 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.rfind('{');
  return nlohmann::json::parse(r.output.substr(brace)).at("perplexity").get<double>();
}

// The bf16 model's figure, which two tests compare against: measured once.
double bf16_perplexity() {
  static const double ppl = perplexity_of(quoted(kModel));
  return ppl;
}

// One small W4A16 checkpoint for the tests that need a quantized model (RTN: seconds).
const fs::path& w4a16_checkpoint() {
  static const fs::path dir = [] {
    fs::path out = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "methods-w4a16";
    fs::remove_all(out);
    const CliResult r = run_lowbit("quantize " + quoted(kModel) + " -o " + quoted(out) +
                                   " --scheme W4A16 --algo rtn --no-progress -t 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }();
  return dir;
}

TEST(MethodsCommand, ListsEveryBuiltInWithItsMatrix) {
  const CliResult r = run_lowbit("methods --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json methods = nlohmann::json::parse(r.output);
  // A build with the CUDA backend declares the GPU kernels (every method's list is derived from
  // GpuLinear::from's table); one without declares none.
  bool cuda = false;
  for (const auto& m : methods) {
    for (const auto& k : m.at("kernels")) cuda = cuda || k.at("isa") == "cuda";
  }
  std::map<std::string, nlohmann::json> by_name;
  std::set<std::string> names;
  for (const auto& m : methods) {
    by_name[m.at("registered_as").get<std::string>()] = m;
    names.insert(m.at("registered_as").get<std::string>());
    if (m.contains("unsupported")) {
      // Listed for the seed's matrix but runnable nowhere (fp8_vit_attn): no kernel, no "yes".
      EXPECT_TRUE(m.at("kernels").empty()) << m.dump();
      for (const auto& [column, yes] : m.at("support").items()) {
        EXPECT_FALSE(yes.get<bool>()) << column;
      }
      continue;
    }
    // Every method has a portable CPU kernel; no GPU kernel needs less than bf16's sm_80, and
    // there is no AMD GPU backend.
    EXPECT_TRUE(m.at("support").at("x86 CPU").get<bool>()) << m.dump();
    EXPECT_TRUE(m.at("support").at("this machine").get<bool>()) << m.dump();
    EXPECT_FALSE(m.at("support").at("Volta").get<bool>()) << m.dump();
    EXPECT_FALSE(m.at("support").at("Turing").get<bool>()) << m.dump();
    EXPECT_FALSE(m.at("support").at("AMD GPU").get<bool>()) << m.dump();
    if (!cuda) {
      EXPECT_FALSE(m.at("support").at("Hopper").get<bool>()) << m.dump();
    }
    EXPECT_FALSE(m.at("kernels").empty());
  }
  auto gpu_kernels = [&](const std::string& name) {
    std::map<std::string, int> out;  // name -> min capability
    for (const auto& k : by_name.at(name).at("kernels")) {
      if (k.at("isa") == "cuda") out[k.at("name")] = k.at("min_capability").get<int>();
    }
    return out;
  };
  auto yes = [&](const std::string& name, const char* column) {
    return by_name.at(name).at("support").at(column).get<bool>();
  };
  if (cuda) {
    // compressed-tensors: W4A16 / W8A16, INT8 and FP8 W8A8, and bf16 for the rest.
    const std::map<std::string, int> ct = gpu_kernels("compressed-tensors");
    EXPECT_EQ(ct, (std::map<std::string, int>{{"wna16_cuda", 80}, {"w8a8_int8_cuda", 80},
                                              {"w8a8_fp8_cuda", 89}, {"bf16_cuda", 80}}));
    for (const char* column : {"Ampere", "Ada", "Hopper", "Blackwell"}) {
      EXPECT_TRUE(yes("compressed-tensors", column)) << column;
    }
    // bitsandbytes: LLM.int8() as W8A16, 4-bit dequantized in bf16; GGUF Q4_0 / Q8_0 as
    // W4A16 / W8A16, its other types decoded at load.
    EXPECT_EQ(gpu_kernels("bitsandbytes"),
              (std::map<std::string, int>{{"wna16_cuda", 80}, {"bf16_cuda", 80}}));
    EXPECT_EQ(gpu_kernels("gguf"),
              (std::map<std::string, int>{{"wna16_cuda", 80}, {"bf16_cuda", 80}}));
    EXPECT_TRUE(yes("bitsandbytes", "Hopper"));
    // MoE experts only, which the GPU backend does not run.
    EXPECT_FALSE(yes("int8_per_channel_weight_only", "Hopper"));
  } else {
    for (const auto& [name, m] : by_name) {
      for (const char* column : {"Ampere", "Ada", "Hopper", "Blackwell"}) {
        EXPECT_FALSE(yes(name, column)) << name << " " << column;
      }
    }
  }
  for (const char* expected : {"compressed-tensors", "fp8", "fp8_per_tensor", "fp8_per_channel",
                               "fp8_per_block", "int8_per_channel_weight_only", "gptq",
                               "auto_gptq", "gptq_marlin", "awq", "auto_awq", "awq_marlin"}) {
    EXPECT_EQ(names.count(expected), 1u) << expected;
  }
  // Every row of the seed's hardware matrix has a method of its own (compressed-tensors covers
  // llm-compressor's rows, gptq_marlin / awq_marlin Marlin's), and its list's FP8 ViT attention.
  for (const char* expected : {"bitsandbytes", "deepspeedfp", "gguf", "fp8_vit_attn"}) {
    EXPECT_EQ(names.count(expected), 1u) << expected;
  }
  EXPECT_EQ(names.count("my_quant"), 0u);
  const CliResult table = run_lowbit("methods");
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_NE(table.output.find("This machine: "), std::string::npos);
  EXPECT_NE(table.output.find("kernel wna16"), std::string::npos) << table.output;
  // The footer says what the GPU columns mean for this binary.
  if (cuda) {
    EXPECT_NE(table.output.find("This binary holds GPU code for sm_"), std::string::npos)
        << table.output;
    EXPECT_NE(table.output.find("kernel w8a8_fp8_cuda"), std::string::npos) << table.output;
  } else {
    EXPECT_NE(table.output.find("built without the CUDA backend"), std::string::npos)
        << table.output;
  }
  EXPECT_NE(table.output.find("fp8_vit_attn: FP8 attention for ViT encoders"), std::string::npos);
  EXPECT_NE(table.output.find("  not supported: outside a text-only engine"), std::string::npos)
      << table.output;
  // Asking for it fails with that reason (exit 2), before any weight is read.
  const fs::path tiny = repo_path("tests/golden/arch/llama-gqa");
  const CliResult vit = run_lowbit("generate " + quoted(tiny) +
                                   " --quantization fp8_vit_attn --prompt-ids 1,2 --max-tokens 1");
  EXPECT_EQ(vit.exit_code, 2) << vit.output;
  EXPECT_NE(vit.output.find("fp8_vit_attn is not supported by lowbit: outside a text-only engine"),
            std::string::npos)
      << vit.output;
}

TEST(Plugin, RegistersRunsAndCanOverrideABuiltIn) {
  ASSERT_TRUE(fs::exists(kPlugin)) << kPlugin;
  const CliResult listed = run_lowbit("methods --json --plugin " + quoted(kPlugin));
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_NE(listed.output.find("\"my_quant\""), std::string::npos);

  const CliResult gen = run_lowbit("-v generate " + quoted(kModel) +
                                   " --quantization my_quant --plugin " + quoted(kPlugin) +
                                   " --prompt 'Once upon a time' --max-tokens 8 -t 2");
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  EXPECT_NE(gen.output.find("Selected my_quant_naive for model.layers.0.self_attn.q_proj"),
            std::string::npos)
      << gen.output;

  // int8 per-channel weights cost little quality: within 1% of bf16 perplexity, on one window
  // (the plugin's naive loop makes every window cost seconds; the bound is the same per window).
  const double bf16 = perplexity_of(quoted(kModel), 1);
  const CliResult env = run_lowbit("ppl " + quoted(kModel) + " --quantization my_quant --text " +
                                   quoted(fs::path(repo_path("data/text/heldout.txt"))) + " --max-windows 1");
  EXPECT_EQ(env.exit_code, 2) << "without the plugin my_quant is unknown: " << env.output;
  setenv("LOWBIT_PLUGINS", kPlugin.string().c_str(), 1);
  const double plugin = perplexity_of(quoted(kModel) + " --quantization my_quant", 1);
  EXPECT_LT(std::abs(plugin / bf16 - 1.0), 0.01) << plugin << " vs " << bf16;

  // The override: registered under "fp8" too, it replaces the built-in (said at debug level).
  setenv("MY_QUANT_OVERRIDE", "fp8", 1);
  const CliResult over = run_lowbit("-v logits " + quoted(kModel) +
                                    " --quantization fp8 --prompt-ids 1,2,3 -o " +
                                    quoted(fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / "o.st"));
  unsetenv("MY_QUANT_OVERRIDE");
  unsetenv("LOWBIT_PLUGINS");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("quantization method 'fp8' already exists and will be overwritten"),
            std::string::npos)
      << over.output;
  EXPECT_NE(over.output.find("Selected my_quant_naive"), std::string::npos) << over.output;
}

TEST(OnlineQuantization, Fp8StaysWithinOnePercentOfBf16) {
  const double bf16 = bf16_perplexity();
  // deepspeedfp: DeepSpeed's FP8 (e4m3 up to 480) in groups of 512 (measured +0.26%).
  for (const char* method : {"fp8", "fp8_per_channel", "fp8_per_block", "deepspeedfp"}) {
    const double fp8 = perplexity_of(quoted(kModel) + " --quantization " + method);
    EXPECT_LT(std::abs(fp8 / bf16 - 1.0), 0.01) << method << ": " << fp8 << " vs " << bf16;
    EXPECT_NE(fp8, bf16) << method << " changed nothing";
  }
}

TEST(OnlineQuantization, RefusesLayersTheCheckpointAlreadyQuantized) {
  const CliResult r = run_lowbit("generate " + quoted(w4a16_checkpoint()) +
                                 " --quantization fp8 --prompt-ids 1,2 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.layers.0.self_attn.q_proj is already quantized by the "
                          "checkpoint (compressed-tensors)"),
            std::string::npos)
      << r.output;
  const CliResult forced = run_lowbit("generate " + quoted(w4a16_checkpoint()) +
                                      " --linear-backend w8a8 --prompt-ids 1,2 --max-tokens 1");
  EXPECT_EQ(forced.exit_code, 2) << forced.output;
  EXPECT_NE(forced.output.find("--linear-backend w8a8 does not implement"), std::string::npos)
      << forced.output;
}

// A damaged copy of the W4A16 checkpoint: `edit` changes its tensors.
fs::path damaged(const std::string& tag,
                 const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / ("methods-" + tag);
  fs::remove_all(dir);
  fs::copy(w4a16_checkpoint(), dir, fs::copy_options::recursive);
  // Tensors keep their file mapped, so the files can be removed before the new one is written.
  std::map<std::string, Tensor> tensors;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    auto file = formats::SafetensorsFile::open(entry.path().string());
    for (const std::string& name : file->names()) tensors[name] = file->get(name);
    fs::remove(entry.path());
  }
  fs::remove(dir / "model.safetensors.index.json");
  edit(tensors);
  formats::write_safetensors((dir / "model.safetensors").string(), tensors);
  return dir;
}

TEST(BadCheckpoints, ErrorsNameTheTensorAndTheLayer) {
  const std::string packed = "model.layers.1.mlp.down_proj.weight_packed";
  const std::string scale = "model.layers.1.mlp.down_proj.weight_scale";
  struct Bad {
    std::string tag;
    std::function<void(std::map<std::string, Tensor>&)> edit;
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {"missing", [&](auto& t) { t.erase(scale); }, "tensor '" + scale + "' is missing"},
      {"shape",
       [&](auto& t) { t[scale] = t[scale].slice_rows(0, 10); },
       "tensor '" + scale + "' has shape [10, "},
      {"dtype",
       [&](auto& t) { t[packed] = t[packed].to_f32(); },
       "tensor '" + packed + "' has dtype F32"},
  };
  for (const Bad& c : cases) {
    const fs::path dir = damaged(c.tag, c.edit);
    const CliResult r = run_lowbit("generate " + quoted(dir) + " --prompt-ids 1,2 --max-tokens 1");
    EXPECT_EQ(r.exit_code, 2) << c.tag << ": " << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.tag << ": " << r.output;
  }
  // Config errors: unknown method, unparseable scheme.
  const fs::path dir = damaged("config", [](auto&) {});
  std::string config = read_file(dir / "config.json");
  write_file(dir / "config.json", std::regex_replace(config, std::regex("\"compressed-tensors\""),
                                                     "\"bitnet\""));
  CliResult r = run_lowbit("generate " + quoted(dir) + " --prompt-ids 1,2 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("quant_method 'bitnet' is not a known quantization method"),
            std::string::npos)
      << r.output;
  write_file(dir / "config.json",
             std::regex_replace(config, std::regex("\"num_bits\": 4"), "\"num_bits\": \"four\""));
  r = run_lowbit("generate " + quoted(dir) + " --prompt-ids 1,2 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("num_bits"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace lowbit::testing
