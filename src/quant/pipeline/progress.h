// A one-line progress bar with an ETA on stderr (layers of the current pass), redrawn in place on
// a terminal and printed once per layer otherwise (logs, CI).
#pragma once

#include <chrono>
#include <string>

namespace lowbit::quant {

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  void start(const std::string& pass, int layers);
  void layer_done(int layer);
  void finish();

 private:
  bool enabled_;
  bool tty_ = false;
  std::string pass_;
  int layers_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace lowbit::quant
