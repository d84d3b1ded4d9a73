// QuantizationArgs / Scheme / Config JSON against compressed-tensors 0.19.0's own dumps: the
// presets, argument inference and validation, and config.json blocks written by llm-compressor.
#include <gtest/gtest.h>

#include "ct_golden.h"
#include "lowbit/error.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::quant {
namespace {

using testing::load_json;

nlohmann::json plain(const nlohmann::ordered_json& j) { return nlohmann::json::parse(j.dump()); }

TEST(Presets, EveryCtPresetHasIdenticalFieldsAndOrder) {
  const auto presets = load_json("ct_presets.json");
  ASSERT_EQ(presets.size(), 30u);
  std::vector<std::string> seen;
  for (auto it = presets.begin(); it != presets.end(); ++it) {
    const QuantScheme s = preset_scheme(it.key(), {"Linear"});
    // dump() of ordered_json compares field order too (model_dump's declaration order).
    EXPECT_EQ(quant_scheme_to_json(s).dump(), it.value().dump()) << it.key();
    seen.push_back(it.key());
  }
  for (const auto& name : preset_names()) {
    if (name == "W4A8_CHANNEL") continue;  // lowbit's own
    EXPECT_NE(std::find(seen.begin(), seen.end(), name), seen.end()) << name << " is not in CT";
  }
}

TEST(Presets, W4A8ChannelIsInt4ChannelWithInt8TokenInputs) {
  // ct_vectors.json's w4a8_channel case was built in compressed-tensors from these fields.
  auto ct = load_json("ct_vectors.json")["w4a8_channel_16x256_bf16"]["scheme"];
  ct["format"] = nullptr;  // set by the compressor there
  EXPECT_EQ(quant_scheme_to_json(preset_scheme("w4a8_channel", {"Linear"})).dump(), ct.dump());
}

TEST(Presets, RoundTripAndLookup) {
  for (const auto& name : preset_names()) {
    const QuantScheme s = preset_scheme(name, {"Linear", "re:.*proj$"});
    EXPECT_EQ(parse_quant_scheme(plain(quant_scheme_to_json(s)), name), s) << name;
  }
  EXPECT_EQ(preset_scheme("fp8_dynamic", {"x"}), preset_scheme("FP8_DYNAMIC", {"x"}));
  try {
    preset_scheme("W4A17", {});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("W4A16"), std::string::npos) << e.what();
  }
}

// Inference, defaults and validation on the same inputs compressed-tensors was given.
TEST(QuantArgs, ParseMatchesCompressedTensors) {
  const auto cases = load_json("ct_args_cases.json");
  ASSERT_EQ(cases.size(), 31u);
  for (const auto& c : cases) {
    const auto input = plain(c["input"]);
    if (c.contains("dump")) {
      const QuantArgs a = parse_quant_args(input, "case");
      EXPECT_EQ(quant_args_to_json(a).dump(), c["dump"].dump()) << input.dump();
      EXPECT_EQ(parse_quant_args(plain(quant_args_to_json(a)), "again"), a) << input.dump();
    } else {
      EXPECT_THROW(parse_quant_args(input, "case"), InvalidArgument)
          << input.dump() << " (compressed-tensors: " << c["error"] << ")";
    }
  }
}

std::string error_of(const std::string& json) {
  try {
    parse_quant_args(nlohmann::json::parse(json), "config.json:quantization_config.w");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(QuantArgs, ErrorsNameTheFileAndField) {
  EXPECT_NE(error_of(R"({"num_bits": 4, "strategy": "group"})")
                .find("config.json:quantization_config.w.group_size"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"bits": 4})").find("'bits'"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_bits": "four"})").find(".num_bits"), std::string::npos);
  EXPECT_NE(error_of(R"({"strategy": "token"})").find(".strategy"), std::string::npos);
  EXPECT_NE(error_of(R"({"scale_dtype": "torch.nope"})").find(".scale_dtype"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_bits": 4, "type": "float", "symmetric": false})").find(".symmetric"),
            std::string::npos);  // asymmetric FP4 (CT fails later, in calculate_qparams)
}

