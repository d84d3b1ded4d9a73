// libFuzzer target: Tokenizer::from_json_string on arbitrary bytes; when a tokenizer loads, encode
// and decode short strings (fixed ones and the input's own first bytes), decode arbitrary ids and
// stream them. Bad input must end in a lowbit::Error; any other exception escapes and, like a
// crash, a sanitizer report or a hang, is reported by libFuzzer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lowbit/error.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"

namespace {

void exercise(const lowbit::Tokenizer& tok, const std::string& text) {
  try {
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, special);
      tok.decode(ids, false);
      tok.decode(ids, true);
      lowbit::DecodeStream stream(tok, special);
      for (int32_t id : ids) stream.step(id);
      stream.flush();
    }
  } catch (const lowbit::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;  // big inputs only slow the search down
  const std::string json(reinterpret_cast<const char*>(data), size);
  try {
    const lowbit::Tokenizer tok = lowbit::Tokenizer::from_json_string(json, "fuzz-input");
    exercise(tok, "Hello world  12345 <s>x</s> caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\xA4\x96\n\t end");
    exercise(tok, json.substr(0, 48));  // often not valid UTF-8: must be refused cleanly
    std::vector<int32_t> ids;
    for (size_t i = 0; i < 24 && i < size; ++i) ids.push_back(static_cast<int32_t>(data[i]) - 8);
    tok.decode(ids, false);
    tok.decode(ids, true);
    tok.vocab_size();
    tok.id_to_token(ids.empty() ? 0 : ids[0]);
    tok.token_to_id("a");
    try {
      lowbit::DecodeStream stream(tok, false, {0, 1});
      for (int32_t id : ids) stream.step(id);
      stream.flush();
    } catch (const lowbit::Error&) {
    }
  } catch (const lowbit::Error&) {
  }
  return 0;
}
