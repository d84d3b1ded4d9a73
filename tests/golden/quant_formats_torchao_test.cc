// torchao's W8A8 (Int8DynamicActivationInt8WeightConfig,
// tests/golden/quant_formats/torchao_int8_dyn, scripts/fixtures/make_torchao_fixtures.py) layer by
// layer against torchao's own Int8Tensor linear. The model-level logits are checked in
// quant_formats_test.cc against the fp32 W8A8 emulation on a tie-free sequence; torchao's own fp32
// forward is not a target there, because torchao multiplies by 1 / scale where lowbit (and
// compressed-tensors) divide, and at the absmax element of a row whose largest value is negative
// that lands on -127.5 give or take an ulp, so -128 or -127 depends on the absmax's last bits
// (README). Here the inputs are real activations of the model, restricted by the generator to rows
// that no fp32 order can quantize differently and on which both formulas give the same codes:
// lowbit's w8a8 output must then equal torchao's.
#include <gtest/gtest.h>

#include <cmath>

#include "formats/safetensors.h"
#include "models/model.h"
#include "quant_format_util.h"

namespace lowbit {
namespace {

using golden::module;

const std::string kDir =
    std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/quant_formats/torchao_int8_dyn";

TEST(TorchAoCheckpoint, Int8DynamicLayersEqualTorchaosLinear) {
  const auto golden = formats::SafetensorsFile::open(kDir + "/golden.safetensors");
  const auto model = models::Model::load(kDir);
  int checked = 0;
  for (const std::string& name : golden->names()) {
    if (name.rfind("layer_input_", 0) != 0) continue;
    const std::string mod = name.substr(12);
    const Tensor x = golden->get(name);
    const Tensor want = golden->get("layer_output_" + mod);
    const models::Linear& l = module(*model, mod);
    EXPECT_EQ(l.method->kernel_name().rfind("w8a8", 0), 0u) << l.method->kernel_name();
    const int64_t rows = x.dim(0), out = want.dim(1);
    ASSERT_GT(rows, 0) << mod;
    std::vector<float> y(static_cast<size_t>(rows * out));
    l.method->apply(x.data_as<const float>(), rows, nullptr, y.data());
    // Same int8 codes and scales, exact int32 sums; torchao scales the sum by the input scale
    // then the weight scale, each product rounded to fp32 (two roundings), lowbit in its own
    // order: a few fp32 ulp of each output.
    for (int64_t i = 0; i < rows * out; ++i) {
      const float e = want.data_as<const float>()[i];
      ASSERT_LE(std::abs(y[static_cast<size_t>(i)] - e), 5e-7f * std::abs(e) + 1e-12f)
          << mod << " [" << i / out << ", " << i % out << "]";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

}  // namespace
}  // namespace lowbit
