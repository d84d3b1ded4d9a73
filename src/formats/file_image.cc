#include "formats/file_image.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "lowbit/error.h"

namespace lowbit::formats {

namespace {
std::string os_error(int err) { return std::error_code(err, std::generic_category()).message(); }
}  // namespace

FileImage FileImage::map(const std::string& path, const std::string& expected) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": cannot open: " + os_error(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(path + ": cannot stat: " + os_error(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InvalidArgument(path + ": not a regular file (a directory?); expected " + expected);
  }
  FileImage image;
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {  // mmap refuses length 0: an empty file is an empty owned image
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (mapped == MAP_FAILED) throw IoError(path + ": cannot mmap: " + os_error(err));
    image.mapped_ = static_cast<const char*>(mapped);
    image.mapped_size_ = size;
  } else {
    ::close(fd);
  }
  return image;
}

FileImage FileImage::own(std::string bytes) {
  FileImage image;
  image.owned_ = std::move(bytes);
  return image;
}

void FileImage::release() {
  if (mapped_ != nullptr) ::munmap(const_cast<char*>(mapped_), mapped_size_);
  mapped_ = nullptr;
  mapped_size_ = 0;
}

FileImage::~FileImage() { release(); }

FileImage::FileImage(FileImage&& other) noexcept
    : mapped_(std::exchange(other.mapped_, nullptr)),
      mapped_size_(std::exchange(other.mapped_size_, 0)),
      owned_(std::move(other.owned_)) {}

FileImage& FileImage::operator=(FileImage&& other) noexcept {
  if (this != &other) {
    release();
    mapped_ = std::exchange(other.mapped_, nullptr);
    mapped_size_ = std::exchange(other.mapped_size_, 0);
    owned_ = std::move(other.owned_);
  }
  return *this;
}

}  // namespace lowbit::formats
