// The read-only bytes of a whole file, for the format readers: mmapped from disk (zero copy), or
// owned (bytes handed over in memory, or an empty file, which mmap refuses). Move-only; data()
// stays valid while the image lives and is not moved (readers keep it in place).
#pragma once

#include <cstddef>
#include <string>

namespace lowbit::formats {

class FileImage {
 public:
  FileImage() = default;
  // Maps `path`: IoError naming it when it cannot be opened, stat'ed or mapped; InvalidArgument
  // when it is not a regular file ("expected " + `expected`, e.g. "a .gguf file").
  static FileImage map(const std::string& path, const std::string& expected);
  static FileImage own(std::string bytes);

  ~FileImage();
  FileImage(FileImage&& other) noexcept;
  FileImage& operator=(FileImage&& other) noexcept;
  FileImage(const FileImage&) = delete;
  FileImage& operator=(const FileImage&) = delete;

  const char* data() const { return mapped_ != nullptr ? mapped_ : owned_.data(); }
  size_t size() const { return mapped_ != nullptr ? mapped_size_ : owned_.size(); }

 private:
  void release();

  const char* mapped_ = nullptr;
  size_t mapped_size_ = 0;
  std::string owned_;
};

}  // namespace lowbit::formats
