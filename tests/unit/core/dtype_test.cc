#include <gtest/gtest.h>

#include <cmath>

#include "core/float_convert.h"
#include "lowbit/dtype.h"
#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
  for (DType d : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2,
                  DType::I64, DType::I32, DType::I16, DType::I8, DType::U8, DType::BOOL}) {
    DType parsed;
    ASSERT_TRUE(parse_dtype(dtype_name(d), &parsed));
    EXPECT_EQ(parsed, d);
  }
  DType unused;
  EXPECT_FALSE(parse_dtype("F4", &unused));
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
}

// Bit patterns from the IEEE / OCP definitions (torch gives the same values).
TEST(FloatConvertTest, KnownBitPatterns) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3F80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7F)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7C)));
}

TEST(FloatConvertTest, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(TensorTest, SliceAndReshapeShareMemory) {
  Tensor t = Tensor::zeros(DType::F32, {4, 3});
  for (int i = 0; i < 12; ++i) t.data_as<float>()[i] = static_cast<float>(i);
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.data_as<float>()[0], 3.0f);
  Tensor flat = t.reshaped({12});
  EXPECT_EQ(flat.data(), t.data());
  EXPECT_THROW(t.reshaped({5}), Error);
}

}  // namespace
}  // namespace lowbit
