// The compare.json reader: strict on required fields, lenient on optional ones, every error naming
// the file and the field.
#include "eval/compare_result.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

using json = nlohmann::json;

const std::string kFixture = std::string(LOWBIT_SOURCE_DIR) + "/tests/report/data/compare_example.json";

json fixture() {
  std::ifstream in(kFixture);
  return json::parse(in);
}

// The smallest valid result: only the required fields.
json minimal() {
  return json::parse(R"({
    "format": "lowbit-compare/1", "model": "m", "created": "2026-11-29T18:30:00Z",
    "protocol": {"ppl_text": "t.txt", "ctx": 512},
    "baseline": {"name": "BF16", "size_bytes": 1000, "bits_per_weight": 16, "ppl": 10.0},
    "schemes": [{"scheme": "W4A16", "size_bytes": 300, "bits_per_weight": 4.25, "ppl": 11.0,
                 "delta_ppl": 0.1}]})");
}

// The InvalidArgument message of parsing `j`, or "" when it parses.
std::string error_of(const json& j) {
  try {
    CompareResult::from_json(j, "DIR/compare.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(CompareResultTest, ReadsTheFixtureFieldForField) {
  const json j = fixture();
  const CompareResult r = read_compare_result(kFixture);
  EXPECT_EQ(r.model, j["model"]);
  EXPECT_EQ(r.protocol.ctx, j["protocol"]["ctx"]);
  EXPECT_EQ(r.baseline.name, j["baseline"]["name"]);
  EXPECT_EQ(r.baseline.size_bytes, j["baseline"]["size_bytes"]);
  ASSERT_EQ(r.schemes.size(), j["schemes"].size());
  for (size_t i = 0; i < r.schemes.size(); ++i) {
    const json& s = j["schemes"][i];
    EXPECT_EQ(r.schemes[i].scheme, s["scheme"]);
    EXPECT_EQ(r.schemes[i].size_bytes, s["size_bytes"]);
    EXPECT_DOUBLE_EQ(r.schemes[i].ppl, s["ppl"].get<double>());
    EXPECT_DOUBLE_EQ(r.schemes[i].delta_ppl, s["delta_ppl"].get<double>());
    EXPECT_EQ(r.schemes[i].layer_errors.size(), s["layer_errors"].size());
    EXPECT_EQ(r.schemes[i].pitfalls.size(), s["pitfalls"].size());
  }
  ASSERT_TRUE(r.recommendation.scheme.has_value());
  ASSERT_TRUE(r.recommendation.index.has_value());
  EXPECT_EQ(r.schemes[*r.recommendation.index].label(), j["recommendation"]["scheme"]);
}

TEST(CompareResultTest, OptionalFieldsMissingOrNullAreNotMeasured) {
  const CompareResult a = CompareResult::from_json(minimal(), "x");
  json with_nulls = minimal();
  for (const char* key : {"task_acc", "task_acc_stderr", "decode_tok_s", "prefill_tok_s",
                          "peak_rss_bytes", "kld_mean", "kld_p99", "top1_agreement",
                          "layer_errors", "pitfalls", "algo", "dir"}) {
    with_nulls["schemes"][0][key] = nullptr;
  }
  with_nulls["recommendation"] = {{"scheme", nullptr}, {"reasons", {"nothing fits"}}};
  with_nulls["machine"] = nullptr;
  const CompareResult b = CompareResult::from_json(with_nulls, "x");
  for (const CompareResult* r : {&a, &b}) {
    const CompareScheme& s = r->schemes[0];
    EXPECT_FALSE(s.kld_mean || s.kld_p99 || s.top1_agreement || s.task_acc || s.decode_tok_s ||
                 s.prefill_tok_s || s.peak_rss_bytes);
    EXPECT_TRUE(s.layer_errors.empty());
    EXPECT_TRUE(s.algo.empty());
    EXPECT_FALSE(r->recommendation.index.has_value());
    EXPECT_FALSE(r->recommendation.is_baseline);
  }
  EXPECT_EQ(b.recommendation.reasons, std::vector<std::string>{"nothing fits"});
}

TEST(CompareResultTest, UnknownKeysAreIgnored) {
  json j = minimal();
  j["written_by"] = "a newer lowbit";
  j["schemes"][0]["energy_joules"] = 12.5;
  EXPECT_EQ(error_of(j), "");
}

// Each required field, removed or set to null, is named in the error with the file.
TEST(CompareResultTest, EveryRequiredFieldIsNamedWhenMissing) {
  json full = fixture();
  const std::vector<std::string> required = {
      "/format", "/model", "/created", "/protocol", "/protocol/ppl_text", "/protocol/ctx",
      "/baseline", "/baseline/name", "/baseline/size_bytes", "/baseline/bits_per_weight",
      "/baseline/ppl", "/schemes", "/schemes/1/scheme", "/schemes/1/size_bytes",
      "/schemes/1/bits_per_weight", "/schemes/1/ppl", "/schemes/1/delta_ppl",
      "/schemes/2/layer_errors/3/name", "/schemes/2/layer_errors/3/rel_error"};
  for (const std::string& pointer : required) {
    // "/schemes/1/ppl" → "schemes[1].ppl"
    std::string path = pointer.substr(1);
    for (size_t pos; (pos = path.find('/')) != std::string::npos;) {
      const size_t next = path.find('/', pos + 1);
      const std::string part = path.substr(pos + 1, next - pos - 1);
      const bool index = part.find_first_not_of("0123456789") == std::string::npos;
      path.replace(pos, next == std::string::npos ? std::string::npos : next - pos,
                   index ? "[" + part + "]" : "." + part);
    }
    for (const bool as_null : {false, true}) {
      json j = full;
      const json::json_pointer p(pointer);
      if (as_null) {
        j[p] = nullptr;
      } else {
        j[p.parent_pointer()].erase(p.back());
      }
      const std::string message = error_of(j);
      EXPECT_NE(message.find("DIR/compare.json: " + path + ": is required"), std::string::npos)
          << pointer << (as_null ? " = null" : " removed") << " gave: " << message;
    }
  }
}

TEST(CompareResultTest, BadValuesAreNamedWithTheField) {
  struct Case {
    const char* pointer;
    json value;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"/format", "lowbit-compare/2", "format: \"lowbit-compare/2\" is not lowbit-compare/1"},
      {"/model", 42, "model: expected a string, got number 42"},
      {"/protocol/ctx", 0, "protocol.ctx: expected an integer > 0"},
      {"/protocol/tasks", "a.jsonl", "protocol.tasks: expected an array"},
      {"/baseline/size_bytes", "12", "baseline.size_bytes: expected an integer, got string"},
      {"/baseline/size_bytes", 1.5, "baseline.size_bytes: expected an integer"},
      {"/baseline/ppl", 0, "baseline.ppl: expected a positive number"},
      {"/schemes/0/task_acc", 41.2, "schemes[0].task_acc: expected a fraction in [0, 1]"},
      {"/schemes/0/top1_agreement", -0.1, "schemes[0].top1_agreement: expected a fraction"},
      {"/schemes/0/kld_mean", "small", "schemes[0].kld_mean: expected a number, got string"},
      {"/schemes/0/decode_tok_s", 0, "schemes[0].decode_tok_s: expected a positive number"},
      {"/schemes/0/peak_rss_bytes", -1, "schemes[0].peak_rss_bytes: expected an integer > 0"},
      {"/schemes/0/bits_per_weight", 65, "schemes[0].bits_per_weight: expected at most 64"},
      {"/schemes/0/layer_errors", json::object(), "schemes[0].layer_errors: expected an array"},
      {"/schemes/0/layer_errors/0/rel_error", -0.5, "schemes[0].layer_errors[0].rel_error"},
      {"/schemes/0/pitfalls/0", "x", "schemes[0].pitfalls[0]: expected an object"},
      {"/schemes/0", json::array(), "schemes[0]: expected an object"},
      {"/machine/threads", "two", "machine.threads: expected an integer"},
      {"/recommendation/scheme", "W3A16", "recommendation.scheme: \"W3A16\" is neither"},
  };
  for (const Case& c : cases) {
    json j = fixture();
    if (j["schemes"][0]["pitfalls"].empty()) j["schemes"][0]["pitfalls"] = {{{"kind", "k"}, {"message", "m"}}};
    j[json::json_pointer(c.pointer)] = c.value;
    const std::string message = error_of(j);
    EXPECT_NE(message.find(std::string("DIR/compare.json: ") + c.expected), std::string::npos)
        << c.pointer << " gave: " << message;
  }
}

// delta_ppl in percent (1.2 for +1.2 %) would scale every chart by 100: it must match the ppls.
TEST(CompareResultTest, DeltaPplMustBeTheFractionOfThePerplexities) {
  json j = minimal();  // ppl 11 against 10: 0.1
  j["schemes"][0]["delta_ppl"] = 10.0;
  EXPECT_NE(error_of(j).find("schemes[0].delta_ppl: 10 disagrees with ppl / baseline.ppl - 1 = 0.1"),
            std::string::npos) << error_of(j);
  j["schemes"][0]["delta_ppl"] = 0.1003;  // within the rounding allowance (5e-4)
  EXPECT_EQ(error_of(j), "");
}

TEST(CompareResultTest, RecommendationResolvesToARowOrTheBaseline) {
  json j = minimal();  // row 0: W4A16 with no algo
  const json gptq = {{"scheme", "W4A16"}, {"algo", "gptq"}, {"size_bytes", 300},
                     {"bits_per_weight", 4.25}, {"ppl", 10.5}, {"delta_ppl", 0.05}};
  j["schemes"].push_back(gptq);
  j["recommendation"] = {{"scheme", "W4A16"}};  // row 0's label ("W4A16 GPTQ" is row 1's)
  EXPECT_EQ(CompareResult::from_json(j, "x").recommendation.index, 0u);
  j["recommendation"] = {{"scheme", "W4A16 GPTQ"}};
  EXPECT_EQ(CompareResult::from_json(j, "x").recommendation.index, 1u);
  j["recommendation"] = {{"scheme", "W4A16"}, {"algo", "gptq"}};
  EXPECT_EQ(CompareResult::from_json(j, "x").recommendation.index, 1u);
  j["recommendation"] = {{"scheme", "BF16"}};
  const CompareResult r = CompareResult::from_json(j, "x");
  EXPECT_TRUE(r.recommendation.is_baseline);
  EXPECT_FALSE(r.recommendation.index.has_value());
  // Two rows with the same label (no algo, and RTN) are told apart only by "algo".
  json rtn = gptq;
  rtn["algo"] = "rtn";
  j["schemes"].push_back(rtn);
  j["recommendation"] = {{"scheme", "W4A16"}};
  EXPECT_NE(error_of(j).find("recommendation.scheme: \"W4A16\" matches 2 rows"), std::string::npos)
      << error_of(j);
  j["recommendation"]["algo"] = "rtn";
  EXPECT_EQ(CompareResult::from_json(j, "x").recommendation.index, 2u);
}

TEST(CompareResultTest, LabelNamesWhatTellsRowsApart) {
  CompareScheme s;
  s.scheme = "W4A16";
  s.algo = "rtn";
  s.kv_cache = "auto";
  EXPECT_EQ(s.label(), "W4A16");
  s.algo = "gptq";
  EXPECT_EQ(s.label(), "W4A16 GPTQ");
  s.kv_cache = "fp8";
  EXPECT_EQ(s.label(), "W4A16 GPTQ \xC2\xB7 KV FP8");
}

TEST(CompareResultTest, ToJsonRoundTrips) {
  const CompareResult a = read_compare_result(kFixture);
  const json once = a.to_json();
  const CompareResult b = CompareResult::from_json(once, "round trip");
  EXPECT_EQ(b.to_json(), once);
  EXPECT_EQ(b.schemes[0].layer_errors.size(), a.schemes[0].layer_errors.size());
  EXPECT_EQ(b.recommendation.index, a.recommendation.index);
}

// docs/report.md's example is a valid result (the schema's reference and the reader agree).
TEST(CompareResultTest, DocsExampleIsValid) {
  std::ifstream in(std::string(LOWBIT_SOURCE_DIR) + "/docs/report.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t start = doc.find("```json\n");
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("```", start + 8);
  const CompareResult r =
      CompareResult::from_json(json::parse(doc.substr(start + 8, end - start - 8)), "docs/report.md");
  EXPECT_EQ(r.schemes.size(), 1u);
  EXPECT_EQ(r.recommendation.index, 0u);
}

TEST(CompareResultTest, FileErrorsNameTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / "lowbit_compare_result_test";
  std::filesystem::create_directories(dir);
  const std::string missing = (dir / "missing.json").string();
  try {
    read_compare_result(missing);
    FAIL() << "no error for a missing file";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(missing + ": no such file"), std::string::npos) << e.what();
  }
  const std::string broken = (dir / "broken.json").string();
  std::ofstream(broken) << "{\"format\": \"lowbit-compare/1\",";
  try {
    read_compare_result(broken);
    FAIL() << "no error for malformed JSON";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(broken + ": not valid JSON"), std::string::npos) << e.what();
  }
  const std::string written = (dir / "compare.json").string();
  write_compare_result(read_compare_result(kFixture), written);
  EXPECT_FALSE(std::filesystem::exists(written + ".tmp"));
  EXPECT_EQ(read_compare_result(written).to_json(), read_compare_result(kFixture).to_json());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lowbit::eval
