// SafetensorsFile: mmap a file (or adopt bytes), validate its header completely, hand out views.

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <system_error>

#include "formats/safetensors.h"
#include "formats/safetensors_json.h"
#include "lowbit/error.h"

namespace lowbit::formats {
namespace {

using detail::json_type;
using detail::printable;
using nlohmann::json;

// The Python library refuses larger headers; so do we, so that a corrupt length cannot make us
// parse (and allocate for) gigabytes of "JSON".
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw InvalidArgument(file + ": " + what);
}


uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string offsets_string(uint64_t begin, uint64_t end) {
  // Appends rather than "[" + std::to_string(...): GCC 12 -O3 raises a false -Wrestrict there.
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += "]";
  return s;
}

// Dtypes of the safetensors specification that lowbit has no DType for.
bool is_known_unsupported_dtype(const std::string& name) {
  static const char* const kNames[] = {"U16", "U32",     "U64",     "C64",         "F8_E8M0",
                                       "F4",  "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

const json& field(const std::string& where, const json& entry, const char* name) {
  auto it = entry.find(name);
  if (it == entry.end()) fail(where, std::string("missing field \"") + name + "\"");
  return *it;
}

DType parse_entry_dtype(const std::string& where, const json& entry) {
  const json& value = field(where, entry, "dtype");
  if (!value.is_string()) fail(where, "field \"dtype\" must be a string, got " + json_type(value));
  const std::string& name = value.get_ref<const std::string&>();
  DType dtype;
  if (parse_dtype(name, &dtype)) return dtype;
  if (is_known_unsupported_dtype(name)) {
    throw Unsupported(where + ": dtype " + name + " (field \"dtype\") is not supported by lowbit");
  }
  fail(where, "unknown dtype " + printable(name) + " in field \"dtype\"");
}

Shape parse_entry_shape(const std::string& where, const json& entry) {
  const json& value = field(where, entry, "shape");
  if (!value.is_array()) fail(where, "field \"shape\" must be an array, got " + json_type(value));
  Shape shape;
  shape.reserve(value.size());
  for (const json& dim : value) {
    if (dim.is_number_unsigned()) {
      uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(where, "field \"shape\" has dimension " + std::to_string(d) + ", too large");
      }
      shape.push_back(static_cast<int64_t>(d));
    } else if (dim.is_number_integer()) {
      fail(where, "field \"shape\" has negative dimension " + std::to_string(dim.get<int64_t>()));
    } else {
      fail(where, "field \"shape\" must hold non-negative integers, got " + json_type(dim) +
                      (dim.is_number_float() ? " " + dim.dump() : ""));
    }
  }
  return shape;
}

void parse_entry_offsets(const std::string& where, const json& entry, uint64_t* begin,
                         uint64_t* end) {
  const json& value = field(where, entry, "data_offsets");
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() ||
      !value[1].is_number_unsigned()) {
    fail(where, "field \"data_offsets\" must be [begin, end] with non-negative integers, got " +
                    (value.is_array() ? "an array of " + std::to_string(value.size()) +
                                            (value.size() == 2 ? " non-integers" : " items")
                                      : json_type(value)));
  }
  *begin = value[0].get<uint64_t>();
  *end = value[1].get<uint64_t>();
}

// Bytes that `shape` of `dtype` occupies; fails on overflow. Dimensions of 0 are skipped in the
// overflow check because later code (Tensor) multiplies dimensions left to right: the product of
// the non-zero ones bounds every partial product.
uint64_t shape_bytes(const std::string& where, const Shape& shape, DType dtype) {
  uint64_t product = 1;
  bool has_zero = false;
  for (int64_t d : shape) {
    if (d == 0) {
      has_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(product, static_cast<uint64_t>(d), &product) ||
        product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(where, "shape " + shape_to_string(shape) + " (field \"shape\") is too large");
    }
  }
  uint64_t bytes = 0;
  if (has_zero) return 0;
  if (__builtin_mul_overflow(product, static_cast<uint64_t>(dtype_size(dtype)), &bytes)) {
    fail(where, "shape " + shape_to_string(shape) + " (field \"shape\") is too large");
  }
  return bytes;
}

SafetensorsFile::Entry parse_entry(const std::string& file, const std::string& name,
                                   const json& entry, uint64_t data_size) {
  const std::string where = file + ": tensor " + printable(name);
  if (!entry.is_object()) {
    fail(where,
         "entry must be a JSON object with dtype, shape and data_offsets, got " + json_type(entry));
  }
  DType dtype = parse_entry_dtype(where, entry);
  Shape shape = parse_entry_shape(where, entry);
  uint64_t begin = 0;
  uint64_t end = 0;
  parse_entry_offsets(where, entry, &begin, &end);
  if (begin > end) {
    fail(where,
         "field \"data_offsets\" " + offsets_string(begin, end) + " is reversed (begin > end)");
  }
  if (end > data_size) {
    fail(where, "field \"data_offsets\" " + offsets_string(begin, end) +
                    " reaches past the end of the data section (" + std::to_string(data_size) +
                    " bytes)");
  }
  uint64_t bytes = shape_bytes(where, shape, dtype);
  if (bytes != end - begin) {
    fail(where, "shape " + shape_to_string(shape) + " of " + std::string(dtype_name(dtype)) +
                    " needs " + std::to_string(bytes) + " bytes but field \"data_offsets\" " +
                    offsets_string(begin, end) + " spans " + std::to_string(end - begin));
  }
  return {dtype, std::move(shape), static_cast<size_t>(begin), static_cast<size_t>(end)};
}

std::map<std::string, std::string> parse_metadata(const std::string& file, const json& value) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;
  if (!value.is_object()) {
    fail(file, "field \"__metadata__\" must be an object of strings, got " + json_type(value));
  }
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      fail(file, "field \"__metadata__\" key " + printable(key) + " must be a string, got " +
                     json_type(item));
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// The format requires the tensors to tile the data section exactly: no overlap (two tensors
// sharing bytes) and no hole (bytes that no tensor accounts for, which would let a file carry
// hidden content).
void check_layout(const std::string& file,
                  const std::map<std::string, SafetensorsFile::Entry>& entries,
                  uint64_t data_size) {
  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  ranges.reserve(entries.size());
  for (const auto& [name, e] : entries) ranges.push_back({e.begin, e.end, &name});
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Range* last = nullptr;
  for (const Range& r : ranges) {
    if (r.begin < covered) {
      fail(file, "tensor " + printable(*r.name) + " data_offsets " +
                     offsets_string(r.begin, r.end) + " overlap tensor " + printable(*last->name) +
                     " data_offsets " + offsets_string(last->begin, last->end));
    }
    if (r.begin > covered) {
      fail(file, "bytes [" + std::to_string(covered) + ", " + std::to_string(r.begin) +
                     ") of the data section belong to no tensor (a hole before tensor " +
                     printable(*r.name) + ")");
    }
    covered = r.end;
    last = &r;
  }
  if (covered != data_size) {
    fail(file, "the last " + std::to_string(data_size - covered) + " bytes of the " +
                   std::to_string(data_size) + "-byte data section belong to no tensor");
  }
}

}  // namespace

