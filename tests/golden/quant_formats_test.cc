// Checkpoints written by other tools (GPTQModel, AutoAWQ, transformers' FineGrainedFP8, AutoFP8,
// Intel AutoRound, AMD Quark; tests/golden/quant_formats/README.md) load through their methods and
// match the writers' own numbers:
//  - the weight lowbit reconstructs equals the writer's dequantization (`dequant_<module>`);
//  - with --linear-backend dequant (weights dequantized to bf16, fp32 activations) the logits
//    equal `logits_dequant_f32`, transformers' fp32 forward on the writer's bf16 weights;
//  - with the default kernels the logits stay within the bf16 noise of that reference; FP8 models,
//    whose inputs are quantized too, match an fp32 forward with vLLM's activation quantization.
#include <gtest/gtest.h>

#include <cmath>

#include "formats/safetensors.h"
#include "models/model.h"
#include "quant_format_util.h"

namespace lowbit {
namespace {

using golden::max_abs_diff;
using golden::module;
using golden::run;
using golden::kQuantFormatsDir;

struct Fixture {
  const char* name;
  const char* method;            // what resolution must find
  bool activation_quantized;     // FP8 checkpoints whose inputs vLLM quantizes too
};

const Fixture kFixtures[] = {
    {"gptq_w4_g128", "gptq", false},
    {"gptq_w4_g32_descact", "gptq", false},
    {"gptq_w8_g128", "gptq", false},
    {"gptq_w4_g128_asym", "gptq", false},
    {"gptq_w4_g128_asym_v2", "gptq", false},
    {"awq_w4_g128_gemm", "awq", false},
    {"fp8_block", "fp8", true},          // dynamic 1x128-group fp8 inputs
    {"fp8_block_ceil", "fp8", true},     // the same with partial 64x128 blocks
    {"fp8_tensor_static", "fp8", true},  // static per-tensor fp8 inputs (input_scale)
    // Intel AutoRound 0.15.1: its own format (GPTQ v1 / AWQ / GPTQ v2 packings) and its
    // auto_gptq export, a plain GPTQ checkpoint.
    {"autoround_w4_g128_sym_mixed", "auto-round", false},
    {"autoround_w4_g128_asym", "auto-round", false},
    {"autoround_w8_g128_asym", "auto-round", false},
    {"autoround_w4_g128_autogptq", "gptq", false},
    // AMD Quark 0.13: 4-bit groups in the "reorder" (AWQ) packing; fp8 with static inputs, checked
    // on its tie-free sequence like the block fixtures.
    {"quark_uint4_g128", "quark", false},
    {"quark_int4_g128", "quark", false},
    {"quark_fp8", "quark", true},
    // torchao 0.18 through transformers 5.17 (safetensors): Int4Tensor (float zero points: the
    // dequant kernel; dequant_ is the bf16 weight mslk's kernel forms), Int8Tensor weight-only
    // and with dynamic per-token int8 inputs (the fp32 W8A8 emulation on its tie-free sequence;
    // against torchao's own linear layer by layer in quant_formats_torchao_test.cc),
    // IntxUnpackedToInt8Tensor.
    {"torchao_int4_g128", "torchao", false},
    {"torchao_int4_g32", "torchao", false},
    {"torchao_int8_wo", "torchao", false},
    {"torchao_int8_dyn", "torchao", true},
    {"torchao_intx_w4_g32_asym", "torchao", false},
    // bitsandbytes 0.50.2 LLM.int8() through transformers 5.17: int8 weights on the int kernels,
    // inputs quantized to int8 per row with outlier columns kept in float (threshold 6.0: none
    // on this model; 3.0: 0-10 columns per input). Its 4-bit fixtures: quant_formats_bnb_test.cc.
    {"bnb_int8", "bitsandbytes", true},
    {"bnb_int8_outliers", "bitsandbytes", true},
    // vLLM's deepspeedfp: bf16 checkpoints quantized at load by DeepSpeed's FP_Quantize (FP8 in
    // groups of 128, FP6 in groups of 512 spanning rows). Not written by the real tool, which is
    // CUDA-only: the golden data come from the documented kernel, re-implemented in Python
    // (scripts/fixtures/make_deepspeedfp_fixtures.py, README "DeepSpeedFP").
    {"deepspeedfp_fp8", "deepspeedfp", false},
    {"deepspeedfp_fp6", "deepspeedfp", false},
};

class QuantFormat : public ::testing::TestWithParam<Fixture> {};

TEST_P(QuantFormat, MatchesTheWritersNumbers) {
  const Fixture f = GetParam();
  const std::string dir = kQuantFormatsDir + f.name;
  const auto golden = formats::SafetensorsFile::open(dir + "/golden.safetensors");
  const Tensor ids = golden->get("input_ids");

  models::LoadOptions dequant;
  dequant.linear_backend = "dequant";
  const auto reference = models::Model::load(dir, dequant);
  EXPECT_EQ(reference->quantization(), std::string(f.method) + " (checkpoint)");
  const auto fast = models::Model::load(dir);

  // Reconstructed weights: exact in the reference path before its bf16 cast is not observable, so
  // compare the kernels' weights, which keep the fp32 product code x scale: equal to the writer's
  // fp32 dequantization up to one rounding of that product (relative 2^-24).
  for (const std::string& name : golden->names()) {
    if (name.rfind("dequant_", 0) != 0) continue;
    const std::string module_name = name.substr(8);
    const Tensor expected = golden->get(name);
    const Tensor got = module(*fast, module_name).method->dequantized_weight();
    ASSERT_EQ(got.shape(), expected.shape()) << name;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float e = expected.data_as<const float>()[i], g = got.data_as<const float>()[i];
      ASSERT_LE(std::abs(g - e), std::abs(e) * 1.2e-7f) << f.name << " " << name << " [" << i << "]";
    }
  }

