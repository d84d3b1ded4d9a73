// libFuzzer target: GgufFile::from_bytes on arbitrary bytes, then every metadata value printed,
// every tensor it accepts read in full and, when small enough, dequantized, and the tokenizer
// metadata (tokenizer.ggml.*) turned into a tokenizer that encodes and decodes a short text. Bad input must end in a
// lowbit::Error; any other exception escapes and, like a crash, a sanitizer report or a hang, is
// reported by libFuzzer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "lowbit/error.h"
#include "models/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = lowbit::formats::GgufFile::from_bytes(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz-input");
    volatile size_t sink = 0;
    for (const auto& [key, value] : file->metadata()) sink = sink + value.to_string().size();
    for (const lowbit::formats::GgufTensorInfo& info : file->tensors()) {
      // Read every byte, so that AddressSanitizer sees any range that slipped past validation.
      for (uint8_t byte : file->tensor_data(info)) sink = sink ^ byte;
      // Bounded because it allocates numel floats.
      if (lowbit::formats::gguf_can_dequantize(info.type) && info.numel() <= (1 << 16)) {
        lowbit::Tensor t = lowbit::formats::dequantize_gguf_tensor(*file, info);
        sink = sink + static_cast<size_t>(t.numel());
      }
    }
    if (file->find("tokenizer.ggml.model") != nullptr) {
      const lowbit::Tokenizer tokenizer =
          lowbit::Tokenizer::from_json_string(lowbit::models::gguf_tokenizer_json(*file), "fuzz-input");
      const std::vector<int32_t> ids = tokenizer.encode("Hello  world\n\u2603 12345", true);
      sink = sink + tokenizer.decode(ids, false).size();
    }
  } catch (const lowbit::Error&) {
  }
  return 0;
}
