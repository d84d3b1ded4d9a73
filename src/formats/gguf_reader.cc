// GgufFile: mmap a .gguf file (or adopt bytes), parse and validate all of it, then hand out views.

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>

#include "formats/gguf.h"
#include "formats/safetensors_json.h"
#include "lowbit/error.h"

namespace lowbit::formats {
namespace {

using detail::printable;

constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS: ggml cannot hold more
constexpr int kMaxArrayDepth = 8;       // nested arrays deeper than this are refused (stack)
constexpr uint64_t kMinPairBytes = 13;  // empty key (8) + value type (4) + a 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // empty name, n_dims, 1 dim, type, offset


// Reads little-endian fields from the file image; every read is bounds-checked and a failure names
// the file, the current context (which pair or tensor) and the field.
class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& file)
      : base_(base), size_(size), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& file() const { return file_; }
  std::string context;  // "metadata key \"x\"", "tensor \"w\"", ...

  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(file_ + ": " + (context.empty() ? "" : context + ": ") + what);
  }

  void need(uint64_t n, const char* what) const {
    if (n > left()) {
      fail(std::string(what) + " at byte " + std::to_string(pos_) + " needs " + std::to_string(n) +
           " bytes but the file ends after " + std::to_string(left()) + " (truncated file?)");
    }
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // GGUF is little-endian, as lowbit's hosts are
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
};

// The fewest bytes one value of `type` can occupy (for checking counts before allocating).
uint64_t min_value_bytes(GgufType type) {
  switch (type) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::STRING:
      return 8;
    case GgufType::ARRAY:
      return 12;
    default:
      return 8;  // UINT64, INT64, FLOAT64
  }
}

GgufType read_type(Cursor& c, const char* what) {
  uint32_t id = c.read<uint32_t>(what);
  if (id > static_cast<uint32_t>(GgufType::FLOAT64)) {
    c.fail(std::string(what) + " " + std::to_string(id) + " is not a GGUF value type (0-12)");
  }
  return static_cast<GgufType>(id);
}

GgufValue read_value(Cursor& c, GgufType type, int depth);

GgufArray read_array(Cursor& c, int depth) {
  if (depth >= kMaxArrayDepth) {
    c.fail("arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
  }
  GgufArray array;
  array.element_type = read_type(c, "array element type");
  uint64_t count = c.read<uint64_t>("array length");
  uint64_t min_bytes = min_value_bytes(array.element_type);
  if (count > c.left() / min_bytes) {
    c.fail("array length " + std::to_string(count) + " of " +
           std::string(gguf_type_name(array.element_type)) + " cannot fit in the " +
           std::to_string(c.left()) + " bytes left in the file (truncated file?)");
  }
  array.items.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    array.items.push_back(read_value(c, array.element_type, depth + 1));
  }
  return array;
}

GgufValue read_value(Cursor& c, GgufType type, int depth) {
  using S = GgufValue::Storage;
  switch (type) {
    case GgufType::UINT8:
      return GgufValue(S(c.read<uint8_t>("UINT8 value")));
    case GgufType::INT8:
      return GgufValue(S(c.read<int8_t>("INT8 value")));
    case GgufType::UINT16:
      return GgufValue(S(c.read<uint16_t>("UINT16 value")));
    case GgufType::INT16:
      return GgufValue(S(c.read<int16_t>("INT16 value")));
    case GgufType::UINT32:
      return GgufValue(S(c.read<uint32_t>("UINT32 value")));
    case GgufType::INT32:
      return GgufValue(S(c.read<int32_t>("INT32 value")));
    case GgufType::FLOAT32:
      return GgufValue(S(c.read<float>("FLOAT32 value")));
    case GgufType::UINT64:
      return GgufValue(S(c.read<uint64_t>("UINT64 value")));
    case GgufType::INT64:
      return GgufValue(S(c.read<int64_t>("INT64 value")));
    case GgufType::FLOAT64:
      return GgufValue(S(c.read<double>("FLOAT64 value")));
    case GgufType::BOOL: {
      uint8_t b = c.read<uint8_t>("BOOL value");
      if (b > 1) c.fail("BOOL value " + std::to_string(b) + " is neither 0 nor 1");
      return GgufValue(S(b == 1));
    }
    case GgufType::STRING:
      return GgufValue(S(c.read_string("STRING value")));
    case GgufType::ARRAY:
      return GgufValue(S(read_array(c, depth)));
  }
  c.fail("unknown value type");  // unreachable: read_type checked the range
}