  const Tensor ref_logits = run(*reference, ids);
  const Tensor fast_logits = run(*fast, ids);
  if (!f.activation_quantized) {
    // The reference path is transformers' fp32 forward on the same bf16 weights; what differs is
    // the order of fp32 sums: 1e-4 on logits of magnitude ~4 (measured 3e-6).
    EXPECT_LE(max_abs_diff(ref_logits, golden->get("logits_dequant_f32")), 1e-4) << f.name;
    // Default kernels keep code x scale in fp32 where the reference rounds the weight to bf16:
    // within the model's bf16 noise floor (0.047 between a bf16 and an fp32 forward of these
    // weights; measured 0.02).
    EXPECT_LE(max_abs_diff(fast_logits, ref_logits), 0.047) << f.name;
    if (golden->has("logits")) {
      // transformers running the checkpoint through GPTQModel's, auto-round's or Quark's CPU
      // kernels in bf16 / fp16.
      EXPECT_LE(max_abs_diff(fast_logits, golden->get("logits")), 0.1) << f.name;
    }
  } else {
    // FP8 with activation quantization: `logits_actquant_f32` is transformers' fp32 forward on
    // the writer's fp32-dequantized weights with every Linear input fake-quantized to fp8 as vLLM
    // does. The kernels compute the same thing in another fp32 summation order; the reference
    // moves by < 3.4e-5 under such changes (README) while the activation quantization itself moves
    // the logits by ~0.25, so 1e-4 tells right from wrong. The block fixtures' default input_ids
    // hold exact fp8 rounding ties that any change of summation order decides differently
    // (README), so those (and quark_fp8, whose near-ties do the same) are checked on the
    // tie-free sequence the generator selected.
    const bool block = golden->has("input_ids_tiefree");
    const Tensor checked = block ? run(*fast, golden->get("input_ids_tiefree")) : fast_logits;
    EXPECT_LE(max_abs_diff(checked, golden->get(block ? "logits_actquant_f32_tiefree"
                                                      : "logits_actquant_f32")),
              1e-4)
        << f.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Writers, QuantFormat, ::testing::ValuesIn(kFixtures),
                         [](const ::testing::TestParamInfo<Fixture>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace lowbit
