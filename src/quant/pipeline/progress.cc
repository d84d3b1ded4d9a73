#include "quant/pipeline/progress.h"

#include <unistd.h>

#include <cstdio>

namespace lowbit::quant {

void Progress::start(const std::string& pass, int layers) {
  pass_ = pass;
  layers_ = layers;
  start_ = std::chrono::steady_clock::now();
  tty_ = isatty(STDERR_FILENO) != 0;
}

void Progress::layer_done(int layer) {
  if (!enabled_ || layers_ == 0) return;
  const int done = layer + 1;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = elapsed / done * (layers_ - done);
  constexpr int kWidth = 30;
  const int filled = done * kWidth / layers_;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "%s%-10s [%s] layer %d/%d  %.1f s elapsed, ETA %.1f s%s", tty_ ? "\r" : "",
               pass_.c_str(), bar.c_str(), done, layers_, elapsed, eta, tty_ ? "" : "\n");
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_ && layers_ > 0) std::fprintf(stderr, "\n");
  layers_ = 0;
}

}  // namespace lowbit::quant
