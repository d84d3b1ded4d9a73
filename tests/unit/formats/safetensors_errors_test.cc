// Bad safetensors files: each must give one exception of the right type whose message names the
// file and the tensor or field at fault. Files are written to disk and opened (the path must be in
// the message); a few go through from_bytes (the given name must be).
#include <string>

#include "formats/safetensors.h"
#include "safetensors_test_util.h"

namespace lowbit::formats {
namespace {

using testing::expect_error;
using testing::make_image;

class SafetensorsErrorsTest : public ::testing::Test {
 protected:
  // Writes `bytes` to bad.safetensors and expects open() to throw E mentioning the path and
  // needles.
  template <typename E = InvalidArgument>
  void expect_open_error(const std::string& bytes, std::vector<std::string> needles) {
    std::string path = dir_.file("bad.safetensors");
    testing::write_file(path, bytes);
    needles.push_back(path);
    expect_error<E>([&] { SafetensorsFile::open(path); }, needles);
  }

  // One tensor entry in an otherwise good file with `data_bytes` bytes of data.
  void expect_entry_error(const std::string& entry, size_t data_bytes,
                          std::vector<std::string> needles) {
    expect_open_error(make_image("{\"w\":" + entry + "}", std::string(data_bytes, '\0')), needles);
  }

  std::string good() { return testing::read_file(testing::data_dir() + "/all_dtypes.safetensors"); }

  testing::TempDir dir_;
};

TEST_F(SafetensorsErrorsTest, EmptyAndShortFiles) {
  expect_open_error("", {"0 bytes", "header length"});
  expect_open_error(std::string("\x08\x00\x00", 3), {"3 bytes", "header length"});
}

TEST_F(SafetensorsErrorsTest, TruncatedFile) {
  std::string bytes = good();
  // Cut inside the data section: the last tensor in the layout ("bool") now ends past the end.
  expect_open_error(bytes.substr(0, bytes.size() - 5),
                    {"tensor \"bool\"", "data_offsets", "data section"});
  // Cut inside the header.
  expect_open_error(bytes.substr(0, 40), {"header length 944", "runs past the end"});
}

TEST_F(SafetensorsErrorsTest, HeaderLengthLargerThanFile) {
  std::string bytes = make_image("{}      ");
  bytes[0] = 9;
  expect_open_error(bytes, {"header length 9", "runs past the end of the file (8 bytes"});
  std::string huge = make_image("{}      ");
  huge[7] = 0x10;  // 2^60: over the 100 MB limit before anything else
  expect_open_error(huge, {"header length", "exceeds the 100000000-byte limit"});
}

TEST_F(SafetensorsErrorsTest, HeaderNotJson) {
  expect_open_error(make_image("{\"w\": nope}"), {"header is not valid JSON"});
  expect_open_error(make_image(std::string("{\"w\":\"\xff\"}")), {"header is not valid JSON"});
  expect_open_error(make_image("        "), {"header is not valid JSON"});
}

TEST_F(SafetensorsErrorsTest, HeaderNotAnObject) {
  expect_open_error(make_image("[1, 2]  "), {"header must be a JSON object, got array"});
  expect_open_error(make_image("\"text\"  "), {"header must be a JSON object, got string"});
}

TEST_F(SafetensorsErrorsTest, EntryNotAnObject) {
  expect_entry_error("[1]", 0, {"tensor \"w\"", "entry must be a JSON object", "got array"});
}

TEST_F(SafetensorsErrorsTest, EntryMissingAField) {
  expect_entry_error(R"({"shape":[1],"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "missing field \"dtype\""});
  expect_entry_error(R"({"dtype":"F32","data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "missing field \"shape\""});
  expect_entry_error(R"({"dtype":"F32","shape":[1]})", 4,
                     {"tensor \"w\"", "missing field \"data_offsets\""});
}

TEST_F(SafetensorsErrorsTest, BadDtype) {
  expect_entry_error(R"({"dtype":"F33","shape":[1],"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "unknown dtype \"F33\"", "\"dtype\""});
  expect_entry_error(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "field \"dtype\" must be a string, got number"});
  // Part of the format, but not something lowbit computes with: Unsupported, not InvalidArgument.
  expect_open_error<Unsupported>(
      make_image(R"({"w":{"dtype":"U32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
      {"tensor \"w\"", "dtype U32", "not supported"});
}

