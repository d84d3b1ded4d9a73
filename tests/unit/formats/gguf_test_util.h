// Helpers for the GGUF tests: the fixture directory and a builder of small GGUF images byte by byte
// (for the malformed files the Python writer refuses to produce).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "safetensors_test_util.h"

namespace lowbit::formats::testing {

inline std::string gguf_dir() { return data_dir() + "/gguf"; }

inline std::string le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

inline std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

inline std::string gguf_string(const std::string& s) { return le64(s.size()) + s; }

// A GGUF image assembled from raw parts: header, metadata pairs, tensor infos, padding to
// `alignment`, data. Counts default to the number of parts added but can be overridden.
struct GgufImage {
  uint32_t version = 3;
  std::string pairs;
  std::string infos;
  std::string data;
  uint64_t kv_count = 0;
  uint64_t tensor_count = 0;
  uint64_t alignment = 32;  // used only for the padding before the data section

  // A pair whose value is `type` (GgufType number) followed by `value` bytes.
  void pair(const std::string& key, uint32_t type, const std::string& value) {
    pairs += gguf_string(key) + le32(type) + value;
    ++kv_count;
  }
  void pair_u32(const std::string& key, uint32_t v) { pair(key, 4, le32(v)); }
  void pair_string(const std::string& key, const std::string& v) { pair(key, 8, gguf_string(v)); }

  void tensor(const std::string& name, uint32_t type, const std::vector<uint64_t>& ne,
              uint64_t offset) {
    infos += gguf_string(name) + le32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) infos += le64(d);
    infos += le32(type) + le64(offset);
    ++tensor_count;
  }

  std::string header() const {
    return std::string("GGUF") + le32(version) + le64(tensor_count) + le64(kv_count);
  }

  std::string bytes() const {
    std::string out = header() + pairs + infos;
    while (out.size() % alignment != 0) out += '\0';
    return out + data;
  }
};

}  // namespace lowbit::formats::testing