uint32_t read_version(Cursor& c) {
  if (c.left() < 4) {
    c.fail("file is " + std::to_string(c.left()) + " bytes, too short for the GGUF magic");
  }
  uint32_t magic = c.read<uint32_t>("magic");
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    std::string seen(reinterpret_cast<const char*>(&magic), 4);
    c.fail("bad magic " + printable(seen) + " (expected \"GGUF\"); not a GGUF file");
  }
  uint32_t version = c.read<uint32_t>("version");
  if (version == 1) {
    throw Unsupported(c.file() + ": GGUF version 1 (field version) is not supported; only 2 and 3");
  }
  if (version != 2 && version != 3) {
    uint32_t swapped = __builtin_bswap32(version);
    c.fail("field version is " + std::to_string(version) + ", expected 2 or 3" +
           (swapped == 2 || swapped == 3 ? " (a big-endian GGUF file? lowbit reads little-endian)"
                                         : ""));
  }
  return version;
}

struct RawTensor {
  GgufTensorInfo info;
  uint32_t type_id = 0;
};

RawTensor read_tensor_info(Cursor& c, uint64_t index) {
  RawTensor t;
  c.context = "tensor #" + std::to_string(index);
  t.info.name = c.read_string("name");
  c.context = "tensor " + printable(t.info.name);
  uint32_t n_dims = c.read<uint32_t>("n_dims");
  if (n_dims == 0 || n_dims > kMaxDims) {
    c.fail("n_dims is " + std::to_string(n_dims) + ", expected 1 to " + std::to_string(kMaxDims));
  }
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t v = c.read<uint64_t>("dimension");
    if (v == 0 || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      c.fail("dimension ne[" + std::to_string(d) + "] is " + std::to_string(v) +
             ", expected a positive size");
    }
    t.info.ne.push_back(static_cast<int64_t>(v));
  }
  t.type_id = c.read<uint32_t>("type");
  t.info.offset = c.read<uint64_t>("offset");
  return t;
}

std::string ne_string(const std::vector<int64_t>& ne) {
  std::string s = "ne [";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

// Type, element count and byte size of one tensor; its place in the file.
void check_tensor(const std::string& file, RawTensor& t, uint64_t alignment, uint64_t data_offset,
                  uint64_t file_size) {
  const std::string where = file + ": tensor " + printable(t.info.name) + ": ";
  const GgmlTypeTraits* traits = find_ggml_type(t.type_id);
  if (traits == nullptr) {
    throw InvalidArgument(where + "type " + std::to_string(t.type_id) + " is not a ggml type");
  }
  t.info.type = traits->type;
  uint64_t numel = 1;
  for (int64_t d : t.info.ne) {
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw InvalidArgument(where + ne_string(t.info.ne) + " has too many elements");
    }
  }
  if (t.info.ne[0] % traits->block_size != 0) {
    throw InvalidArgument(where + ne_string(t.info.ne) + ": ne[0] is not a multiple of " +
                          traits->name + "'s block size " + std::to_string(traits->block_size));
  }
  if (__builtin_mul_overflow(numel / traits->block_size, uint64_t{traits->type_size},
                             &t.info.nbytes)) {
    throw InvalidArgument(where + ne_string(t.info.ne) + " of " + traits->name + " is too large");
  }
  if (t.info.offset % alignment != 0) {
    throw InvalidArgument(where + "offset " + std::to_string(t.info.offset) +
                          " is not a multiple of the alignment " + std::to_string(alignment));
  }
  uint64_t begin = 0;
  uint64_t end = 0;
  if (__builtin_add_overflow(data_offset, t.info.offset, &begin) ||
      __builtin_add_overflow(begin, t.info.nbytes, &end) || end > file_size) {
    throw InvalidArgument(where + "offset " + std::to_string(t.info.offset) + " + " +
                          std::to_string(t.info.nbytes) + " bytes (data section at " +
                          std::to_string(data_offset) + ") is past the end of the file (" +
                          std::to_string(file_size) + " bytes)");
  }
}

