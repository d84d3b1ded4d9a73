// GgufFile on files written by gguf-py's GGUFWriter (scripts/fixtures/gguf_fixtures.py): metadata
// values and tensor infos must equal what the script wrote and what gguf-py's GGUFReader reads.
#include "formats/gguf.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "gguf_test_util.h"

namespace lowbit::formats {
namespace {

using nlohmann::json;
using testing::expect_error;
using testing::gguf_dir;

const json& expected(const std::string& file) {
  static const json all = json::parse(testing::read_file(gguf_dir() + "/expected.json"));
  return all.at(file);
}

std::shared_ptr<GgufFile> open_fixture(const std::string& name) {
  return GgufFile::open(gguf_dir() + "/" + name + ".gguf");
}

// Compares one value with its JSON description {"type", "value"[, "element_type"]}.
void expect_value(const GgufValue& value, const json& want, const std::string& key) {
  SCOPED_TRACE(key);
  ASSERT_EQ(gguf_type_name(value.type()), want.at("type").get<std::string>());
  const json& v = want.at("value");
  switch (value.type()) {
    case GgufType::STRING:
      EXPECT_EQ(value.as_string(key), v.get<std::string>());
      break;
    case GgufType::BOOL:
      EXPECT_EQ(value.as_bool(key), v.get<bool>());
      break;
    case GgufType::FLOAT32:
    case GgufType::FLOAT64:
      // The JSON holds the exact double of the stored float32 / float64.
      EXPECT_EQ(value.as_float(key), v.get<double>());
      break;
    case GgufType::UINT64:
      EXPECT_EQ(value.as_uint(key), v.get<uint64_t>());
      break;
    case GgufType::ARRAY: {
      const GgufArray& a = value.as_array(key);
      ASSERT_EQ(gguf_type_name(a.element_type), want.at("element_type").get<std::string>());
      ASSERT_EQ(a.items.size(), v.size());
      for (size_t i = 0; i < a.items.size(); ++i) {
        json item = a.element_type == GgufType::ARRAY
                        ? v[i]
                        : json{{"type", want.at("element_type")}, {"value", v[i]}};
        expect_value(a.items[i], item, key + "[" + std::to_string(i) + "]");
      }
      break;
    }
    default:
      EXPECT_EQ(value.as_int(key), v.get<int64_t>());
      break;
  }
}

TEST(GgufTest, MetadataEqualsWhatGgufPyWrote) {
  auto file = open_fixture("tensors");
  const json& want = expected("tensors");
  EXPECT_EQ(file->version(), want.at("version").get<uint32_t>());
  EXPECT_EQ(file->alignment(), want.at("alignment").get<uint64_t>());
  EXPECT_EQ(file->data_offset(), want.at("data_offset").get<uint64_t>());
  // Every key, in file order (GGUFReader's order), with its type and value.
  std::vector<std::string> keys;
  for (const auto& [key, value] : file->metadata()) keys.push_back(key);
  EXPECT_EQ(keys, want.at("metadata_keys").get<std::vector<std::string>>());
  for (const auto& [key, value] : want.at("metadata").items()) {
    const GgufValue* got = file->find(key);
    ASSERT_NE(got, nullptr) << key;
    expect_value(*got, value, key);
  }
}

TEST(GgufTest, TypedGetters) {
  auto file = open_fixture("tensors");
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_uint("llama.context_length"), 2048u);
  EXPECT_EQ(file->get_int("test.int8"), -100);
  EXPECT_EQ(file->get_uint("test.uint64"), 18000000000000000000ull);
  EXPECT_EQ(file->get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(file->get_float("llama.attention.layer_norm_rms_epsilon"), static_cast<double>(1e-5f));
  EXPECT_EQ(file->get_float("test.float64"), 2.718281828459045);
  EXPECT_TRUE(file->get_bool("test.bool_true"));
  EXPECT_FALSE(file->get_bool("test.bool_false"));
  EXPECT_EQ(file->get_string("test.string_utf8"),
            "h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93 \xE6\x97\xA5\xE6\x9C\xAC");
  EXPECT_EQ(file->get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"<unk>", "<s>", "</s>", "\xE2\x96\x81the",
                                      "\xE2\x96\x81\xC3\xA9", "<0x0A>"}));
  EXPECT_EQ(file->get_float_array("tokenizer.ggml.scores"),
            (std::vector<double>{0, 0, 0, -1.5, -2.25, -3}));
  EXPECT_EQ(file->get_int_array("tokenizer.ggml.token_type"),
            (std::vector<int64_t>{2, 3, 3, 1, 1, 6}));
  EXPECT_EQ(file->get_int_array("test.array_int64"),
            (std::vector<int64_t>{-(int64_t{1} << 62), int64_t{1} << 62}));
  EXPECT_EQ(file->get_uint("no.such.key", 7), 7u);
  EXPECT_EQ(file->get_float("no.such.key", 0.5), 0.5);
  EXPECT_EQ(file->get_uint("llama.context_length", 7), 2048u);
}

