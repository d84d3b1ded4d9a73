// write_safetensors / write_sharded_safetensors: the Python library's byte layout, written through
// a temporary file and a rename.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <system_error>

#include "formats/safetensors.h"
#include "formats/safetensors_json.h"
#include "lowbit/error.h"

namespace lowbit::formats {
namespace {

namespace fs = std::filesystem;
using detail::json_quote;
using detail::printable;

std::string os_error(int err) { return std::error_code(err, std::generic_category()).message(); }

// A file written under path + ".tmp" and renamed over `path` by commit(); removed if never
// committed, so a failed write leaves neither half a file nor a stray temporary.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError(path_ + ": cannot create " + tmp_ + ": " + os_error(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      // write() may stop short (signals, or its ~2 GiB per-call cap on Linux).
      ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw IoError(path_ + ": write failed: " + os_error(n < 0 ? errno : EIO));
      p += n;
      size -= static_cast<size_t>(n);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) throw IoError(path_ + ": fsync failed: " + os_error(errno));
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw IoError(path_ + ": close failed: " + os_error(errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      throw IoError(path_ + ": cannot rename " + tmp_ + " into place: " + os_error(errno));
    }
    committed_ = true;
  }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The Python library orders tensors by its Rust Dtype enum, largest first, then by name; the
// enum lists types by increasing size, so each tensor starts aligned to its element size.
int layout_rank(DType dtype) {
  switch (dtype) {
    case DType::BOOL:
      return 0;
    case DType::U8:
      return 1;
    case DType::I8:
      return 2;
    case DType::F8_E5M2:
      return 3;
    case DType::F8_E4M3:
      return 4;
    case DType::I16:
      return 5;
    case DType::F16:
      return 6;
    case DType::BF16:
      return 7;
    case DType::I32:
      return 8;
    case DType::F32:
      return 9;
    case DType::F64:
      return 10;
    case DType::I64:
      return 11;
  }
  return 0;
}

struct Slot {
  const std::string* name;
  const Tensor* tensor;
  uint64_t begin;
  uint64_t end;
};

std::vector<Slot> plan_layout(const std::string& path,
                              const std::map<std::string, Tensor>& tensors) {
  std::vector<Slot> slots;
  slots.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") {
      throw InvalidArgument(path + ": \"__metadata__\" is reserved and cannot name a tensor");
    }
    if (tensor.data() == nullptr && tensor.nbytes() != 0) {
      throw InvalidArgument(path + ": tensor " + printable(name) + " has no data");
    }
    slots.push_back({&name, &tensor, 0, 0});
  }
  std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    return layout_rank(a.tensor->dtype()) > layout_rank(b.tensor->dtype());
  });  // stable: names stay in map (sorted) order within a dtype
  uint64_t offset = 0;
  for (Slot& s : slots) {
    s.begin = offset;
    offset += s.tensor->nbytes();
    s.end = offset;
  }
  return slots;
}

// Compact JSON as serde_json writes it, "__metadata__" first, then tensors in layout order; padded
// with spaces to a multiple of 8 bytes so the data section starts aligned.
std::string build_header(const std::string& path, const std::vector<Slot>& slots,
                         const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) h += ',';
      first = false;
      h += json_quote(key, path, "metadata key") + ":" + json_quote(value, path, "metadata value");
    }
    h += "}";
  }
  for (const Slot& s : slots) {
    if (h.size() > 1) h += ',';
    h += json_quote(*s.name, path, "tensor name");
    h += ":{\"dtype\":\"";
    h += dtype_name(s.tensor->dtype());
    h += "\",\"shape\":[";
    const Shape& shape = s.tensor->shape();
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) h += ',';
      h += std::to_string(shape[i]);
    }
    h += "],\"data_offsets\":[";
    h += std::to_string(s.begin);
    h += ',';
    h += std::to_string(s.end);
    h += "]}";
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// model-00001-of-00003.safetensors, model.safetensors.index.json, model.safetensors.
bool is_checkpoint_file_name(const std::string& name) {
  static const std::regex pattern(R"(model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?)");
  return std::regex_match(name, pattern);
}

// huggingface_hub's split: walk tensors in order; one larger than the limit gets a shard of its
// own; otherwise start a new shard when the next tensor would push the current one past the limit.
std::vector<std::vector<const std::pair<const std::string, Tensor>*>> split_into_shards(
    const std::map<std::string, Tensor>& tensors, size_t max_shard_bytes) {
  std::vector<std::vector<const std::pair<const std::string, Tensor>*>> shards;
  std::vector<const std::pair<const std::string, Tensor>*> current;
  size_t current_bytes = 0;
  for (const auto& item : tensors) {
    size_t bytes = item.second.nbytes();
    if (bytes > max_shard_bytes) {
      shards.push_back({&item});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(&item);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

}  // namespace

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<Slot> slots = plan_layout(path, tensors);
  std::string header = build_header(path, slots, metadata);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  AtomicFile out(path);
  out.write(length, sizeof length);
  out.write(header.data(), header.size());
  for (const Slot& s : slots) {
    if (s.end > s.begin) out.write(s.tensor->data(), s.end - s.begin);
  }
  out.commit();
}

void write_sharded_safetensors(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                               size_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir + ": cannot create directory: " + ec.message());
  auto shards = split_into_shards(tensors, max_shard_bytes);
  std::set<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();
  size_t total_bytes = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = shards.size() == 1 ? "model.safetensors" : shard_name(i, shards.size());
    std::map<std::string, Tensor> shard;
    for (const auto* item : shards[i]) {
      shard.emplace(item->first, item->second);
      weight_map[item->first] = name;
      total_bytes += item->second.nbytes();
    }
    write_safetensors((fs::path(dir) / name).string(), shard, metadata);
    written.insert(name);
  }
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                            {"weight_map", std::move(weight_map)}};
    // As transformers' save_pretrained writes it: indent 2, sorted keys, ASCII, final newline.
    std::string text = index.dump(2, ' ', true) + "\n";
    AtomicFile out((fs::path(dir) / "model.safetensors.index.json").string());
    out.write(text.data(), text.size());
    out.commit();
    written.insert("model.safetensors.index.json");
  }
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (is_checkpoint_file_name(name) && written.count(name) == 0) stale.push_back(it->path());
  }
  for (const fs::path& p : stale) {
    if (!fs::remove(p, ec) && ec)
      throw IoError(p.string() + ": cannot remove stale file: " + ec.message());
  }
}

}  // namespace lowbit::formats
