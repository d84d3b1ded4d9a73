// libFuzzer target: SafetensorsFile::from_bytes on arbitrary bytes, then every tensor it accepts
// read in full. Bad input must end in a lowbit::Error; any other exception escapes and, like a
// crash, a sanitizer report or a hang, is reported by libFuzzer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/safetensors.h"
#include "lowbit/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = lowbit::formats::SafetensorsFile::from_bytes(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz-input");
    for (const std::string& name : file->names()) {
      lowbit::Tensor t = file->get(name);
      // Read every byte, so that AddressSanitizer sees any range that slipped past validation.
      const auto* bytes = static_cast<const uint8_t*>(t.data());
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ bytes[i];
      // Typed element access (UBSan checks alignment); bounded because it allocates numel floats.
      if (t.numel() <= (1 << 16)) t.to_f32();
    }
  } catch (const lowbit::Error&) {
  }
  return 0;
}
