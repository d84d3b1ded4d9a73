// bitsandbytes 4-bit checkpoints transformers 5.17 saved with bitsandbytes 0.50.2 on CPU
// (tests/golden/quant_formats/bnb_{nf4,nf4_dq,fp4}, scripts/fixtures/make_bnb_fixtures.py) load
// through the bitsandbytes method and match the writer's numbers. NF4 / FP4 are dequantized at
// load into the model dtype (the dequant kernel), so unlike the table of quant_formats_test.cc
// (whose kernels keep fp32 weights) the weights are checked in the dtype they were stored in:
//  - bf16 (the checkpoint's dtype): the weight equals bitsandbytes' fp32 dequantization rounded
//    to bf16, and the logits equal transformers' fp32 forward on those bf16 weights;
//  - --dtype float32: the weight equals bitsandbytes' dequantization exactly, and the logits equal
//    an fp32 forward on the fp32 weights.
// The LLM.int8() fixtures (bnb_int8, bnb_int8_outliers) run on the int kernels and are rows of
// quant_formats_test.cc.
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

// Every dequant_<module> of the golden file against the loaded layer's weight, exactly: both are
// one fp32 product codebook · absmax per element (`round_bf16`: lowbit stored it in bf16).
void expect_writer_weights(const formats::SafetensorsFile& golden, const models::Model& model,
                           bool round_bf16) {
  int checked = 0;
  for (const std::string& name : golden.names()) {
    if (name.rfind("dequant_", 0) != 0) continue;
    const Tensor expected = golden.get(name);
    const models::Linear& linear = module(model, name.substr(8));
    ASSERT_NE(linear.method, nullptr) << name;
    EXPECT_EQ(linear.method->kernel_name().rfind("dequant", 0), 0u) << linear.method->kernel_name();
    const Tensor got = linear.method->dequantized_weight();
    ASSERT_EQ(got.shape(), expected.shape()) << name;
    const Tensor want = round_bf16 ? Tensor::from_f32(expected.data_as<const float>(),
                                                      expected.shape(), DType::BF16)
                                         .to_f32()
                                   : expected;
    for (int64_t i = 0; i < got.numel(); ++i) {
      ASSERT_EQ(got.data_as<const float>()[i], want.data_as<const float>()[i])
          << name << " [" << i << "]";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

class Bnb4bitCheckpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(Bnb4bitCheckpoint, MatchesTheWritersDequantization) {
  const std::string dir = kQuantFormatsDir + GetParam();
  const auto golden = formats::SafetensorsFile::open(dir + "/golden.safetensors");
  const Tensor ids = golden->get("input_ids");
  {
    const auto model = models::Model::load(dir);
    EXPECT_EQ(model->quantization(), "bitsandbytes (checkpoint)");
    expect_writer_weights(*golden, *model, true);
    const Tensor logits = run(*model, ids);
    // transformers' fp32 forward on the same bf16 weights: only the fp32 summation order differs
    // (1e-4 on logits of magnitude ~4; the other fixtures measure ~3e-6).
    EXPECT_LE(max_abs_diff(logits, golden->get("logits_dequant_f32")), 1e-4);
    // transformers running the checkpoint through bitsandbytes' Linear4bit in bf16: within the
    // bf16 noise of this model (0.034-0.038 between its bf16 and fp32 forwards, README; measured
    // 0.043-0.055 against logits_dequant), as for the GPTQ / AWQ fixtures.
    EXPECT_LE(max_abs_diff(logits, golden->get("logits")), 0.1);
  }
  models::LoadOptions f32;
  f32.dtype = "float32";
  const auto model = models::Model::load(dir, f32);
  expect_writer_weights(*golden, *model, false);
  EXPECT_LE(max_abs_diff(run(*model, ids), golden->get("logits_dequant_f32w")), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Bnb, Bnb4bitCheckpoint,
                         ::testing::Values("bnb_nf4", "bnb_nf4_dq", "bnb_fp4"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace lowbit
