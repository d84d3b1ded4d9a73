// dequantize_gguf against gguf-py: every tensor of the fixtures, decoded by lowbit, must equal
// gguf.quants.dequantize's output (tests/unit/formats/data/gguf/*.dequant.safetensors) bit for
// bit. No tolerance: every product of scales and quants is exact in float32 (see
// gguf_dequant.cc), so the only rounding is the final add/subtract both sides do identically; any
// difference is a layout bug, not rounding.
#include "formats/gguf_dequant.h"

#include <cstring>
#include <set>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "gguf_test_util.h"

namespace lowbit::formats {
namespace {

using testing::expect_error;
using testing::gguf_dir;

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Decodes every tensor of `fixture` and compares it with gguf-py's values; adds the types seen.
void compare_fixture(const std::string& fixture, std::set<GgmlType>* types) {
  auto file = GgufFile::open(gguf_dir() + "/" + fixture + ".gguf");
  auto golden = SafetensorsFile::open(gguf_dir() + "/" + fixture + ".dequant.safetensors");
  EXPECT_EQ(golden->names().size(), file->tensors().size());
  for (const GgufTensorInfo& info : file->tensors()) {
    SCOPED_TRACE(info.name + " (" + std::string(ggml_type_name(info.type)) + ")");
    types->insert(info.type);
    Tensor want = golden->get(info.name);
    Tensor got = dequantize_gguf_tensor(*file, info);
    ASSERT_EQ(got.dtype(), DType::F32);
    ASSERT_EQ(got.shape(), want.shape());
    ASSERT_EQ(want.dtype(), DType::F32);
    const float* g = got.data_as<float>();
    const float* w = want.data_as<float>();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      if (bits(g[i]) != bits(w[i]) && mismatches++ < 5) {
        ADD_FAILURE() << "element " << i << ": lowbit " << g[i] << ", gguf-py " << w[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
    // The values are not trivially zero (a decoder that wrote nothing would fail above, but a
    // fixture of zeros would let it pass).
    int64_t nonzero = 0;
    for (int64_t i = 0; i < want.numel(); ++i) nonzero += w[i] != 0.0f;
    EXPECT_GT(nonzero, want.numel() / 2);
  }
}

TEST(GgufDequantTest, EveryTensorEqualsGgufPy) {
  std::set<GgmlType> seen;
  compare_fixture("tensors", &seen);
  // The fixture covers every type lowbit claims to decode.
  for (GgmlType type :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
        GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
        GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    EXPECT_TRUE(gguf_can_dequantize(type)) << ggml_type_name(type);
    EXPECT_TRUE(seen.count(type)) << ggml_type_name(type) << " has no fixture tensor";
  }
}

TEST(GgufDequantTest, AlignedFixtureEqualsGgufPy) {
  std::set<GgmlType> seen;
  compare_fixture("aligned64", &seen);
  EXPECT_EQ(seen.size(), 3u);
}

TEST(GgufDequantTest, UnsupportedTypes) {
  for (GgmlType type : {GgmlType::IQ2_XXS, GgmlType::Q8_K, GgmlType::I32, GgmlType::TQ1_0}) {
    EXPECT_FALSE(gguf_can_dequantize(type)) << ggml_type_name(type);
  }
  const GgmlTypeTraits& iq4 = ggml_type_traits(GgmlType::IQ4_NL);
  std::vector<uint8_t> block(iq4.type_size);
  std::vector<float> out(iq4.block_size);
  expect_error<Unsupported>([&] { dequantize_gguf(GgmlType::IQ4_NL, block, out); },
                            {"IQ4_NL", "not supported"});
  // Through a file: the message names the file and tensor.
  testing::GgufImage image;
  image.tensor("blk.0.ffn_down.weight", 20, {32}, 0);  // IQ4_NL
  image.data = std::string(32, '\0');
  auto file = GgufFile::from_bytes(image.bytes(), "iq.gguf");
  expect_error<Unsupported>([&] { dequantize_gguf_tensor(*file, file->tensors()[0]); },
                            {"iq.gguf", "tensor \"blk.0.ffn_down.weight\"", "IQ4_NL"});
}

TEST(GgufDequantTest, SizeMismatch) {
  std::vector<uint8_t> bytes(34);
  std::vector<float> out(32);
  EXPECT_NO_THROW(dequantize_gguf(GgmlType::Q8_0, bytes, out));
  std::vector<float> ragged(40);
  expect_error<InvalidArgument>([&] { dequantize_gguf(GgmlType::Q8_0, bytes, ragged); },
                                {"40 Q8_0 elements", "32-element blocks"});
  std::vector<float> two(64);
  expect_error<InvalidArgument>([&] { dequantize_gguf(GgmlType::Q8_0, bytes, two); },
                                {"need 68 bytes, got 34"});
}

// A hand-made Q8_0 block whose values are known without any reference: d = 0.5, q = -128..127.
TEST(GgufDequantTest, Q8_0ByHand) {
  std::vector<uint8_t> block = {0x00, 0x38};  // fp16 0.5
  for (int j = 0; j < 32; ++j)
    block.push_back(static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128)));
  std::vector<float> out(32);
  dequantize_gguf(GgmlType::Q8_0, block, out);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * static_cast<float>(j * 8 - 128)) << j;
}

}  // namespace
}  // namespace lowbit::formats