TEST(GgufTest, TypedGetterErrorsNameFileAndKey) {
  auto file = open_fixture("tensors");
  const std::string path = file->path();
  expect_error<InvalidArgument>([&] { file->get("no.such.key"); },
                                {path, "\"no.such.key\"", "missing"});
  expect_error<InvalidArgument>([&] { file->get_string("llama.context_length"); },
                                {path, "\"llama.context_length\"", "is UINT32, expected STRING"});
  expect_error<InvalidArgument>([&] { file->get_uint("test.int8"); },
                                {"\"test.int8\"", "-100 is negative"});
  expect_error<InvalidArgument>([&] { file->get_int("test.uint64"); },
                                {"\"test.uint64\"", "does not fit in int64"});
  expect_error<InvalidArgument>([&] { file->get_bool("test.uint8"); },
                                {"\"test.uint8\"", "is UINT8, expected BOOL"});
  expect_error<InvalidArgument>([&] { file->get_float("general.name"); },
                                {"\"general.name\"", "is STRING, expected a number"});
  expect_error<InvalidArgument>([&] { file->get_string_array("tokenizer.ggml.scores"); },
                                {"\"tokenizer.ggml.scores\"", "ARRAY of FLOAT32, expected STRING"});
  expect_error<InvalidArgument>([&] { file->get_int_array("tokenizer.ggml.tokens"); },
                                {"\"tokenizer.ggml.tokens\" element 0", "is STRING"});
  expect_error<InvalidArgument>([&] { file->tensor("missing.weight"); },
                                {path, "no tensor named \"missing.weight\""});
  expect_error<InvalidArgument>([&] { file->get_string_array("test.string_empty"); },
                                {"is STRING, expected ARRAY"});
}

void expect_tensors(const std::string& fixture) {
  auto file = open_fixture(fixture);
  const json& want = expected(fixture);
  EXPECT_EQ(file->file_size(), want.at("file_size").get<uint64_t>());
  const json& tensors = want.at("tensors");
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = file->tensors()[i];
    const json& w = tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, w.at("name").get<std::string>());
    EXPECT_EQ(ggml_type_name(t.type), w.at("type").get<std::string>());
    EXPECT_EQ(t.ne, w.at("ne").get<std::vector<int64_t>>());
    Shape reversed(t.ne.rbegin(), t.ne.rend());
    EXPECT_EQ(t.shape(), reversed);
    EXPECT_EQ(t.nbytes, w.at("n_bytes").get<uint64_t>());
    EXPECT_EQ(file->data_offset() + t.offset, w.at("data_offset").get<uint64_t>());
    std::span<const uint8_t> data = file->tensor_data(t);
    EXPECT_EQ(data.size(), t.nbytes);
    EXPECT_EQ(file->tensor_data(t.name).data(), data.data());
    EXPECT_EQ(file->find_tensor(t.name), &t);
  }
}

TEST(GgufTest, TensorInfosEqualGgufPyReader) { expect_tensors("tensors"); }

TEST(GgufTest, CustomAlignment) {
  expect_tensors("aligned64");
  auto file = open_fixture("aligned64");
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->data_offset() % 64, 0u);
  EXPECT_EQ(file->tensor("b").offset, 64u);  // "a" is 12 bytes, padded to 64
}

TEST(GgufTest, ShapeIsReversedNe) {
  auto file = open_fixture("tensors");
  const GgufTensorInfo& t = file->tensor("q.q8_0_3d");
  EXPECT_EQ(t.ne, (std::vector<int64_t>{32, 3, 2}));
  EXPECT_EQ(t.shape(), (Shape{2, 3, 32}));
  EXPECT_EQ(t.numel(), 192);
  EXPECT_EQ(t.type, GgmlType::Q8_0);
  EXPECT_EQ(t.nbytes, 6u * 34u);
}

TEST(GgufTest, Version2IsAccepted) {
  // Version 2 differs from 3 only for big-endian files: the little-endian layout is the same.
  std::string bytes = testing::read_file(gguf_dir() + "/tensors.gguf");
  bytes[4] = 2;
  auto file = GgufFile::from_bytes(bytes, "v2.gguf");
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->tensors().size(), expected("tensors").at("tensors").size());
}

TEST(GgufTest, MinimalFiles) {
  testing::GgufImage empty;
  auto file = GgufFile::from_bytes(empty.bytes(), "empty.gguf");
  EXPECT_TRUE(file->metadata().empty());
  EXPECT_TRUE(file->tensors().empty());
  // Metadata only, no data section at all (nothing after the last pair).
  testing::GgufImage vocab;
  vocab.pair_string("general.architecture", "llama");
  vocab.pair("tokenizer.ggml.tokens", 9, testing::le32(8) + testing::le64(0));  // empty array
  std::string bytes = vocab.header() + vocab.pairs;
  file = GgufFile::from_bytes(bytes, "vocab.gguf");
  EXPECT_EQ(file->get_string_array("tokenizer.ggml.tokens"), std::vector<std::string>{});
}

TEST(GgufTest, OpenErrors) {
  expect_error<IoError>([] { GgufFile::open("/nonexistent/model.gguf"); },
                        {"/nonexistent/model.gguf", "cannot open"});
  expect_error<InvalidArgument>([] { GgufFile::open(gguf_dir()); },
                                {gguf_dir(), "not a regular file"});
}

TEST(GgufTest, ValueToString) {
  auto file = open_fixture("tensors");
  EXPECT_EQ(file->get("test.nested").to_string(), "[[1, 2, 3], [4], [5, 6]]");
  EXPECT_EQ(file->get("general.name").to_string(), "\"lowbit gguf fixture\"");
  EXPECT_EQ(file->get("test.bool_true").to_string(), "true");
}

}  // namespace
}  // namespace lowbit::formats