TEST_F(SafetensorsErrorsTest, BadShape) {
  expect_entry_error(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "\"shape\"", "negative dimension -2"});
  expect_entry_error(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "\"shape\"", "non-negative integers", "2.5"});
  expect_entry_error(R"({"dtype":"F32","shape":["1"],"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "\"shape\"", "got string"});
  expect_entry_error(R"({"dtype":"F32","shape":4,"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "field \"shape\" must be an array"});
  // The product overflows 64 bits although the bytes would be 0 with the trailing 0.
  expect_entry_error(R"({"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]})", 0,
                     {"tensor \"w\"", "\"shape\"", "too large"});
  expect_entry_error(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})", 4,
                     {"tensor \"w\"", "\"shape\"", "too large"});
}

TEST_F(SafetensorsErrorsTest, ShapeDisagreesWithByteRange) {
  expect_entry_error(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})", 20,
                     {"tensor \"w\"", "shape [2, 3] of F32 needs 24 bytes", "[0, 20] spans 20"});
}

TEST_F(SafetensorsErrorsTest, BadDataOffsets) {
  expect_entry_error(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})", 4,
                     {"tensor \"w\"", "\"data_offsets\" must be [begin, end]"});
  expect_entry_error(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", 4,
                     {"tensor \"w\"", "\"data_offsets\" must be [begin, end]"});
  expect_entry_error(R"({"dtype":"F32","shape":[1],"data_offsets":"0-4"})", 4,
                     {"tensor \"w\"", "\"data_offsets\" must be [begin, end]", "got string"});
}

TEST_F(SafetensorsErrorsTest, OffsetsOutsideDataSection) {
  expect_entry_error(
      R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})", 6,
      {"tensor \"w\"", "\"data_offsets\" [4, 8]", "past the end of the data section (6"});
  expect_entry_error(
      R"({"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]})", 0,
      {"tensor \"w\"", "past the end of the data section (0"});
}

TEST_F(SafetensorsErrorsTest, OffsetsReversed) {
  expect_entry_error(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})", 8,
                     {"tensor \"w\"", "\"data_offsets\" [8, 4] is reversed"});
}

TEST_F(SafetensorsErrorsTest, OverlappingRanges) {
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_open_error(make_image(header, std::string(12, '\0')),
                    {"tensor \"b\"", "[4, 12]", "overlap tensor \"a\"", "[0, 8]"});
  // An empty tensor placed inside another one overlaps too (the Python library rejects it).
  std::string inside = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  expect_open_error(make_image(inside, std::string(8, '\0')),
                    {"tensor \"e\"", "overlap tensor \"a\""});
}

TEST_F(SafetensorsErrorsTest, BytesOutsideEveryTensor) {
  std::string hole = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  expect_open_error(make_image(hole, std::string(12, '\0')),
                    {"bytes [4, 8) of the data section belong to no tensor", "tensor \"b\""});
  expect_entry_error(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 7,
                     {"last 3 bytes of the 7-byte data section belong to no tensor"});
  expect_open_error(make_image("{}      ", "x"), {"last 1 bytes"});
}

TEST_F(SafetensorsErrorsTest, RepeatedKey) {
  std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("w":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  expect_open_error(make_image(header, std::string(4, '\0')),
                    {"header", "key \"w\" appears twice"});
  expect_entry_error(R"({"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4,
                     {"key \"dtype\" appears twice"});
}

TEST_F(SafetensorsErrorsTest, BadMetadata) {
  expect_open_error(make_image(R"({"__metadata__":{"format":1}})"),
                    {"\"__metadata__\"", "key \"format\" must be a string, got number"});
  expect_open_error(make_image(R"({"__metadata__":[1]})"),
                    {"\"__metadata__\" must be an object of strings, got array"});
}

TEST_F(SafetensorsErrorsTest, FromBytesNamesTheImage) {
  expect_error<InvalidArgument>([] { SafetensorsFile::from_bytes("{}", "image-7"); },
                                {"image-7", "too short"});
  auto file = SafetensorsFile::from_bytes(make_image("{}      "), "image-8");
  expect_error<InvalidArgument>([&] { file->get("w.weight"); },
                                {"image-8", "no tensor named \"w.weight\""});
}

TEST_F(SafetensorsErrorsTest, OsFailuresAreIoErrors) {
  std::string missing = dir_.file("missing.safetensors");
  expect_error<IoError>([&] { SafetensorsFile::open(missing); },
                        {missing, "cannot open", "No such file"});
  expect_error<InvalidArgument>([&] { SafetensorsFile::open(dir_.path()); },
                                {dir_.path(), "not a regular file"});
}

TEST_F(SafetensorsErrorsTest, GetOfAbsentTensorNamesFileAndTensor) {
  std::string path = testing::data_dir() + "/all_dtypes.safetensors";
  auto file = SafetensorsFile::open(path);
  expect_error<InvalidArgument>([&] { file->get("nope"); }, {path, "no tensor named \"nope\""});
}

}  // namespace
}  // namespace lowbit::formats
