// Bad input through the CLI: one clear error line naming the file and the field or tensor, exit
// code 2, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.h"

namespace lowbit::testing {
namespace {

namespace fs = std::filesystem;
const char* kModel = "models/ref-llama-19m";

void expect_clean_error(const CliResult& result, const std::vector<std::string>& mentions) {
  EXPECT_EQ(result.exit_code, 2) << result.output;
  for (const auto& m : mentions) EXPECT_NE(result.output.find(m), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("internal error"), std::string::npos) << result.output;
}

TEST(CliBadInputTest, MissingModelDirectory) {
  auto r = run_lowbit("generate /nonexistent/model --prompt hi");
  expect_clean_error(r, {"/nonexistent/model"});
}

TEST(CliBadInputTest, TruncatedShard) {
  fs::path dir = scratch_copy(kModel, "truncated");
  fs::path shard = dir / "model-00002-of-00004.safetensors";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  expect_clean_error(run_lowbit("generate " + quoted(dir) + " --prompt hi -n 2"),
                     {"model-00002-of-00004.safetensors"});
}

TEST(CliBadInputTest, LyingHeaderLength) {
  fs::path dir = scratch_copy(kModel, "lying-header");
  fs::path shard = dir / "model-00003-of-00004.safetensors";
  std::string bytes = read_file(shard);
  bytes[5] = '\x7f';  // header length now far larger than the file
  write_file(shard, bytes);
  expect_clean_error(run_lowbit("inspect " + quoted(dir)), {"model-00003-of-00004.safetensors"});
}

TEST(CliBadInputTest, MalformedConfigJson) {
  fs::path dir = scratch_copy(kModel, "bad-config");
  write_file(dir / "config.json", "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": ");
  expect_clean_error(run_lowbit("generate " + quoted(dir) + " --prompt hi"), {"config.json"});
}

TEST(CliBadInputTest, WrongFieldTypeInConfig) {
  fs::path dir = scratch_copy(kModel, "bad-field");
  std::string config = read_file(dir / "config.json");
  config.replace(config.find("\"hidden_size\": 384"), 18, "\"hidden_size\": \"big\"");
  write_file(dir / "config.json", config);
  expect_clean_error(run_lowbit("generate " + quoted(dir) + " --prompt hi"),
                     {"config.json", "hidden_size"});
}

TEST(CliBadInputTest, UnsupportedArchitecture) {
  fs::path dir = scratch_copy(kModel, "unsupported-arch");
  std::string config = read_file(dir / "config.json");
  config.replace(config.find("LlamaForCausalLM"), 16, "BertForMaskedLM");
  write_file(dir / "config.json", config);
  expect_clean_error(run_lowbit("generate " + quoted(dir) + " --prompt hi"),
                     {"BertForMaskedLM"});
}

// Renames a tensor consistently in its shard header and the index (same length, so the header
// stays valid): the checkpoint is well-formed but lacks a tensor the model needs.
TEST(CliBadInputTest, MissingTensor) {
  fs::path dir = scratch_copy(kModel, "missing-tensor");
  fs::path index_path = dir / "model.safetensors.index.json";
  std::string index = read_file(index_path);
  size_t at = index.find("\"model.norm.weight\"");
  ASSERT_NE(at, std::string::npos);
  size_t file_start = index.find('"', index.find(':', at)) + 1;
  std::string shard_name = index.substr(file_start, index.find('"', file_start) - file_start);
  index.replace(at, 19, "\"model.norm.weighx\"");
  write_file(index_path, index);
  std::string shard = read_file(dir / shard_name);
  size_t in_header = shard.find("\"model.norm.weight\"");
  ASSERT_NE(in_header, std::string::npos);
  shard.replace(in_header, 19, "\"model.norm.weighx\"");
  write_file(dir / shard_name, shard);
  expect_clean_error(run_lowbit("generate " + quoted(dir) + " --prompt hi -n 2"),
                     {"model.norm.weight"});
}

// The index names a tensor that its shard does not contain.
TEST(CliBadInputTest, IndexPointsToAbsentTensor) {
  fs::path dir = scratch_copy(kModel, "index-lies");
  fs::path index_path = dir / "model.safetensors.index.json";
  std::string index = read_file(index_path);
  size_t at = index.find("\"model.norm.weight\"");
  ASSERT_NE(at, std::string::npos);
  index.replace(at, 19, "\"model.norm.weighx\"");
  write_file(index_path, index);
  expect_clean_error(run_lowbit("inspect " + quoted(dir)),
                     {"model.safetensors.index.json", "model.norm.weighx"});
}

TEST(CliBadInputTest, MissingShard) {
  fs::path dir = scratch_copy(kModel, "missing-shard");
  fs::remove(dir / "model-00004-of-00004.safetensors");
  expect_clean_error(run_lowbit("generate " + quoted(dir) + " --prompt hi"),
                     {"model-00004-of-00004.safetensors"});
}

TEST(CliBadInputTest, MalformedTokenizerJson) {
  fs::path dir = scratch_copy(kModel, "bad-tokenizer");
  write_file(dir / "tokenizer.json", "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": 3}}");
  expect_clean_error(run_lowbit("tokenize " + quoted(dir) + " --text hi"), {"tokenizer.json"});
}

TEST(CliBadInputTest, BadPromptIds) {
  expect_clean_error(run_lowbit(std::string("generate ") + repo_path(kModel) + " --prompt-ids 1,x,3"),
                     {"--prompt-ids", "'x'"});
  expect_clean_error(run_lowbit(std::string("generate ") + repo_path(kModel) + " --prompt-ids 99999 -n 1"),
                     {"99999"});
}

TEST(CliBadInputTest, UnknownFlagIsAUsageError) {
  auto r = run_lowbit("generate --no-such-flag");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace lowbit::testing
