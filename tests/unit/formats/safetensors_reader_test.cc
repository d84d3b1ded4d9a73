// Reading files written by the Python safetensors library (tests/unit/formats/data, made by
// scripts/fixtures/make_safetensors_vectors.py): every dtype, a scalar, empty tensors, metadata,
// names that need escaping.
#include <cstdint>
#include <string>

#include "formats/safetensors.h"
#include "safetensors_test_util.h"

namespace lowbit::formats {
namespace {

using testing::data_dir;
using testing::expected;
using testing::to_hex;

// Checks every tensor of `file` against what the library recorded for `fixture`.
void expect_matches_fixture(const SafetensorsFile& file, const std::string& fixture) {
  const nlohmann::json& want = expected().at(fixture);
  std::vector<std::string> want_names;
  for (const auto& [name, info] : want.at("tensors").items()) want_names.push_back(name);
  EXPECT_EQ(file.names(), want_names);
  for (const auto& [name, info] : want.at("tensors").items()) {
    SCOPED_TRACE(fixture + " tensor " + name);
    ASSERT_TRUE(file.has(name));
    Tensor t = file.get(name);
    EXPECT_EQ(dtype_name(t.dtype()), info.at("dtype").get<std::string>());
    EXPECT_EQ(t.shape(), info.at("shape").get<Shape>());
    EXPECT_EQ(to_hex(t.data(), t.nbytes()), info.at("hex").get<std::string>());
    const SafetensorsFile::Entry& entry = file.entries().at(name);
    EXPECT_EQ(entry.begin, info.at("data_offsets")[0].get<size_t>());
    EXPECT_EQ(entry.end, info.at("data_offsets")[1].get<size_t>());
    EXPECT_NE(t.data(), nullptr);  // even for empty tensors: empty() means "no tensor"
  }
  std::map<std::string, std::string> want_metadata;
  if (!want.at("metadata").is_null()) want_metadata = want.at("metadata");
  EXPECT_EQ(file.metadata(), want_metadata);
}

TEST(SafetensorsReaderTest, ReadsEveryDtypeAsThePythonLibraryWroteIt) {
  auto file = SafetensorsFile::open(data_dir() + "/all_dtypes.safetensors");
  EXPECT_EQ(file->path(), data_dir() + "/all_dtypes.safetensors");
  expect_matches_fixture(*file, "all_dtypes.safetensors");
  // The names cover all twelve dtypes.
  std::set<std::string> dtypes;
  for (const auto& [name, entry] : file->entries())
    dtypes.insert(std::string(dtype_name(entry.dtype)));
  EXPECT_EQ(dtypes.size(), 12u);
  EXPECT_EQ(file->get("scalar").ndim(), 0);
  EXPECT_EQ(file->get("scalar").numel(), 1);
  EXPECT_EQ(file->get("empty").numel(), 0);
  EXPECT_EQ(file->get("scalar").data_as<float>()[0], 3.5f);
}

TEST(SafetensorsReaderTest, ReadsEscapedAndNonAsciiNames) {
  auto file = SafetensorsFile::open(data_dir() + "/names.safetensors");
  expect_matches_fixture(*file, "names.safetensors");
  EXPECT_TRUE(file->has("new\nline"));
  EXPECT_TRUE(file->has("a\"quote"));
  EXPECT_TRUE(file->has("unicod\xC3\xA9 \xE2\x9C\x93"));
}

TEST(SafetensorsReaderTest, ReadsMetadataAndEmptyFiles) {
  auto meta = SafetensorsFile::open(data_dir() + "/metadata.safetensors");
  expect_matches_fixture(*meta, "metadata.safetensors");
  EXPECT_EQ(meta->metadata().at("note"), "q\"\n\\");
  auto empty = SafetensorsFile::open(data_dir() + "/empty.safetensors");
  expect_matches_fixture(*empty, "empty.safetensors");
  EXPECT_TRUE(empty->names().empty());
}

TEST(SafetensorsReaderTest, FromBytesReadsTheSameAsOpen) {
  std::string bytes = testing::read_file(data_dir() + "/all_dtypes.safetensors");
  auto file = SafetensorsFile::from_bytes(bytes, "in-memory image");
  EXPECT_EQ(file->path(), "in-memory image");
  expect_matches_fixture(*file, "all_dtypes.safetensors");
}

TEST(SafetensorsReaderTest, TensorsAreZeroCopyViewsThatKeepTheMappingAlive) {
  auto file = SafetensorsFile::open(data_dir() + "/all_dtypes.safetensors");
  Tensor a = file->get("f64");
  Tensor b = file->get("f64");
  EXPECT_EQ(a.data(), b.data());  // both views of the mapping, not copies
  for (const std::string& name : file->names()) {
    Tensor t = file->get(name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % dtype_size(t.dtype()), 0u) << name;
  }
  std::string want = expected()["all_dtypes.safetensors"]["tensors"]["f64"]["hex"];
  file.reset();  // the tensor's shared ownership must keep the file mapped
  EXPECT_EQ(to_hex(a.data(), a.nbytes()), want);
}

// A header whose length is not a multiple of 8 (legal; other writers do it) leaves an F32 tensor
// misaligned; get() must then hand out an aligned copy rather than an unaligned float pointer.
TEST(SafetensorsReaderTest, MisalignedTensorIsCopiedToAlignedMemory) {
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";  // 55 bytes
  ASSERT_NE((8 + header.size()) % 4, 0u);
  std::string data("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f
  auto file = SafetensorsFile::from_bytes(testing::make_image(header, data), "misaligned");
  Tensor w = file->get("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % 4, 0u);
  EXPECT_EQ(w.data_as<float>()[0], 1.0f);
  EXPECT_EQ(w.data_as<float>()[1], -2.0f);
}

// Reads the checked-in model fixtures too (written by transformers' save_pretrained).
TEST(SafetensorsReaderTest, ReadsTransformersCheckpoints) {
  std::string path =
      std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/arch/llama-gqa/model.safetensors";
  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  Tensor embed = file->get("model.embed_tokens.weight");
  EXPECT_EQ(embed.dtype(), DType::BF16);
  EXPECT_EQ(embed.shape(), (Shape{512, 128}));
}

}  // namespace
}  // namespace lowbit::formats
