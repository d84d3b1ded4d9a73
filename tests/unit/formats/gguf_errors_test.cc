// Malformed GGUF files: each must give one exception of the right type whose message names the
// file and the field or tensor at fault. Most images are built byte by byte (GgufImage); the rest
// are the gguf-py fixture, cut or patched.
#include "formats/gguf.h"
#include "gguf_test_util.h"

namespace lowbit::formats {
namespace {

using testing::expect_error;
using testing::GgufImage;
using testing::le32;
using testing::le64;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

class GgufErrorsTest : public ::testing::Test {
 protected:
  // Writes `bytes` to bad.gguf and expects open() to throw E mentioning the path and needles.
  template <typename E = InvalidArgument>
  void expect_open_error(const std::string& bytes, std::vector<std::string> needles) {
    std::string path = dir_.file("bad.gguf");
    testing::write_file(path, bytes);
    needles.push_back(path);
    expect_error<E>([&] { GgufFile::open(path); }, needles);
  }

  std::string fixture() { return testing::read_file(testing::gguf_dir() + "/tensors.gguf"); }

  testing::TempDir dir_;
};

TEST_F(GgufErrorsTest, EmptyAndShortFiles) {
  expect_open_error("", {"0 bytes", "too short for the GGUF magic"});
  expect_open_error("GGU", {"3 bytes", "magic"});
  expect_open_error("GGUF", {"version", "at byte 4", "truncated"});
}

TEST_F(GgufErrorsTest, BadMagic) {
  std::string bytes = fixture();
  bytes[0] = 'X';
  expect_open_error(bytes, {"bad magic \"XGUF\"", "not a GGUF file"});
  expect_open_error(testing::read_file(testing::data_dir() + "/empty.safetensors"), {"bad magic"});
}

TEST_F(GgufErrorsTest, BadVersion) {
  GgufImage image;
  image.version = 4;
  expect_open_error(image.bytes(), {"field version is 4, expected 2 or 3"});
  image.version = 0;
  expect_open_error(image.bytes(), {"field version is 0"});
  image.version = 0x03000000;  // version 3 written big-endian
  expect_open_error(image.bytes(), {"field version", "big-endian"});
  image.version = 1;
  expect_open_error<Unsupported>(image.bytes(), {"GGUF version 1", "only 2 and 3"});
}

// Every prefix of a valid file that cuts into the header, the metadata, the tensor infos or a
// tensor's bytes is rejected; only the zero padding after the last tensor may be cut.
TEST_F(GgufErrorsTest, EveryTruncationIsRejected) {
  const std::string bytes = fixture();
  auto full = GgufFile::from_bytes(bytes, "full.gguf");
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : full->tensors()) {
    data_end = std::max(data_end, full->data_offset() + t.offset + t.nbytes);
  }
  ASSERT_LT(data_end, bytes.size());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    if (cut >= data_end) {
      EXPECT_NO_THROW(GgufFile::from_bytes(bytes.substr(0, cut), "cut.gguf")) << cut;
    } else {
      EXPECT_THROW(GgufFile::from_bytes(bytes.substr(0, cut), "cut.gguf"), InvalidArgument) << cut;
    }
  }
}

TEST_F(GgufErrorsTest, TruncationMessagesNameTheField) {
  const std::string bytes = fixture();
  expect_open_error(bytes.substr(0, 12), {"tensor count", "at byte 8", "truncated"});
  expect_open_error(bytes.substr(0, 20), {"metadata kv count"});
  // Early cuts leave too few bytes for the pair and tensor counts the header announces.
  expect_open_error(bytes.substr(0, 59), {"metadata kv count 31 cannot fit"});
  // Inside the token strings (offsets from gguf-py's GGUFReader: the pair starts at byte 1087).
  expect_open_error(bytes.substr(0, 1185),
                    {"metadata key \"tokenizer.ggml.tokens\"", "STRING value", "truncated"});
  // Inside the tensor info of k.q2_k (starts at byte 1873), in its second dimension.
  expect_open_error(bytes.substr(0, 1900), {"tensor \"k.q2_k\"", "dimension at byte 1899"});
  // The last tensor's bytes.
  expect_open_error(bytes.substr(0, bytes.size() - 30),
                    {"tensor \"k.q6_k\"", "past the end of the file"});
}

TEST_F(GgufErrorsTest, AbsurdCounts) {
  GgufImage image;
  image.kv_count = uint64_t{1} << 60;
  expect_open_error(image.bytes(), {"metadata kv count 1152921504606846976", "cannot fit"});
  image.kv_count = 0;
  image.tensor_count = ~uint64_t{0};
  expect_open_error(image.bytes(), {"tensor count 18446744073709551615", "cannot fit"});
  GgufImage array;
  array.pair("a", 9, le32(kF32 + 10) + le64(uint64_t{1} << 40));  // 2^40 UINT64s
  expect_open_error(array.bytes(), {"metadata key \"a\"", "array length 1099511627776"});
  GgufImage string;
  string.pair("s", 8, le64(uint64_t{1} << 62) + "abc");
  expect_open_error(string.bytes(), {"metadata key \"s\"", "STRING value", "needs"});
}

