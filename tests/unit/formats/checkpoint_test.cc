// Checkpoint: single files, sharded directories with model.safetensors.index.json (the fixture is
// split by huggingface_hub and written by the safetensors library), loose files, and broken
// indexes.
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
using testing::to_hex;

void expect_sharded_fixture(const Checkpoint& ckpt, const std::string& dir) {
  const nlohmann::json& record = expected().at("sharded");
  std::vector<std::string> want_names;
  for (const auto& [name, shard] : record.at("index").at("weight_map").items()) {
    want_names.push_back(name);
  }
  std::sort(want_names.begin(), want_names.end());
  EXPECT_EQ(ckpt.names(), want_names);
  EXPECT_EQ(ckpt.files().size(), record.at("files").size());
  for (const auto& [name, shard] : record.at("index").at("weight_map").items()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(ckpt.has(name));
    EXPECT_EQ(ckpt.file_of(name), dir + "/" + shard.get<std::string>());
    const nlohmann::json& info = record["files"][shard.get<std::string>()]["tensors"][name];
    Tensor t = ckpt.get(name);
    EXPECT_EQ(dtype_name(t.dtype()), info.at("dtype").get<std::string>());
    EXPECT_EQ(t.shape(), info.at("shape").get<Shape>());
    EXPECT_EQ(to_hex(t.data(), t.nbytes()), info.at("hex").get<std::string>());
  }
}

TEST(CheckpointTest, OpensAShardedDirectory) {
  std::string dir = data_dir() + "/sharded";
  Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.path(), dir);
  expect_sharded_fixture(ckpt, dir);
}

TEST(CheckpointTest, OpensAnIndexFileDirectly) {
  std::string dir = data_dir() + "/sharded";
  expect_sharded_fixture(Checkpoint::open(dir + "/model.safetensors.index.json"), dir);
}

TEST(CheckpointTest, OpensASingleFile) {
  std::string path = data_dir() + "/all_dtypes.safetensors";
  Checkpoint ckpt = Checkpoint::open(path);
  EXPECT_EQ(ckpt.files().size(), 1u);
  EXPECT_EQ(ckpt.names().size(), expected()["all_dtypes.safetensors"]["tensors"].size());
  EXPECT_EQ(ckpt.file_of("bf16"), path);
}

// transformers loads model.safetensors when present; the other files here are test data.
TEST(CheckpointTest, PrefersModelSafetensorsInADirectory) {
  std::string dir = std::string(LOWBIT_SOURCE_DIR) + "/tests/golden/arch/llama-gqa";
  Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.files().size(), 1u);
  EXPECT_EQ(ckpt.file_of("model.embed_tokens.weight"), dir + "/model.safetensors");
}

class CheckpointErrorsTest : public ::testing::Test {
 protected:
  // A copy of the sharded fixture whose index is replaced by `index` (unless empty).
  std::string sharded_copy(const std::string& index = "") {
    std::string dir = dir_.file("ckpt");
    fs::copy(data_dir() + "/sharded", dir);
    if (!index.empty()) testing::write_file(index_path(), index);
    return dir;
  }
  std::string index_path() { return dir_.file("ckpt/model.safetensors.index.json"); }

  testing::TempDir dir_;
};

TEST_F(CheckpointErrorsTest, LooseFilesAreServedTogether) {
  std::string dir = sharded_copy();
  fs::remove(index_path());
  Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.files().size(), 3u);
  EXPECT_EQ(ckpt.names().size(), 6u);
}

TEST_F(CheckpointErrorsTest, IndexNamingAMissingShard) {
  std::string dir = sharded_copy();
  fs::remove(dir + "/model-00002-of-00003.safetensors");
  // a.weight is the first tensor (in name order) that the index puts in shard 2.
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir); },
                                {index_path(), "tensor \"a.weight\"",
                                 "shard \"model-00002-of-00003.safetensors\"", "missing"});
}

TEST_F(CheckpointErrorsTest, IndexNamingATensorTheShardLacks) {
  std::string dir = sharded_copy(R"({"weight_map": {
      "a.weight": "model-00002-of-00003.safetensors",
      "ghost": "model-00002-of-00003.safetensors"}})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir); },
                                {index_path(), "tensor \"ghost\"",
                                 "shard \"model-00002-of-00003.safetensors\"", "no such tensor"});
}

