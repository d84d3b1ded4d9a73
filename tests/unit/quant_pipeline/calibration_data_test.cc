// Calibration samples: the text protocol must reproduce tests/golden/llmcompressor/
// calibration_128x512.json exactly (made in Python with HF tokenizers from the documented
// protocol), JSONL rows follow llm-compressor's handling (chat template, no doubled BOS), and bad
// data is refused with the file named.
#include "quant/pipeline/calibration_data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "lowbit/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::quant {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = LOWBIT_SOURCE_DIR;
const std::string kModel = kRoot + "/models/ref-llama-19m";

fs::path scratch_file(const std::string& name, const std::string& content) {
  const fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "calibration-scratch";
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << content;
  return dir / name;
}

TEST(CalibrationDataTest, TextWindowsMatchTheReferenceProtocol) {
  std::ifstream in(kRoot + "/tests/golden/llmcompressor/calibration_128x512.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  CalibrationOptions o;
  o.path = kRoot + "/data/text/calibration.txt";
  o.num_samples = 128;
  o.seq_len = 512;
  const CalibrationSet samples = load_calibration(o, kModel);
  const auto expected = golden.at("samples").get<CalibrationSet>();
  ASSERT_EQ(samples.size(), expected.size());
  for (size_t i = 0; i < samples.size(); ++i) EXPECT_EQ(samples[i], expected[i]) << "sample " << i;
  // The shuffle alone, over the golden's window count.
  const auto order = shuffled_indices(golden.at("windows").get<size_t>(), 42);
  const auto golden_order = golden.at("window_order").get<std::vector<size_t>>();
  EXPECT_TRUE(std::equal(golden_order.begin(), golden_order.end(), order.begin()));
}

TEST(CalibrationDataTest, IdsFileIsUsedAsIs) {
  CalibrationOptions o;
  o.path = kRoot + "/tests/golden/llmcompressor/calibration_128x512.json";
  o.ids_file = true;
  o.num_samples = 5;
  const CalibrationSet samples = load_calibration(o, kModel);
  ASSERT_EQ(samples.size(), 5u);
  EXPECT_EQ(samples[0].size(), 512u);
  EXPECT_EQ(samples[0][0], 0);  // BOS
}

TEST(CalibrationDataTest, JsonlTextAndMessagesRows) {
  const Tokenizer tok = Tokenizer::from_dir(kModel);
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "Tell me about the sea."}, {"role": "assistant", "content": "It is wide."}])");
  const fs::path file = scratch_file(
      "rows.jsonl", "{\"text\": \"The history of the city\"}\n\n{\"messages\": " + messages.dump() + "}\n");
  CalibrationOptions o;
  o.path = file.string();
  o.num_samples = 2;
  o.seq_len = 64;
  o.seed = 1;
  CalibrationSet samples = load_calibration(o, kModel);
  ASSERT_EQ(samples.size(), 2u);
  const std::vector<int32_t> text_ids = tok.encode("The history of the city", true);
  const std::string rendered = ChatTemplate::from_dir(kModel)->render(
      messages, false, nlohmann::ordered_json(special_tokens_map(kModel)));
  const std::vector<int32_t> chat_ids = tok.encode(rendered, false);
  EXPECT_EQ(chat_ids[0], 0);  // the template's BOS, once
  EXPECT_NE(chat_ids[1], 0);
  std::sort(samples.begin(), samples.end());
  std::vector<std::vector<int32_t>> expected = {text_ids, chat_ids};
  for (auto& e : expected) e.resize(std::min<size_t>(e.size(), 64));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(samples, expected);
}

TEST(CalibrationDataTest, BadDataIsRefusedNamingTheFile) {
  CalibrationOptions o;
  o.num_samples = 4;
  o.seq_len = 512;
  for (const auto& [name, content] : std::vector<std::pair<std::string, std::string>>{
           {"empty.txt", ""},
           {"short.txt", "Only a few words."},
           {"bad.jsonl", "{\"text\": \"ok\"}\n{not json\n"},
           {"no-text.jsonl", "{\"prompt\": \"where is the text?\"}\n"}}) {
    o.path = scratch_file(name, content).string();
    try {
      load_calibration(o, kModel);
      ADD_FAILURE() << name << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lowbit::quant