void SafetensorsFile::parse(const std::string& name) {
  if (size_ < 8) {
    fail(name, "file is " + std::to_string(size_) +
                   " bytes, too short for the 8-byte header length; not a safetensors file");
  }
  uint64_t header_bytes = read_le64(base_);
  if (header_bytes > kMaxHeaderBytes) {
    fail(name, "header length " + std::to_string(header_bytes) + " exceeds the " +
                   std::to_string(kMaxHeaderBytes) + "-byte limit; not a safetensors file?");
  }
  if (header_bytes > size_ - 8) {
    fail(name, "header length " + std::to_string(header_bytes) +
                   " runs past the end of the file (" + std::to_string(size_ - 8) +
                   " bytes follow the length field)");
  }
  json header =
      detail::parse_json_strict(std::string_view(base_ + 8, header_bytes), name, "header");
  if (!header.is_object()) fail(name, "header must be a JSON object, got " + json_type(header));
  data_start_ = 8 + static_cast<size_t>(header_bytes);
  uint64_t data_size = size_ - data_start_;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      metadata_ = parse_metadata(name, value);
    } else {
      entries_.emplace(key, parse_entry(name, key, value, data_size));
    }
  }
  check_layout(name, entries_, data_size);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->self_ = file;
  file->adopt(FileImage::map(path, "a .safetensors file"));
  file->parse(path);
  return file;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::from_bytes(std::string bytes,
                                                             const std::string& name) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = name;
  file->self_ = file;
  file->adopt(FileImage::own(std::move(bytes)));
  file->parse(name);
  return file;
}

void SafetensorsFile::adopt(FileImage image) {
  image_ = std::move(image);
  base_ = image_.data();
  size_ = image_.size();
}

SafetensorsFile::~SafetensorsFile() = default;

Tensor SafetensorsFile::get(const std::string& tensor) const {
  auto it = entries_.find(tensor);
  if (it == entries_.end()) fail(path_, "no tensor named " + printable(tensor));
  const Entry& e = it->second;
  const char* data = base_ + data_start_ + e.begin;
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(e.dtype) != 0) {
    Tensor copy = Tensor::zeros(e.dtype, e.shape);
    std::memcpy(copy.data(), data, e.end - e.begin);
    return copy;
  }
  // The view shares ownership of this file, so the mapping outlives every tensor taken from it.
  return Tensor::view(e.dtype, e.shape, const_cast<char*>(data),
                      std::shared_ptr<const void>(self_.lock()));
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

}  // namespace lowbit::formats
