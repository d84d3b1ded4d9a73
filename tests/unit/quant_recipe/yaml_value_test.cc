// detail::load_yaml: YAML read the way PyYAML's safe_load (llm-compressor's reader) reads it, plus
// the Python tags llm-compressor writes. Scalar typing is checked against data/yaml_scalars.json,
// which scripts/reference/make_recipe_goldens.py made with PyYAML 6.0.4.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "lowbit/error.h"
#include "quant/recipe/yaml_value.h"

namespace lowbit::quant::detail {
namespace {

using Kind = YamlValue::Kind;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

YamlValue value_of(const std::string& doc) {
  YamlValue v = load_yaml(doc, "test.yaml");
  EXPECT_EQ(v.kind_, Kind::Map);
  const YamlValue* x = v.find("v");
  EXPECT_NE(x, nullptr);
  return x ? *x : YamlValue{};
}

std::string error_of(const std::string& doc) {
  try {
    load_yaml(doc, "test.yaml");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(YamlValueTest, PlainScalarsAreTypedLikePyYaml) {
  const auto rows = nlohmann::json::parse(
      read_file(std::string(LOWBIT_SOURCE_DIR) + "/tests/unit/quant_recipe/data/yaml_scalars.json"));
  ASSERT_GT(rows.size(), 40u);
  for (const auto& row : rows) {
    const std::string text = row[0], type = row[1];
    SCOPED_TRACE("scalar `" + text + "` (PyYAML: " + type + ")");
    const YamlValue v = value_of("v: " + text);
    if (type == "null") {
      EXPECT_EQ(v.kind_, Kind::Null);
    } else if (type == "bool") {
      ASSERT_EQ(v.kind_, Kind::Bool);
      EXPECT_EQ(v.bool_, row[2].get<bool>());
    } else if (type == "int") {
      ASSERT_EQ(v.kind_, Kind::Int);
      EXPECT_EQ(v.int_, row[2].get<int64_t>());
    } else if (type == "str") {
      ASSERT_EQ(v.kind_, Kind::String);
      EXPECT_EQ(v.text_, row[2].get<std::string>());
    } else {
      ASSERT_EQ(v.kind_, Kind::Float);
      if (row[2].is_string()) {  // Python's repr of inf / nan
        const std::string r = row[2];
        if (r == "nan") {
          EXPECT_TRUE(std::isnan(v.float_));
        } else {
          EXPECT_EQ(v.float_, r[0] == '-' ? -INFINITY : INFINITY);
        }
      } else {
        // Exact: both sides parse the same decimal text to the nearest double.
        EXPECT_EQ(v.float_, row[2].get<double>());
        EXPECT_EQ(std::signbit(v.float_), std::signbit(row[2].get<double>()));
      }
    }
  }
}

TEST(YamlValueTest, QuotedAndTaggedScalars) {
  EXPECT_EQ(value_of("v: 'yes'").kind_, Kind::String);
  EXPECT_EQ(value_of("v: \"12\"").text_, "12");
  EXPECT_EQ(value_of("v: !!str 12").kind_, Kind::String);
  const YamlValue f = value_of("v: !!float 3");
  EXPECT_EQ(f.kind_, Kind::Float);
  EXPECT_EQ(f.float_, 3.0);
  EXPECT_EQ(value_of("v: !!int 0x10").int_, 16);
  EXPECT_NE(error_of("v: !!int abc").find("test.yaml:1:"), std::string::npos);
  EXPECT_NE(error_of("v: !custom x").find("unsupported YAML tag"), std::string::npos);
}

TEST(YamlValueTest, PythonObjectsLlmCompressorWrites) {
  const YamlValue e = value_of(
      "v: !!python/object/apply:compressed_tensors.quantization.quant_args.QuantizationStrategy [\n  group]");
  EXPECT_EQ(e.kind_, Kind::String);
  EXPECT_EQ(e.text_, "group");
  const YamlValue s = value_of(
      "v: !!python/object/apply:llmcompressor.sentinel.Sentinel [not_provided,\n"
      "  /venv/lib/python3.11/site-packages/llmcompressor/sentinel.py]");
  EXPECT_EQ(s.kind_, Kind::Sentinel);
  EXPECT_EQ(s.text_, "not_provided");
  const YamlValue t = value_of("v: !!python/tuple\n- [a, b]\n- c\n");
  ASSERT_EQ(t.kind_, Kind::Seq);
  EXPECT_EQ(t.items_.size(), 2u);
  EXPECT_EQ(value_of("v: !!python/object/apply:torch.device\n- cuda\n- 0\n").text_, "cuda:0");
  EXPECT_NE(error_of("v: !!python/object/apply:os.system [ls]").find("unsupported Python object os.system"),
            std::string::npos);
  EXPECT_NE(error_of("v: !!python/object:foo.Bar {a: 1}").find("unsupported YAML tag"), std::string::npos);
}

TEST(YamlValueTest, MappingsKeepOrderAndRejectDuplicates) {
  const YamlValue v = load_yaml("b: 1\na: 2\nc: {z: 1, y: 2}\n", "x");
  ASSERT_EQ(v.keys_.size(), 3u);
  EXPECT_EQ(v.keys_[0], "b");
  EXPECT_EQ(v.keys_[2], "c");
  EXPECT_EQ(v.items_[2].keys_[0], "z");
  EXPECT_EQ(v.items_[1].line_, 2);
  const std::string dup = error_of("a: 1\nb: 2\na: 3\n");
  EXPECT_NE(dup.find("test.yaml:3: duplicate key `a`"), std::string::npos) << dup;
  EXPECT_NE(error_of("? [a]\n: 1\n").find("keys must be plain strings"), std::string::npos);
}

TEST(YamlValueTest, MergeKeysAsPyYamlDoes) {
  const YamlValue v = load_yaml("base: &b {x: 1, y: 2}\nv:\n  <<: *b\n  y: 3\n  z: 4\n", "x");
  const YamlValue* m = v.find("v");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->keys_.size(), 3u);  // PyYAML: {'x': 1, 'y': 3, 'z': 4}
  EXPECT_EQ(m->keys_[0], "x");
  EXPECT_EQ(m->find("y")->int_, 3);
  EXPECT_EQ(m->find("z")->int_, 4);
}

TEST(YamlValueTest, JsonAndEmptyDocuments) {
  const YamlValue v = load_yaml("{\"a\": [1, 2.5, true, null, \"s\"]}", "x.json");
  const nlohmann::ordered_json j = yaml_to_json(v, "x.json");
  EXPECT_EQ(j.dump(), R"({"a":[1,2.5,true,null,"s"]})");
  EXPECT_EQ(load_yaml("", "x").kind_, Kind::Null);
  EXPECT_EQ(load_yaml("# only a comment\n", "x").kind_, Kind::Null);
}

TEST(YamlValueTest, HostileDocumentsFailCleanly) {
  EXPECT_NE(error_of("a: 1\n---\nb: 2\n").find("several YAML documents"), std::string::npos);
  EXPECT_NE(error_of("a: [1, 2\n").find("invalid YAML"), std::string::npos);
  std::string deep = "v: ";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  EXPECT_NE(error_of(deep).find("nesting deeper than 64"), std::string::npos);
  // Each level doubles the expanded size: 2^20 values after alias expansion.
  std::string bomb = "a0: &a0 [x, x]\n";
  for (int i = 1; i <= 20; ++i)
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" + std::to_string(i - 1) + ", *a" +
            std::to_string(i - 1) + "]\n";
  EXPECT_NE(error_of(bomb).find("more than 100000 values"), std::string::npos);
  EXPECT_NE(error_of("a: 1\nv: a\xff\n").find("test.yaml:2: not UTF-8 text"), std::string::npos);
  EXPECT_NE(error_of(std::string("v: 'a\0b'\n", 10)).find("control character"), std::string::npos);
  EXPECT_NE(error_of("v: \x01\n").find("control character"), std::string::npos);
  // PyYAML lets escapes produce any character; lowbit refuses controls there too, as nothing in
  // a recipe needs them and recipe_to_yaml could not promise to write them back unchanged.
  EXPECT_NE(error_of("v: \"a\\x01b\"").find("test.yaml:1: a value holds a control character"),
            std::string::npos);
  EXPECT_EQ(value_of("v: \"tab\\there\\n\"").text_, "tab\there\n");
  EXPECT_THROW(yaml_to_json(value_of("v: !!python/object/apply:llmcompressor.sentinel.Sentinel [x]"), "x"),
               InvalidArgument);
}

}  // namespace
}  // namespace lowbit::quant::detail
