// The writer must produce the same bytes as the Python safetensors library for the same tensors
// (the fixtures in tests/unit/formats/data are the library's output), and sharded checkpoints
// split as huggingface_hub splits them.
#include <filesystem>
#include <string>

#include "formats/safetensors.h"
#include "safetensors_test_util.h"

namespace lowbit::formats {
namespace {

namespace fs = std::filesystem;
using testing::data_dir;
using testing::expect_error;
using testing::expected;
using testing::from_hex;
using testing::read_file;
using testing::to_hex;

// Owned tensors rebuilt from the library's record of a file: same names, dtypes, shapes, bytes.
std::map<std::string, Tensor> tensors_from_record(const nlohmann::json& record) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, info] : record.at("tensors").items()) {
    DType dtype;
    EXPECT_TRUE(parse_dtype(info.at("dtype").get<std::string>(), &dtype));
    Tensor t = Tensor::zeros(dtype, info.at("shape").get<Shape>());
    std::string bytes = from_hex(info.at("hex").get<std::string>());
    EXPECT_EQ(bytes.size(), t.nbytes());
    if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
    out.emplace(name, t);
  }
  return out;
}

std::map<std::string, std::string> metadata_from_record(const nlohmann::json& record) {
  if (record.at("metadata").is_null()) return {};
  return record.at("metadata").get<std::map<std::string, std::string>>();
}

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  // Writes what the library wrote for `fixture` and compares the two files byte for byte.
  void expect_same_bytes_as_library(const std::string& fixture) {
    SCOPED_TRACE(fixture);
    const nlohmann::json& record = expected().at(fixture);
    std::string out = dir_.file(fixture);
    write_safetensors(out, tensors_from_record(record), metadata_from_record(record));
    std::string ours = read_file(out);
    std::string theirs = read_file(data_dir() + "/" + fixture);
    EXPECT_EQ(to_hex(ours.data(), ours.size()), to_hex(theirs.data(), theirs.size()));
    EXPECT_FALSE(fs::exists(out + ".tmp"));
  }

  testing::TempDir dir_;
};

TEST_F(SafetensorsWriterTest, EveryDtypeMatchesThePythonLibraryByteForByte) {
  expect_same_bytes_as_library("all_dtypes.safetensors");
}

TEST_F(SafetensorsWriterTest, EscapedNamesAndLayoutOrderMatchThePythonLibrary) {
  expect_same_bytes_as_library("names.safetensors");
}

TEST_F(SafetensorsWriterTest, EmptyFileMatchesThePythonLibrary) {
  expect_same_bytes_as_library("empty.safetensors");
}

// The library writes several metadata keys in a random order, so compare content, not bytes.
TEST_F(SafetensorsWriterTest, SeveralMetadataKeysRoundTrip) {
  const nlohmann::json& record = expected().at("metadata.safetensors");
  std::string out = dir_.file("metadata.safetensors");
  write_safetensors(out, tensors_from_record(record), metadata_from_record(record));
  auto file = SafetensorsFile::open(out);
  EXPECT_EQ(file->metadata(), metadata_from_record(record));
  EXPECT_EQ(fs::file_size(out), record.at("file_size").get<size_t>());
  Tensor x = file->get("x");
  EXPECT_EQ(to_hex(x.data(), x.nbytes()), record["tensors"]["x"]["hex"].get<std::string>());
}

