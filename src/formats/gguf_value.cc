// GGUF type tables, metadata values and GgufFile's typed getters (the parser is gguf_reader.cc).
#include <cmath>
#include <limits>

#include "formats/gguf.h"
#include "formats/safetensors_json.h"
#include "lowbit/error.h"

namespace lowbit::formats {
namespace {

using detail::printable;

// Block sizes and bytes per block from ggml (ggml-common.h / ggml.c type_traits); QK_K = 256.
constexpr GgmlTypeTraits kGgmlTypes[] = {
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},
    {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},
    {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},
    {GgmlType::Q8_1, "Q8_1", 32, 40},
    {GgmlType::Q2_K, "Q2_K", 256, 84},
    {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", 256, 144},
    {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210},
    {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56},
    {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66},
    {GgmlType::MXFP4, "MXFP4", 32, 17},
    {GgmlType::NVFP4, "NVFP4", 64, 36},
    {GgmlType::Q1_0, "Q1_0", 128, 18},
};

constexpr const char* kGgufTypeNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                          "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                          "UINT64", "INT64",   "FLOAT64"};

[[noreturn]] void wrong_type(const std::string& where, const GgufValue& value,
                             const char* expected) {
  throw InvalidArgument(where + " is " + std::string(gguf_type_name(value.type())) + ", expected " +
                        expected);
}

}  // namespace

const GgmlTypeTraits* find_ggml_type(uint32_t id) {
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const GgmlTypeTraits& ggml_type_traits(GgmlType type) {
  const GgmlTypeTraits* t = find_ggml_type(static_cast<uint32_t>(type));
  if (t == nullptr) {
    throw Internal("ggml type " + std::to_string(static_cast<uint32_t>(type)) + " has no traits");
  }
  return *t;
}

std::string_view ggml_type_name(GgmlType type) { return ggml_type_traits(type).name; }

std::string_view gguf_type_name(GgufType type) {
  auto i = static_cast<uint32_t>(type);
  return i < std::size(kGgufTypeNames) ? kGgufTypeNames[i] : "UNKNOWN";
}

bool GgufValue::is_integer() const {
  switch (type()) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::UINT16:
    case GgufType::INT16:
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::UINT64:
    case GgufType::INT64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const {
  return type() == GgufType::FLOAT32 || type() == GgufType::FLOAT64;
}

int64_t GgufValue::as_int(const std::string& where) const {
  if (!is_integer()) wrong_type(where, *this, "an integer");
  if (const auto* u = std::get_if<uint64_t>(&value_)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw InvalidArgument(where + " = " + std::to_string(*u) + " does not fit in int64");
    }
    return static_cast<int64_t>(*u);
  }
  return std::visit(
      [](const auto& v) -> int64_t {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>) {
          return static_cast<int64_t>(v);
        } else {
          return 0;  // unreachable: is_integer() was checked
        }
      },
      value_);
}

uint64_t GgufValue::as_uint(const std::string& where) const {
  if (type() == GgufType::UINT64) return std::get<uint64_t>(value_);
  int64_t v = as_int(where);
  if (v < 0) throw InvalidArgument(where + " = " + std::to_string(v) + " is negative");
  return static_cast<uint64_t>(v);
}

double GgufValue::as_float(const std::string& where) const {
  if (const auto* f = std::get_if<float>(&value_)) return *f;
  if (const auto* d = std::get_if<double>(&value_)) return *d;
  if (type() == GgufType::UINT64) return static_cast<double>(std::get<uint64_t>(value_));
  if (is_integer()) return static_cast<double>(as_int(where));
  wrong_type(where, *this, "a number");
}

bool GgufValue::as_bool(const std::string& where) const {
  if (const auto* b = std::get_if<bool>(&value_)) return *b;
  wrong_type(where, *this, "BOOL");
}

const std::string& GgufValue::as_string(const std::string& where) const {
  if (const auto* s = std::get_if<std::string>(&value_)) return *s;
  wrong_type(where, *this, "STRING");
}

const GgufArray& GgufValue::as_array(const std::string& where) const {
  if (const auto* a = std::get_if<GgufArray>(&value_)) return *a;
  wrong_type(where, *this, "ARRAY");
}

std::string GgufValue::to_string() const {
  switch (type()) {
    case GgufType::BOOL:
      return std::get<bool>(value_) ? "true" : "false";
    case GgufType::STRING:
      return printable(std::get<std::string>(value_));
    case GgufType::FLOAT32:
      return std::to_string(std::get<float>(value_));
    case GgufType::FLOAT64:
      return std::to_string(std::get<double>(value_));
    case GgufType::UINT64:
      return std::to_string(std::get<uint64_t>(value_));
    case GgufType::ARRAY: {
      const GgufArray& a = std::get<GgufArray>(value_);
      std::string out = "[";
      for (size_t i = 0; i < a.items.size() && i < 8; ++i) {
        out += (i ? ", " : "") + a.items[i].to_string();
      }
      if (a.items.size() > 8) out += ", ... (" + std::to_string(a.items.size()) + " items)";
      return out + "]";
    }
    default:
      return std::to_string(as_int(""));
  }
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // the reader checked that this does not overflow
  return n;
}

Shape GgufTensorInfo::shape() const { return Shape(ne.rbegin(), ne.rend()); }

// --- GgufFile: lookups and typed getters ------------------------------------------------------

std::string GgufFile::where(const std::string& key) const {
  return path_ + ": metadata key " + printable(key);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw InvalidArgument(where(key) + " is missing");
  return *v;
}

std::string GgufFile::get_string(const std::string& key) const {
  return get(key).as_string(where(key));
}
int64_t GgufFile::get_int(const std::string& key) const { return get(key).as_int(where(key)); }
uint64_t GgufFile::get_uint(const std::string& key) const { return get(key).as_uint(where(key)); }
double GgufFile::get_float(const std::string& key) const { return get(key).as_float(where(key)); }
bool GgufFile::get_bool(const std::string& key) const { return get(key).as_bool(where(key)); }

uint64_t GgufFile::get_uint(const std::string& key, uint64_t fallback) const {
  return find(key) ? get_uint(key) : fallback;
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  return find(key) ? get_float(key) : fallback;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufArray& a = get(key).as_array(where(key));
  if (a.element_type != GgufType::STRING) {
    throw InvalidArgument(where(key) + " is an ARRAY of " +
                          std::string(gguf_type_name(a.element_type)) + ", expected STRING");
  }
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const GgufValue& v : a.items) out.push_back(std::get<std::string>(v.storage()));
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufArray& a = get(key).as_array(where(key));
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) {
    out.push_back(a.items[i].as_int(where(key) + " element " + std::to_string(i)));
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufArray& a = get(key).as_array(where(key));
  std::vector<double> out;
  out.reserve(a.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) {
    out.push_back(a.items[i].as_float(where(key) + " element " + std::to_string(i)));
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (t == nullptr) throw InvalidArgument(path_ + ": no tensor named " + printable(name));
  return *t;
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& info) const {
  // Only validated infos may address the mapping: one from elsewhere is looked up by name.
  const GgufTensorInfo* own = &info;
  if (tensors_.empty() || own < tensors_.data() || own >= tensors_.data() + tensors_.size()) {
    own = &tensor(info.name);
  }
  return {base_ + data_offset_ + own->offset, static_cast<size_t>(own->nbytes)};
}

std::span<const uint8_t> GgufFile::tensor_data(const std::string& name) const {
  return tensor_data(tensor(name));
}

}  // namespace lowbit::formats