TEST_F(GgufErrorsTest, BadMetadataValues) {
  GgufImage type;
  type.pair("k", 13, le32(0));
  expect_open_error(type.bytes(), {"metadata key \"k\"", "value type 13 is not a GGUF value type"});
  GgufImage element;
  element.pair("k", 9, le32(99) + le64(1));
  expect_open_error(element.bytes(), {"metadata key \"k\"", "array element type 99"});
  GgufImage boolean;
  boolean.pair("flag", 7, std::string(1, '\x02'));
  expect_open_error(boolean.bytes(), {"metadata key \"flag\"", "BOOL value 2"});
  GgufImage duplicate;
  duplicate.pair_u32("x", 1);
  duplicate.pair_u32("x", 2);
  expect_open_error(duplicate.bytes(), {"metadata key \"x\"", "appears twice"});
  GgufImage deep;  // arrays nested 9 deep
  std::string value;
  for (int i = 0; i < 9; ++i) value += le32(9) + le64(1);
  deep.pair("deep", 9, value + le32(0) + le64(0));
  expect_open_error(deep.bytes(), {"metadata key \"deep\"", "nested more than 8 deep"});
}

TEST_F(GgufErrorsTest, BadAlignment) {
  GgufImage image;
  image.pair_u32("general.alignment", 48);
  expect_open_error(image.bytes(), {"\"general.alignment\"", "48 is not a power of two"});
  GgufImage zero;
  zero.pair_u32("general.alignment", 0);
  expect_open_error(zero.bytes(), {"\"general.alignment\"", "0 is not a power of two"});
  GgufImage type;
  type.pair_string("general.alignment", "32");
  expect_open_error(type.bytes(), {"\"general.alignment\"", "is STRING, expected UINT32"});
}

TEST_F(GgufErrorsTest, BadTensorInfos) {
  auto one = [&](uint32_t type, std::vector<uint64_t> ne, uint64_t offset, size_t data_bytes,
                 std::vector<std::string> needles) {
    GgufImage image;
    image.tensor("blk.0.w", type, ne, offset);
    image.data = std::string(data_bytes, '\0');
    needles.push_back("tensor \"blk.0.w\"");
    expect_open_error(image.bytes(), needles);
  };
  one(kF32, {}, 0, 0, {"n_dims is 0, expected 1 to 4"});
  one(kF32, {1, 1, 1, 1, 1}, 0, 4, {"n_dims is 5"});
  one(kF32, {4, 0}, 0, 16, {"dimension ne[1] is 0"});
  one(kF32, {4, uint64_t{1} << 63}, 0, 16, {"dimension ne[1] is 9223372036854775808"});
  one(4, {32}, 0, 64, {"type 4 is not a ggml type"});
  one(kQ8_0, {48}, 0, 64, {"ne [48]", "not a multiple of Q8_0's block size 32"});
  one(kF32, {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 16, {"too many elements"});
  one(kF32, {uint64_t{1} << 62}, 0, 16, {"too large"});
  one(kF32, {4}, 4, 32, {"offset 4 is not a multiple of the alignment 32"});
  // The example from the issue: offset + size past the end of the file.
  one(kF32, {1024}, 64, 2000, {"offset 64 + 4096 bytes", "is past the end of the file"});
  one(kF32, {4}, ~uint64_t{0} - 31, 16, {"past the end of the file"});
}

TEST_F(GgufErrorsTest, OverlappingTensors) {
  GgufImage image;
  image.tensor("a", kF32, {16}, 0);
  image.tensor("b", kF32, {4}, 32);  // inside "a" (64 bytes)
  image.data = std::string(128, '\0');
  expect_open_error(image.bytes(), {"tensor \"b\" at offset 32 overlaps tensor \"a\""});
  GgufImage same;
  same.tensor("a", kF32, {4}, 0);
  same.tensor("b", kF32, {4}, 0);
  same.data = std::string(32, '\0');
  expect_open_error(same.bytes(), {"overlaps tensor"});
}

TEST_F(GgufErrorsTest, DuplicateTensorNames) {
  GgufImage image;
  image.tensor("w", kF32, {4}, 0);
  image.tensor("w", kF32, {4}, 32);
  image.data = std::string(64, '\0');
  expect_open_error(image.bytes(), {"tensor \"w\"", "appears twice"});
}

TEST_F(GgufErrorsTest, DataSectionPastTheEnd) {
  GgufImage image;
  image.tensor("w", kF32, {4}, 0);
  std::string bytes = image.header() + image.infos;  // no padding, no data
  expect_open_error(bytes, {"data section", "starts past the end of the file"});
}

TEST_F(GgufErrorsTest, MisalignedDataSectionWithCustomAlignment) {
  // With general.alignment 64 a tensor offset of 32 is misaligned even though 32 would do.
  GgufImage image;
  image.pair_u32("general.alignment", 64);
  image.alignment = 64;
  image.tensor("w", kF32, {4}, 32);
  image.data = std::string(128, '\0');
  expect_open_error(image.bytes(),
                    {"tensor \"w\"", "offset 32 is not a multiple of the alignment 64"});
}

}  // namespace
}  // namespace lowbit::formats
