// The method registry and checkpoint/online resolution: names, overrides, errors, and the
// hardware check that refuses a method no kernel of this machine can run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/log.h"
#include "lowbit/error.h"
#include "lowbit/quant_method.h"
#include "quant/methods/resolve.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;

// A method whose only kernel needs a Hopper GPU.
class HopperOnly : public QuantizationConfig {
 public:
  static std::unique_ptr<QuantizationConfig> from_config(const nlohmann::json&, const std::string&) {
    return std::make_unique<HopperOnly>();
  }
  static MethodDescription description() {
    MethodDescription d;
    d.name = "test_hopper_only";
    d.min_capability = 90;
    KernelSpec k;
    k.name = "hopper_kernel";
    k.isa = KernelSpec::Isa::Cuda;
    k.min_capability = 90;
    d.kernels = {k};
    d.online = true;
    return d;
  }
  MethodDescription describe() const override { return description(); }
  std::unique_ptr<LinearMethod> get_quant_method(const LayerInfo&) const override {
    return nullptr;
  }
};
LOWBIT_REGISTER_QUANTIZATION_CONFIG(HopperOnly, "test_hopper_only");

fs::path model_dir(const std::string& name, const std::string& config_json,
                   const std::string& extra_file = "", const std::string& extra = "") {
  fs::path dir = fs::temp_directory_path() / ("lowbit-registry-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json;
  if (!extra_file.empty()) std::ofstream(dir / extra_file) << extra;
  return dir;
}

TEST(Registry, BuiltInsAreRegisteredWithDescriptions) {
  for (const char* name : {"compressed-tensors", "fp8", "fp8_per_tensor", "fp8_per_channel",
                           "fp8_per_block", "int8_per_channel_weight_only"}) {
    ASSERT_TRUE(is_registered_quantization(name)) << name;
    const MethodDescription d = describe_quantization(name);
    EXPECT_EQ(d.name, name);
    EXPECT_FALSE(d.kernels.empty()) << name;
  }
  EXPECT_TRUE(describe_quantization("int8_per_channel_weight_only").moe_only);
  EXPECT_THROW(describe_quantization("no_such_method"), Unsupported);
}

TEST(Registry, ReRegisteringReplacesTheMethod) {
  register_quantization_config("test_override", &HopperOnly::from_config, &HopperOnly::description);
  EXPECT_EQ(describe_quantization("test_override").name, "test_hopper_only");
  auto other = [] {
    MethodDescription d;
    d.name = "replacement";
    return d;
  };
  register_quantization_config("test_override", &HopperOnly::from_config, other);
  EXPECT_EQ(describe_quantization("test_override").name, "replacement");
}

TEST(Registry, GetFromKeys) {
  const nlohmann::json j = {{"bits", 4}, {"w_bit", 8}};
  EXPECT_EQ(get_from_keys(j, {"wbits", "bits"}, "cfg").get<int>(), 4);
  EXPECT_EQ(get_from_keys(j, {"w_bit", "bits"}, "cfg").get<int>(), 8);
  EXPECT_EQ(get_from_keys_or(j, {"group_size"}, 128).get<int>(), 128);
  try {
    get_from_keys(j, {"group_size", "q_group_size"}, "DIR/quantize_config.json");
    FAIL() << "no key present";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'group_size', 'q_group_size'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("DIR/quantize_config.json"), std::string::npos);
  }
}

TEST(Hardware, MethodWithOnlyHopperKernelsIsRefusedOnACpu) {
  Platform cpu;
  cpu.x86 = cpu.avx2 = cpu.avx512 = true;
  try {
    require_supported(HopperOnly::description(), cpu);
    FAIL() << "a CPU cannot run a Hopper kernel";
  } catch (const Unsupported& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test_hopper_only"), std::string::npos) << m;
    EXPECT_NE(m.find("minimum compute capability 9.0"), std::string::npos) << m;
    EXPECT_NE(m.find("needs a CUDA GPU with compute capability >= 9.0"), std::string::npos) << m;
  }
  Platform hopper;
  hopper.cuda_capability = 90;
  EXPECT_NO_THROW(require_supported(HopperOnly::description(), hopper));
  Platform ampere;
  ampere.cuda_capability = 80;
  EXPECT_THROW(require_supported(HopperOnly::description(), ampere), Unsupported);
  // Built-ins have portable CPU kernels.
  EXPECT_NO_THROW(require_supported(describe_quantization("compressed-tensors"), cpu));
}

