// libFuzzer target: parse_model_config on arbitrary bytes and, for configs it accepts, the RoPE
// tables they imply (at load, and past the dynamic / longrope thresholds) and the same bytes read
// as a generation_config.json. Bad input must end in a lowbit::Error; any other exception
// escapes and, like a crash, a sanitizer report or a hang, is reported by libFuzzer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/error.h"
#include "models/model_config.h"
#include "models/rope.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    lowbit::models::ModelConfig config = lowbit::models::parse_model_config(text, "config.json");
    lowbit::models::RotaryEmbedding rope(config);
    lowbit::models::RopeFrequencies scratch;
    for (int64_t length : {int64_t{1}, config.max_position_embeddings + 1,
                           config.rope.original_max_position_embeddings + 1}) {
      const lowbit::models::RopeFrequencies& f = rope.frequencies(length, scratch);
      if (static_cast<int64_t>(f.inv_freq.size()) != config.rotary_dim() / 2) __builtin_trap();
    }
    lowbit::models::apply_generation_config(text, "generation_config.json", config);
  } catch (const lowbit::Error&) {
  }
  return 0;
}
