// Runs the `lowbit` binary as a user would and captures what it prints and its exit code.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace lowbit::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CliResult run_lowbit(const std::string& arguments) {
  std::string command = std::string(LOWBIT_BIN) + " " + arguments + " 2>&1";
  CliResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

inline std::string repo_path(const std::string& relative) {
  return std::string(LOWBIT_SOURCE_DIR) + "/" + relative;
}

// A scratch copy of a model directory that a test may damage.
inline std::filesystem::path scratch_copy(const std::string& model_relative, const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(LOWBIT_BINARY_DIR) / "cli-scratch" / tag;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  fs::copy(repo_path(model_relative), dir, fs::copy_options::recursive);
  for (auto& entry : fs::recursive_directory_iterator(dir)) {
    fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  return dir;
}

inline void write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string quoted(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

}  // namespace lowbit::testing
