// Checkpoint: find the safetensors files of a model directory (single file, sharded with an index,
// or a loose set of files) and serve their tensors under one name space.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/safetensors.h"
#include "formats/safetensors_json.h"
#include "lowbit/error.h"

namespace lowbit::formats {
namespace {

namespace fs = std::filesystem;
using detail::printable;
using nlohmann::json;

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw IoError(path + ": read failed");
  return text.str();
}

// The files of `dir` whose names end in `suffix`, sorted.
std::vector<fs::path> files_ending_in(const fs::path& dir, const std::string& suffix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ends_with(name, suffix) && is_file(it->path())) out.push_back(it->path());
  }
  if (ec) throw IoError(dir.string() + ": cannot list directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

// A shard name from an index must stay inside the checkpoint directory.
bool is_safe_relative(const std::string& name) {
  fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  for (const fs::path& part : p) {
    if (part == "..") return false;
  }
  return true;
}

// The weight_map of an index file, validated for shape: {tensor: shard file name}.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  json index = detail::parse_json_strict(read_text_file(index_path), index_path, "index");
  if (!index.is_object()) {
    throw InvalidArgument(index_path + ": index must be a JSON object, got " +
                          detail::json_type(index));
  }
  auto it = index.find("weight_map");
  if (it == index.end()) throw InvalidArgument(index_path + ": missing field \"weight_map\"");
  if (!it->is_object()) {
    throw InvalidArgument(index_path + ": field \"weight_map\" must be an object, got " +
                          detail::json_type(*it));
  }
  if (it->empty()) throw InvalidArgument(index_path + ": field \"weight_map\" lists no tensor");
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : it->items()) {
    const std::string where = index_path + ": weight_map tensor " + printable(tensor);
    if (!shard.is_string()) {
      throw InvalidArgument(where + ": shard must be a file name string, got " +
                            detail::json_type(shard));
    }
    const std::string& name = shard.get_ref<const std::string&>();
    if (!is_safe_relative(name)) {
      throw InvalidArgument(where + ": shard " + printable(name) +
                            " must be a relative file name inside the checkpoint directory");
    }
    weight_map.emplace(tensor, name);
  }
  return weight_map;
}

// Registers every tensor of files[i] in owner; a name already owned by another file is an error.
void add_owned_tensors(const std::string& checkpoint,
                       const std::vector<std::shared_ptr<SafetensorsFile>>& files, size_t i,
                       std::map<std::string, size_t>* owner) {
  for (const auto& [name, entry] : files[i]->entries()) {
    auto [it, inserted] = owner->emplace(name, i);
    if (!inserted) {
      throw InvalidArgument(checkpoint + ": tensor " + printable(name) + " is in two files: " +
                            files[it->second]->path() + " and " + files[i]->path());
    }
  }
}

struct Loaded {
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> owner;
};

Loaded load_files(const std::string& checkpoint, const std::vector<fs::path>& paths) {
  Loaded out;
  for (const fs::path& p : paths) {
    out.files.push_back(SafetensorsFile::open(p.string()));
    add_owned_tensors(checkpoint, out.files, out.files.size() - 1, &out.owner);
  }
  return out;
}

Loaded load_index(const std::string& index_path) {
  std::map<std::string, std::string> weight_map = read_weight_map(index_path);
  fs::path dir = fs::path(index_path).parent_path();
  // Shards in name order, each opened once; the first tensor naming a shard is quoted if it is
  // missing, so the message points at a line of the index.
  std::map<std::string, std::string> shard_first_tensor;
  for (const auto& [tensor, shard] : weight_map) shard_first_tensor.emplace(shard, tensor);
  std::map<std::string, size_t> shard_index;
  Loaded out;
  for (const auto& [shard, tensor] : shard_first_tensor) {
    fs::path shard_path = dir / shard;
    if (!is_file(shard_path)) {
      throw InvalidArgument(index_path + ": weight_map tensor " + printable(tensor) + ": shard " +
                            printable(shard) + " is missing or not a regular file (" +
                            shard_path.string() + ")");
    }
    shard_index.emplace(shard, out.files.size());
    out.files.push_back(SafetensorsFile::open(shard_path.string()));
    add_owned_tensors(index_path, out.files, out.files.size() - 1, &out.owner);
  }
  for (const auto& [tensor, shard] : weight_map) {
    const SafetensorsFile& file = *out.files[shard_index.at(shard)];
    if (!file.has(tensor)) {
      throw InvalidArgument(index_path + ": weight_map tensor " + printable(tensor) +
                            " is listed in shard " + printable(shard) +
                            " but that file has no such tensor (" + file.path() + ")");
    }
  }
  return out;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw IoError(path + ": checkpoint not found" + (ec ? ": " + ec.message() : std::string()));
  }
  Loaded loaded;
  if (fs::is_directory(status)) {
    fs::path dir(path);
    std::vector<fs::path> other_indexes = files_ending_in(dir, ".safetensors.index.json");
    if (is_file(dir / kSingleName)) {
      loaded = load_files(path, {dir / kSingleName});
    } else if (is_file(dir / kIndexName)) {
      loaded = load_index((dir / kIndexName).string());
    } else if (other_indexes.size() == 1) {
      loaded = load_index(other_indexes[0].string());
    } else {
      std::vector<fs::path> files = files_ending_in(dir, ".safetensors");
      if (files.empty()) {
        // Older writers (torchao before its safetensors support, transformers 4 with
        // safe_serialization=False) left only a torch pickle: say so rather than "empty".
        std::vector<fs::path> pickles = files_ending_in(dir, ".bin");
        throw InvalidArgument(
            path + ": no .safetensors file in this directory" +
            (pickles.empty() ? std::string()
                             : "; it holds " + pickles[0].filename().string() +
                                   ", a torch pickle checkpoint, which lowbit does not read "
                                   "(re-save the model as safetensors)"));
      }
      loaded = load_files(path, files);
    }
  } else if (ends_with(path, ".json")) {
    loaded = load_index(path);
  } else {
    loaded = load_files(path, {fs::path(path)});
  }
  Checkpoint checkpoint;
  checkpoint.path_ = path;
  checkpoint.files_ = std::move(loaded.files);
  checkpoint.owner_ = std::move(loaded.owner);
  return checkpoint;
}

Checkpoint Checkpoint::from_tensors(std::string path, std::map<std::string, Tensor> tensors) {
  Checkpoint checkpoint;
  checkpoint.path_ = std::move(path);
  for (const auto& [name, t] : tensors) checkpoint.owner_.emplace(name, kInMemory);
  checkpoint.in_memory_ = std::move(tensors);
  return checkpoint;
}

Tensor Checkpoint::get(const std::string& tensor) const {
  auto it = owner_.find(tensor);
  if (it == owner_.end()) throw InvalidArgument(path_ + ": no tensor named " + printable(tensor));
  if (it->second == kInMemory) return in_memory_.at(tensor);
  return files_[it->second]->get(tensor);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(owner_.size());
  for (const auto& [name, index] : owner_) out.push_back(name);
  return out;
}

const std::string& Checkpoint::file_of(const std::string& tensor) const {
  auto it = owner_.find(tensor);
  if (it == owner_.end()) throw InvalidArgument(path_ + ": no tensor named " + printable(tensor));
  if (it->second == kInMemory) return path_;
  return files_[it->second]->path();
}

}  // namespace lowbit::formats