TEST_F(CheckpointErrorsTest, IndexPointingAtTheWrongShard) {
  std::string dir = sharded_copy(R"({"weight_map": {
      "a.weight": "model-00003-of-00003.safetensors",
      "e.emb": "model-00003-of-00003.safetensors"}})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir); },
                                {index_path(), "tensor \"a.weight\"", "no such tensor"});
}

TEST_F(CheckpointErrorsTest, TensorInTwoShards) {
  std::string dir = sharded_copy();
  // Shard 2 again under another name: each of its tensors is now in two files.
  fs::copy(dir + "/model-00002-of-00003.safetensors", dir + "/extra.safetensors");
  testing::write_file(index_path(), R"({"weight_map": {
      "a.weight": "model-00002-of-00003.safetensors",
      "b.weight": "extra.safetensors"}})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir); },
                                {index_path(), "tensor \"a.weight\"", "in two files",
                                 "extra.safetensors", "model-00002-of-00003.safetensors"});
  // The same without an index: loose files.
  fs::remove(index_path());
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir); },
                                {dir, "tensor \"a.weight\"", "in two files", "extra.safetensors"});
}

TEST_F(CheckpointErrorsTest, MalformedIndex) {
  sharded_copy("{\"weight_map\": {\"a.weight\": ");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir_.file("ckpt")); },
                                {index_path(), "index is not valid JSON"});
  testing::write_file(index_path(), "[]");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir_.file("ckpt")); },
                                {index_path(), "index must be a JSON object, got array"});
  testing::write_file(index_path(), R"({"metadata": {}})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir_.file("ckpt")); },
                                {index_path(), "missing field \"weight_map\""});
  testing::write_file(index_path(), R"({"weight_map": []})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir_.file("ckpt")); },
                                {index_path(), "field \"weight_map\" must be an object"});
  testing::write_file(index_path(), R"({"weight_map": {}})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir_.file("ckpt")); },
                                {index_path(), "\"weight_map\" lists no tensor"});
  testing::write_file(index_path(), R"({"weight_map": {"a.weight": 2}})");
  expect_error<InvalidArgument>(
      [&] { Checkpoint::open(dir_.file("ckpt")); },
      {index_path(), "tensor \"a.weight\"", "must be a file name string"});
  testing::write_file(index_path(), R"({"weight_map": {"a.weight": "../../etc/passwd"}})");
  expect_error<InvalidArgument>(
      [&] { Checkpoint::open(dir_.file("ckpt")); },
      {index_path(), "tensor \"a.weight\"", "inside the checkpoint directory"});
  testing::write_file(index_path(),
                      R"({"weight_map": {"a.weight": "x.safetensors", "a.weight": "y"}})");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir_.file("ckpt")); },
                                {index_path(), "key \"a.weight\" appears twice"});
}

TEST_F(CheckpointErrorsTest, BadShardIsNamedByItsPath) {
  std::string dir = sharded_copy();
  testing::write_file(dir + "/model-00003-of-00003.safetensors", "garbage!");
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir); },
                                {dir + "/model-00003-of-00003.safetensors", "header length"});
}

TEST_F(CheckpointErrorsTest, MissingPathsAndTensors) {
  std::string missing = dir_.file("nothing-here");
  expect_error<IoError>([&] { Checkpoint::open(missing); }, {missing, "not found"});
  expect_error<InvalidArgument>([&] { Checkpoint::open(dir_.path()); },
                                {dir_.path(), "no .safetensors file"});
  std::string dir = sharded_copy();
  Checkpoint ckpt = Checkpoint::open(dir);
  expect_error<InvalidArgument>([&] { ckpt.get("lm_head.weight"); },
                                {dir, "no tensor named \"lm_head.weight\""});
  expect_error<InvalidArgument>([&] { ckpt.file_of("lm_head.weight"); },
                                {dir, "no tensor named \"lm_head.weight\""});
}

}  // namespace
}  // namespace lowbit::formats