// Numbers wider than the fields: errors naming the field, never a wrap-around or an escaping
// std::out_of_range (the recipe fuzzer found `block_structure: 128x<20 digits>` aborting).
TEST(QuantArgs, OversizedNumbersAreErrors) {
  const std::string huge = "99999999999999999999";
  EXPECT_NE(
      error_of(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "128x)" +
               huge + R"("})")
          .find(".block_structure"),
      std::string::npos);
  // 2^32 + 8 would narrow to 8 in an int.
  EXPECT_NE(error_of(R"({"num_bits": 4294967304})").find(".num_bits"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_bits": 33})").find(".num_bits"), std::string::npos);
  // 2^64 - 1 would wrap to -1 (strategy channel) in an int64.
  EXPECT_NE(error_of(R"({"num_bits": 4, "group_size": 18446744073709551615})").find(".group_size"),
            std::string::npos);
  // The legacy string form still reads.
  const QuantArgs a = parse_quant_args(
      nlohmann::json::parse(
          R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "128x64"})"),
      "w");
  EXPECT_EQ(a.block_rows, 128);
  EXPECT_EQ(a.block_cols, 64);
}

TEST(QuantArgs, LegacyActorderGroupIsRead) {
  // compressed-tensors 0.19 rejects it; older checkpoints carry it (with weight_g_idx).
  const QuantArgs a = parse_quant_args(
      nlohmann::json::parse(R"({"num_bits": 4, "group_size": 128, "actorder": "dynamic"})"), "w");
  EXPECT_EQ(a.actorder, ActOrder::Group);
  EXPECT_EQ(quant_args_to_json(a)["actorder"], "group");
  EXPECT_EQ(parse_quant_args(nlohmann::json::parse(R"({"actorder": true, "group_size": 8})"), "w")
                .actorder,
            ActOrder::Group);
}

TEST(QuantArgs, Ranges) {
  QuantArgs a;
  a.num_bits = 4;
  EXPECT_EQ(a.qmin(), -8);
  EXPECT_EQ(a.qmax(), 7);
  a.type = QuantType::Float;
  EXPECT_EQ(a.qmax(), 6);
  EXPECT_EQ(a.qmin(), -6);
  a.num_bits = 8;
  EXPECT_EQ(a.qmax(), 448);
}