void check_overlaps(const std::string& file, const std::vector<GgufTensorInfo>& tensors) {
  std::vector<const GgufTensorInfo*> order;
  order.reserve(tensors.size());
  for (const GgufTensorInfo& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const GgufTensorInfo* a, const GgufTensorInfo* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo& prev = *order[i - 1];
    const GgufTensorInfo& cur = *order[i];
    if (cur.offset < prev.offset + prev.nbytes) {
      throw InvalidArgument(file + ": tensor " + printable(cur.name) + " at offset " +
                            std::to_string(cur.offset) + " overlaps tensor " +
                            printable(prev.name) + " (offset " + std::to_string(prev.offset) +
                            ", " + std::to_string(prev.nbytes) + " bytes)");
    }
  }
}

uint64_t read_alignment(const std::string& file, const GgufFile& gguf) {
  const GgufValue* v = gguf.find("general.alignment");
  if (v == nullptr) return 32;  // GGUF_DEFAULT_ALIGNMENT
  const std::string where = file + ": metadata key \"general.alignment\"";
  if (v->type() != GgufType::UINT32) {
    throw InvalidArgument(where + " is " + std::string(gguf_type_name(v->type())) +
                          ", expected UINT32");
  }
  uint64_t a = std::get<uint32_t>(v->storage());
  if (a == 0 || (a & (a - 1)) != 0) {
    throw InvalidArgument(where + " = " + std::to_string(a) + " is not a power of two");
  }
  return a;
}

}  // namespace

void GgufFile::parse() {
  Cursor c(base_, size_, path_);
  version_ = read_version(c);
  uint64_t tensor_count = c.read<uint64_t>("tensor count");
  uint64_t kv_count = c.read<uint64_t>("metadata kv count");
  // Counts a corrupt file could make huge are checked against the bytes left before anything is
  // allocated for them.
  if (kv_count > c.left() / kMinPairBytes) {
    c.fail("metadata kv count " + std::to_string(kv_count) + " cannot fit in the " +
           std::to_string(c.left()) + " bytes after the header (truncated file?)");
  }
  if (tensor_count > (c.left() - kv_count * kMinPairBytes) / kMinTensorInfoBytes) {
    c.fail("tensor count " + std::to_string(tensor_count) + " cannot fit in the " +
           std::to_string(c.left()) + " bytes after the header (truncated file?)");
  }
  metadata_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    c.context = "metadata pair #" + std::to_string(i);
    std::string key = c.read_string("key");
    c.context = "metadata key " + printable(key);
    if (metadata_index_.count(key)) c.fail("key appears twice");
    GgufType type = read_type(c, "value type");
    GgufValue value = read_value(c, type, 0);
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }
  std::vector<RawTensor> raw;
  raw.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    raw.push_back(read_tensor_info(c, i));
    if (tensor_index_.count(raw.back().info.name)) c.fail("name appears twice");
    tensor_index_.emplace(raw.back().info.name, i);
  }
  alignment_ = read_alignment(path_, *this);
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (tensor_count > 0 && data_offset_ > size_) {
    throw InvalidArgument(
        path_ + ": the data section (tensor infos end at " + std::to_string(c.pos()) +
        ", aligned to " + std::to_string(alignment_) + ": " + std::to_string(data_offset_) +
        ") starts past the end of the file (" + std::to_string(size_) + " bytes)");
  }
  tensors_.reserve(raw.size());
  for (RawTensor& t : raw) {
    check_tensor(path_, t, alignment_, data_offset_, size_);
    tensors_.push_back(std::move(t.info));
  }
  check_overlaps(path_, tensors_);
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->adopt(FileImage::map(path, "a .gguf file"));
  file->parse();
  return file;
}

std::shared_ptr<GgufFile> GgufFile::from_bytes(std::string bytes, const std::string& name) {
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  file->adopt(FileImage::own(std::move(bytes)));
  file->parse();
  return file;
}

void GgufFile::adopt(FileImage image) {
  image_ = std::move(image);
  base_ = reinterpret_cast<const uint8_t*>(image_.data());
  size_ = image_.size();
}

GgufFile::~GgufFile() = default;

}  // namespace lowbit::formats