TEST(Resolve, AskingForAHopperOnlyMethodHereFailsClearly) {
  if (Platform::current().cuda_capability >= 90) GTEST_SKIP() << "this machine has a Hopper GPU";
  const fs::path dir = model_dir("hopper", "{}");
  EXPECT_THROW(resolve_quantization(dir.string(), "", "cfg", {"test_hopper_only"}), Unsupported);
}

TEST(Resolve, CheckpointMethodFirstThenOnline) {
  const fs::path dir = model_dir("plain", "{}");
  ResolvedQuantization none = resolve_quantization(dir.string(), "", "cfg", {});
  EXPECT_EQ(none.config, nullptr);
  EXPECT_EQ(none.describe(), "none (unquantized)");

  ResolvedQuantization online = resolve_quantization(dir.string(), "", "cfg", {"fp8"});
  ASSERT_NE(online.config, nullptr);
  EXPECT_EQ(online.describe(), "fp8 (online)");

  const std::string ct = R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4,
      "type": "int", "symmetric": true, "strategy": "group", "group_size": 128}}},
      "ignore": ["lm_head"]})";
  ResolvedQuantization stored = resolve_quantization(dir.string(), ct, "cfg", {});
  EXPECT_EQ(stored.describe(), "compressed-tensors (checkpoint)");
  // Naming the checkpoint's own method (either spelling) is fine.
  EXPECT_NO_THROW(resolve_quantization(dir.string(), ct, "cfg", {"compressed_tensors"}));
  // A non-online method that is not the checkpoint's contradicts it.
  register_quantization_config("test_ckpt_only", &HopperOnly::from_config, [] {
    MethodDescription d = HopperOnly::description();
    d.name = "test_ckpt_only";
    d.online = false;
    d.kernels[0].isa = KernelSpec::Isa::Portable;
    return d;
  });
  try {
    resolve_quantization(dir.string(), ct, "DIR/config.json", {"test_ckpt_only"});
    FAIL() << "contradiction not detected";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("contradicts DIR/config.json"), std::string::npos)
        << e.what();
  }
  // Online on top of a quantized checkpoint: the Linear layers it quantized are an error...
  ResolvedQuantization layered = resolve_quantization(dir.string(), ct, "cfg", {"fp8"});
  LayerInfo q_proj;
  q_proj.prefix = "model.layers.0.self_attn.q_proj";
  q_proj.in_features = 256;
  q_proj.out_features = 256;
  try {
    layered.config->get_quant_method(q_proj);
    FAIL() << "double quantization not detected";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.q_proj is already quantized"),
              std::string::npos)
        << e.what();
  }
  // ...and the LM head keeps the checkpoint's choice (ignored: unquantized, no online method).
  LayerInfo head = q_proj;
  head.kind = LayerKind::LmHead;
  head.prefix = "lm_head";
  EXPECT_EQ(layered.config->get_quant_method(head), nullptr);
}

TEST(Resolve, BadCheckpointConfigsNameTheField) {
  const fs::path dir = model_dir("bad", "{}");
  try {
    resolve_quantization(dir.string(), R"({"quant_method": "bitnet_b158"})", "DIR/config.json", {});
    FAIL();
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("DIR/config.json: quantization_config.quant_method "
                                         "'bitnet_b158' is not a known quantization method"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(resolve_quantization(dir.string(), R"({"bits": 4})", "cfg", {}), InvalidArgument);
  EXPECT_THROW(resolve_quantization(dir.string(), R"({"quant_method": "fp8",
      "activation_scheme": "sometimes"})", "cfg", {}), InvalidArgument);
  EXPECT_THROW(resolve_quantization(dir.string(), R"({"quant_method": "compressed-tensors",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": "four"}}}})", "cfg",
                                    {}),
               InvalidArgument);
  EXPECT_THROW(resolve_quantization(dir.string(), "", "cfg", {"no_such_method"}), Unsupported);
  // Fields of the wrong type are errors naming the field, never a JSON library exception.
  for (const auto& [config, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": "yes"})",
            "cfg: quantization_config.desc_act"},
           {R"({"quant_method": "gptq", "bits": "4", "group_size": 128})",
            "cfg: quantization_config.bits"},
           {R"({"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": [1]})",
            "cfg: quantization_config.modules_to_not_convert"},
           {R"({"quant_method": "fp8", "ignored_layers": "lm_head"})",
            "cfg: quantization_config.ignored_layers"}}) {
    try {
      resolve_quantization(dir.string(), config, "cfg", {});
      FAIL() << config;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  // Online methods take no configuration.
  EXPECT_THROW(make_quantization_config("fp8_per_channel", {{"x", 1}}, "cfg"), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::quant
