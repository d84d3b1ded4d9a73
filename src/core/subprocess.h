// Running another program and waiting for it: `lowbit compare` drives quantize, eval and bench as
// child processes so that each one's peak memory is its own and an interrupted run leaves every
// finished step on disk.
#pragma once

#include <string>
#include <vector>

namespace lowbit {

struct ChildResult {
  int exit_code = 0;   // the child's exit status; 128 + signal when a signal ended it
  bool signaled = false;
};

// Starts argv[0] (a path, not searched in PATH) with argv, its stdout written to `stdout_path`
// (truncated) and its stderr inherited, and waits for it. IoError naming the program when it cannot
// be started or `stdout_path` cannot be opened.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& stdout_path);

// The path of the running executable (/proc/self/exe), so a command can run its own siblings.
std::string self_executable();

}  // namespace lowbit