TEST(QuantScheme, Validation) {
  auto scheme_error = [](const std::string& json) -> std::string {
    try {
      parse_quant_scheme(nlohmann::json::parse(json), "g");
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(scheme_error(R"({"targets": ["Linear"], "weights": {"num_bits": 4}})"), "");
  EXPECT_NE(scheme_error(R"({"weights": null})").find("g.targets"), std::string::npos);
  EXPECT_NE(scheme_error(R"({"targets": [], "extra": 1})").find("'extra'"), std::string::npos);
  EXPECT_NE(scheme_error(R"({"targets": [], "input_activations": {"strategy": "channel"}})")
                .find("g.input_activations.strategy"),
            std::string::npos);
  EXPECT_NE(scheme_error(R"({"targets": [], "input_activations": {"actorder": "weight"}})")
                .find("actorder"),
            std::string::npos);
  EXPECT_NE(scheme_error(R"({"targets": [], "format": "mixed-precision"})").find("g.format"),
            std::string::npos);
  EXPECT_NE(scheme_error(R"({"targets": [], "format": "marlin-24"})").find("legacy"),
            std::string::npos);
  EXPECT_NE(scheme_error(R"({"targets": [1]})").find("g.targets[0]"), std::string::npos);
}

// config.json blocks written by llm-compressor 0.14 / compressed-tensors 0.19 (oneshot): lowbit
// parses them and writes them back identically (json.dump(..., sort_keys=True) layout).
TEST(CompressedTensorsConfig, RealConfigsRoundTripByteForByte) {
  const auto configs = load_json("ct_configs.json");
  ASSERT_EQ(configs.size(), 5u);
  for (auto it = configs.begin(); it != configs.end(); ++it) {
    const CompressedTensorsConfig c = parse_quantization_config(plain(it.value()), it.key());
    EXPECT_EQ(quantization_config_to_json(c).dump(2), it.value().dump(2)) << it.key();
    EXPECT_EQ(c.version, "0.19.0");
    EXPECT_EQ(c.ignore, std::vector<std::string>{"lm_head"});
  }
  const auto mixed = parse_quantization_config(plain(configs["MIXED"]), "MIXED");
  EXPECT_EQ(mixed.format, CompressionFormat::MixedPrecision);
  ASSERT_EQ(mixed.config_groups.size(), 2u);
  EXPECT_EQ(mixed.config_groups[1].second.format, CompressionFormat::PackQuantized);
}

TEST(CompressedTensorsConfig, PresetShorthandAndDefaults) {
  const auto j = nlohmann::json::parse(
      R"({"config_groups": {"w4a16": ["Linear"]}, "ignore": null, "unknown_key": 1})");
  const CompressedTensorsConfig c = parse_quantization_config(j, "cfg");
  ASSERT_EQ(c.config_groups.size(), 1u);
  EXPECT_EQ(c.config_groups[0].second, preset_scheme("W4A16", {"Linear"}));
  EXPECT_EQ(c.format, CompressionFormat::PackQuantized);  // no format: inferred from the groups
  EXPECT_EQ(c.quantization_status, "initialized");         // the pydantic default
  EXPECT_TRUE(c.ignore.empty());
  EXPECT_EQ(parse_quantization_config(plain(quantization_config_to_json(c)), "again"), c);
  EXPECT_THROW(parse_quantization_config(nlohmann::json::parse(R"({"config_groups": {"W9": []}})"),
                                         "cfg"),
               InvalidArgument);
  EXPECT_THROW(parse_quantization_config(nlohmann::json::parse(R"({"ignore": []})"), "cfg"),
               InvalidArgument);
  EXPECT_THROW(parse_quantization_config(
                   nlohmann::json::parse(R"({"config_groups": {}, "quantization_status": "x"})"),
                   "cfg"),
               InvalidArgument);
}

TEST(CompressedTensorsConfig, WriterSortsKeysAndFillsConstants) {
  CompressedTensorsConfig c;
  c.config_groups = {{"group_1", preset_scheme("FP8", {"Linear"})},
                     {"group_0", preset_scheme("W8A8", {"re:.*mlp.*"})}};
  c.kv_cache_scheme = parse_quant_args(nlohmann::json::parse(R"({"num_bits": 8, "type": "float"})"), "kv");
  c.format = CompressionFormat::MixedPrecision;
  c.version = "0.19.0";
  const auto j = quantization_config_to_json(c);
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"config_groups", "format", "global_compression_ratio",
                                            "ignore", "kv_cache_scheme", "quant_method",
                                            "quantization_status", "sparsity_config",
                                            "transform_config", "version"}));
  EXPECT_EQ(j["config_groups"].begin().key(), "group_0");
  EXPECT_EQ(j["kv_cache_scheme"].begin().key(), "actorder");
  EXPECT_EQ(j["quant_method"], "compressed-tensors");
  const CompressedTensorsConfig back = parse_quantization_config(plain(j), "again");
  EXPECT_EQ(back.kv_cache_scheme, c.kv_cache_scheme);
  EXPECT_EQ(back.config_groups.size(), 2u);
}

TEST(CompressionFormat, Names) {
  for (auto f : {CompressionFormat::Dense, CompressionFormat::NaiveQuantized,
                 CompressionFormat::IntQuantized, CompressionFormat::FloatQuantized,
                 CompressionFormat::PackQuantized, CompressionFormat::Nvfp4PackQuantized,
                 CompressionFormat::Mxfp4PackQuantized, CompressionFormat::Mxfp8Quantized,
                 CompressionFormat::MixedPrecision})
    EXPECT_EQ(parse_compression_format(to_string(f), "f"), f);
  EXPECT_THROW(parse_compression_format("sparse-24-bitmask", "f"), InvalidArgument);
  EXPECT_THROW(parse_compression_format("pack_quantized", "f"), InvalidArgument);
}

}  // namespace
}  // namespace lowbit::quant
