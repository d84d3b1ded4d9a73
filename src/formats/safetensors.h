// safetensors checkpoints: zero-copy reading (mmap) of single files and sharded directories
// (model.safetensors.index.json), and atomic writing. Every header is validated before any tensor
// is handed out; a bad file raises InvalidArgument naming the file and the tensor or field, a dtype
// that safetensors knows but lowbit does not (U32, F8_E8M0, ...) raises Unsupported, and an OS
// failure (missing file, mmap refused) raises IoError.
//
// Tensors from a file are views of a read-only mapping: they must not be written to (copy them,
// e.g. with to_f32(), to get writable memory). A file truncated by another process while it is
// mapped can still end the process with SIGBUS; that is the price of zero-copy loading.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/file_image.h"
#include "lowbit/tensor.h"

namespace lowbit::formats {

// One .safetensors file, memory-mapped read-only. Tensors returned by get() are views into the
// mapping and keep it alive.
class SafetensorsFile {
 public:
  // Opens and validates: 8-byte little-endian header length within the file, header JSON an object
  // with no repeated key, each entry {dtype, shape, data_offsets}, known dtype, shape × dtype size
  // == byte length, ranges within the data section, not overlapping and, as the format requires,
  // covering it with no hole. "__metadata__" (string → string) is optional.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  // Same validation on an in-memory image (used by the fuzzer and tests); `name` is used in errors.
  static std::shared_ptr<SafetensorsFile> from_bytes(std::string bytes, const std::string& name);

  const std::string& path() const { return path_; }
  bool has(const std::string& tensor) const { return entries_.count(tensor) != 0; }
  // A view into the file (no copy), or InvalidArgument naming file and tensor if absent. Only a
  // tensor whose bytes are not aligned to its element size (possible in files not written by the
  // Python library) is copied, so that typed access to it is well defined.
  Tensor get(const std::string& tensor) const;
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  struct Entry {
    DType dtype;
    Shape shape;
    size_t begin;  // offsets relative to the data section
    size_t end;
  };
  const std::map<std::string, Entry>& entries() const { return entries_; }

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

 private:
  SafetensorsFile() = default;
  void parse(const std::string& name);
  void adopt(FileImage image);  // takes the bytes; base_ / size_ view them

  std::string path_;
  FileImage image_;
  const char* base_ = nullptr;  // image_'s bytes
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::weak_ptr<SafetensorsFile> self_;
};

// A checkpoint directory: model.safetensors if present (transformers' preference), else
// model.safetensors.index.json with its shards, else the directory's only *.safetensors.index.json,
// else (as a fallback) every *.safetensors file in the directory. A path to a single .safetensors
// file, or to an index .json file, also works. Tensor names are unique across shards (an error
// otherwise); every weight_map entry must name an existing shard (inside the directory) that holds
// the tensor. Tensors a shard holds but the index does not list are still served.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);
  // Tensors made in memory by another reader (the GGUF model source), served under the same
  // interface; `path` is what messages and file_of() name. files() is empty.
  static Checkpoint from_tensors(std::string path, std::map<std::string, Tensor> tensors);

  bool has(const std::string& tensor) const { return owner_.count(tensor) != 0; }
  Tensor get(const std::string& tensor) const;  // InvalidArgument naming the checkpoint if absent
  std::vector<std::string> names() const;       // sorted
  const std::string& path() const { return path_; }
  // The file a tensor lives in (for messages).
  const std::string& file_of(const std::string& tensor) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> owner_;  // tensor -> index into files_, or kInMemory
  std::map<std::string, Tensor> in_memory_;
  static constexpr size_t kInMemory = static_cast<size_t>(-1);
};

// Writes tensors to `path` (through path + ".tmp" and a rename, so a reader never sees half a
// file), byte for byte as the Python library (safetensors 0.8) does: the header JSON padded with
// spaces to a multiple of 8 bytes, tensors laid out by decreasing dtype (I64 F64 F32 I32 BF16 F16
// I16 F8_E4M3 F8_E5M2 I8 U8 BOOL, so each tensor is aligned to its element size) then by name,
// with no padding between them. A non-empty `metadata` goes to "__metadata__" in key order (the
// Python library's order there is random).
void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes a sharded checkpoint into directory `dir` (created if missing): shards of at most
// `max_shard_bytes` named model-0000i-of-0000n.safetensors plus model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {...}}), or a single model.safetensors when
// everything fits in one shard. Tensors are taken in name order and split as huggingface_hub does
// (a tensor larger than the limit gets a shard of its own); every shard carries `metadata`.
// Files of an earlier save that this one does not overwrite (model*.safetensors shards, index) are
// removed afterwards.
void write_sharded_safetensors(const std::string& dir, const std::map<std::string, Tensor>& tensors,
                               size_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace lowbit::formats
