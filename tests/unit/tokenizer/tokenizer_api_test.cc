// Behaviour of the public API beyond the golden comparisons: DecodeStream's flush (lowbit's
// addition to HF's DecodeStream), copies sharing data, and concurrent encodes.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace lowbit {
namespace {

const Tokenizer& ref_llama() {
  static const Tokenizer tok =
      Tokenizer::from_file(testing::repo_path("models/ref-llama-19m/tokenizer.json"));
  return tok;
}

// "🤖" is four byte tokens in this 8k byte-level vocab: nothing is returned until the last one.
TEST(DecodeStreamTest, HoldsBackPartialCharactersAndFlushesThem) {
  const Tokenizer& tok = ref_llama();
  const std::vector<int32_t> ids = tok.encode("a🤖", false);
  ASSERT_EQ(ids.size(), 5u);  // "a" then the emoji's four bytes
  DecodeStream stream(tok, false);
  EXPECT_EQ(stream.step(ids[0]), "a");
  std::string out;
  for (size_t i = 1; i + 1 < ids.size(); ++i) EXPECT_EQ(stream.step(ids[i]), "") << i;
  EXPECT_EQ(stream.step(ids.back()), "🤖");
  EXPECT_EQ(stream.flush(), "");

  DecodeStream cut(tok, false);
  EXPECT_EQ(cut.step(ids[0]), "a");
  EXPECT_EQ(cut.step(ids[1]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");  // the incomplete byte shows as U+FFFD, as in HF
}

TEST(DecodeStreamTest, PromptIdsAreContextOnly) {
  const Tokenizer& tok = ref_llama();
  const std::vector<int32_t> prompt = tok.encode("Once upon", true);
  const std::vector<int32_t> more = tok.encode(" a time", false);
  DecodeStream stream(tok, true, prompt);
  std::string text;
  for (int32_t id : more) text += stream.step(id);
  text += stream.flush();
  EXPECT_EQ(text, " a time");
}

TEST(TokenizerApiTest, CopiesShareDataAndConcurrentEncodesAgree) {
  const Tokenizer copy = ref_llama();
  const std::string text =
      testing::read_text(testing::repo_path("data/text/heldout.txt")).substr(0, 200000);
  const std::vector<int32_t> expected = copy.encode(text, false);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] { results[t] = ref_llama().encode(text, false); });
  }
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
  EXPECT_EQ(copy.decode(expected), text);
}

}  // namespace
}  // namespace lowbit
