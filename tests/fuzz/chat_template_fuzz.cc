// libFuzzer target: ChatTemplate on arbitrary template source, rendered with a small conversation.
// Syntax and render errors must end in a lowbit::Error; anything else (a crash, a hang, another
// exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "lowbit/error.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 14)) return 0;
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": " again "}])");
  static const nlohmann::ordered_json extra =
      nlohmann::ordered_json::parse(R"({"bos_token": "<s>", "eos_token": "</s>"})");
  try {
    lowbit::ChatTemplate chat_template(source);
    chat_template.render(messages, true, extra);
    chat_template.render(messages, false, extra);
  } catch (const lowbit::Error&) {
  }
  return 0;
}
