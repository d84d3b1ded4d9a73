// GGUF files (llama.cpp's single-file format): zero-copy reading (mmap) of the header, the metadata
// key/value pairs, the tensor infos and each tensor's raw bytes. The whole file is validated before
// anything is handed out: magic "GGUF", version 2 or 3, counts that fit in the file, every value
// of every GGUF type (nested arrays included), general.alignment, the data section's start, and
// per tensor its ggml type, dimensions, byte size and offset (aligned, inside the file, not
// overlapping another tensor). A bad file raises InvalidArgument naming the file and the field or
// tensor at fault; GGUF version 1 raises Unsupported; an OS failure raises IoError.
//
// Layout (all little-endian): "GGUF" u32 version, u64 tensor_count, u64 kv_count; kv_count times
// {string key, u32 value_type, value}; tensor_count times {string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml_type, u64 offset}; padding to general.alignment (default 32); the data section. Strings
// are u64 length + bytes; an array is u32 element_type, u64 count, elements.
//
// Tensor data views point into a read-only mapping owned by the GgufFile: keep the shared_ptr alive
// as long as they are used. Dequantization to fp32 is in formats/gguf_dequant.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "formats/file_image.h"
#include "lowbit/tensor.h"

namespace lowbit::formats {

// ggml's tensor types, numbered as in ggml.h (the number is what GGUF stores). Ids ggml has removed
// (4, 5, 31-33, 36-38) are not listed and are rejected.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

// One row of ggml's type-traits table: a tensor is stored as blocks of `block_size` elements,
// each `type_size` bytes (1 and the element size for the plain types).
struct GgmlTypeTraits {
  GgmlType type;
  const char* name;  // ggml's spelling: "Q4_K", "BF16", ...
  uint32_t block_size;
  uint32_t type_size;
};

// The traits of ggml type number `id`, or nullptr if ggml has no such type.
const GgmlTypeTraits* find_ggml_type(uint32_t id);
const GgmlTypeTraits& ggml_type_traits(GgmlType type);
std::string_view ggml_type_name(GgmlType type);

// The type of a metadata value, numbered as in the file (gguf.h's gguf_type).
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufType type);  // "UINT32", "STRING", ...

class GgufValue;

struct GgufArray {
  GgufType element_type = GgufType::UINT8;
  std::vector<GgufValue> items;  // all of element_type
};

// One metadata value. The as_* conversions throw InvalidArgument "<where>: is <TYPE>, expected
// ..." when the value does not have that kind or does not fit, so callers pass a `where` naming
// the file and key (GgufFile's getters do).
class GgufValue {
 public:
  // Alternatives in GgufType order: index() == the GGUF type number.
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;

  GgufValue() = default;
  explicit GgufValue(Storage value) : value_(std::move(value)) {}

  GgufType type() const { return static_cast<GgufType>(value_.index()); }
  const Storage& storage() const { return value_; }
  bool is_integer() const;  // one of the eight integer types
  bool is_float() const;    // FLOAT32 or FLOAT64

  int64_t as_int(const std::string& where) const;    // any integer type that fits in int64
  uint64_t as_uint(const std::string& where) const;  // any integer type that is >= 0
  double as_float(const std::string& where) const;   // FLOAT32/FLOAT64 (exactly), or an integer
  bool as_bool(const std::string& where) const;
  const std::string& as_string(const std::string& where) const;
  const GgufArray& as_array(const std::string& where) const;

  // The value as text for messages and dumps: 42, -1.5, true, "text", [1, 2, 3] (long arrays cut).
  std::string to_string() const;

 private:
  Storage value_;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;      // from the start of the data section, as stored in the file
  uint64_t nbytes = 0;      // ne[0] / block_size * type_size * ne[1] * ...

  int64_t numel() const;
  // The row-major shape lowbit and PyTorch use: [ne[n-1], ..., ne[0]].
  Shape shape() const;
};

class GgufFile {
 public:
  // Opens (mmap) and validates `path` completely.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Same validation on an in-memory image (used by the fuzzer and tests); `name` is used in errors.
  static std::shared_ptr<GgufFile> from_bytes(std::string bytes, const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;  // nullptr if absent
  // InvalidArgument "<file>: metadata key \"<key>\" is missing" if absent.
  const GgufValue& get(const std::string& key) const;

  // Typed getters: InvalidArgument naming the file and key when absent or of the wrong type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  // With a fallback when the key is absent (a present key of the wrong type still throws).
  uint64_t get_uint(const std::string& key, uint64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;

  // Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr if absent
  const GgufTensorInfo& tensor(const std::string& name) const;       // InvalidArgument if absent
  // The tensor's bytes inside the file (valid while this GgufFile lives).
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& info) const;
  std::span<const uint8_t> tensor_data(const std::string& name) const;

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

 private:
  GgufFile() = default;
  void parse();
  void adopt(FileImage image);  // takes the bytes; base_ / size_ view them
  std::string where(const std::string& key) const;

  std::string path_;
  FileImage image_;
  const uint8_t* base_ = nullptr;  // image_'s bytes
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace lowbit::formats