TEST_F(SafetensorsWriterTest, OverwritesAtomicallyAndRejectsBadInput) {
  std::string out = dir_.file("w.safetensors");
  testing::write_file(out, "old contents");
  Tensor t = Tensor::zeros(DType::F32, {2});
  t.data_as<float>()[1] = 7.0f;
  write_safetensors(out, {{"t", t}});
  EXPECT_EQ(SafetensorsFile::open(out)->get("t").data_as<float>()[1], 7.0f);

  expect_error<InvalidArgument>(
      [&] {
        write_safetensors(out, {{"__metadata__", t}});
      },
      {out, "\"__metadata__\" is reserved"});
  expect_error<InvalidArgument>(
      [&] {
        write_safetensors(out, {{"bad\xff", t}});
      },
      {out, "tensor name", "not valid UTF-8"});
  expect_error<InvalidArgument>(
      [&] {
        write_safetensors(out, {{"none", Tensor()}});
      },
      {out, "tensor \"none\" has no data"});
  std::string nowhere = dir_.file("no/such/dir/w.safetensors");
  expect_error<IoError>(
      [&] {
        write_safetensors(nowhere, {{"t", t}});
      },
      {nowhere, "cannot create"});
  // Failed writes leave the previous file intact and no temporary behind.
  EXPECT_EQ(SafetensorsFile::open(out)->get("t").data_as<float>()[1], 7.0f);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST_F(SafetensorsWriterTest, ShardsLikeHuggingfaceHubAndMatchTheLibraryBytes) {
  const nlohmann::json& record = expected().at("sharded");
  std::map<std::string, Tensor> tensors;
  for (const auto& [file, info] : record.at("files").items())
    tensors.merge(tensors_from_record(info));
  std::string out = dir_.file("ckpt");
  write_sharded_safetensors(out, tensors, record.at("max_shard_size").get<size_t>(),
                            {{"format", "np"}});
  std::set<std::string> written;
  for (const auto& entry : fs::directory_iterator(out)) written.insert(entry.path().filename());
  std::set<std::string> want = {"model.safetensors.index.json"};
  for (const auto& [file, info] : record.at("files").items()) {
    want.insert(file);
    EXPECT_EQ(read_file(out + "/" + file), read_file(data_dir() + "/sharded/" + file)) << file;
  }
  EXPECT_EQ(written, want);
  nlohmann::json index = nlohmann::json::parse(read_file(out + "/model.safetensors.index.json"));
  EXPECT_EQ(index, record.at("index"));  // weight_map and metadata.total_size
}

TEST_F(SafetensorsWriterTest, SingleShardIsModelSafetensorsAndStaleFilesGo) {
  std::string out = dir_.file("ckpt");
  fs::create_directories(out);
  for (const char* stale : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                            "model.safetensors.index.json"}) {
    testing::write_file(out + "/" + stale, "stale");
  }
  testing::write_file(out + "/model.safetensors.backup", "keep");
  Tensor t = Tensor::zeros(DType::BF16, {3});
  write_sharded_safetensors(out, {{"a", t}, {"b", t}}, 1 << 20);
  std::set<std::string> written;
  for (const auto& entry : fs::directory_iterator(out)) written.insert(entry.path().filename());
  EXPECT_EQ(written, (std::set<std::string>{"model.safetensors", "model.safetensors.backup"}));
  EXPECT_EQ(Checkpoint::open(out).names(), (std::vector<std::string>{"a", "b"}));
}

TEST_F(SafetensorsWriterTest, ShardedRoundTripThroughCheckpoint) {
  std::map<std::string, Tensor> tensors;
  for (int i = 0; i < 7; ++i) {
    Tensor t = Tensor::zeros(i % 2 ? DType::F32 : DType::I8, {i + 1, 3});
    for (size_t b = 0; b < t.nbytes(); ++b)
      static_cast<uint8_t*>(t.data())[b] = uint8_t(i * 31 + b);
    tensors.emplace("layer." + std::to_string(i), t);
  }
  std::string out = dir_.file("ckpt");
  write_sharded_safetensors(out, tensors, 40);
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  Checkpoint ckpt = Checkpoint::open(out);
  EXPECT_GT(ckpt.files().size(), 1u);
  ASSERT_EQ(ckpt.names().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    Tensor got = ckpt.get(name);
    EXPECT_EQ(got.dtype(), t.dtype());
    EXPECT_EQ(got.shape(), t.shape());
    EXPECT_EQ(to_hex(got.data(), got.nbytes()), to_hex(t.data(), t.nbytes())) << name;
  }
}

}  // namespace
}  // namespace lowbit::formats
