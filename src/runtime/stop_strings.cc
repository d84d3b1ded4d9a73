#include "runtime/stop_strings.h"

#include <algorithm>

namespace lowbit::runtime {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
}

std::string StopStringMatcher::push(const std::string& text) {
  if (stopped_) return {};
  pending_ += text;
  // Earliest complete stop string, if any.
  size_t earliest = std::string::npos;
  for (const auto& stop : stop_strings_) {
    const size_t at = pending_.find(stop);
    if (at < earliest) {
      earliest = at;
      matched_ = stop;
    }
  }
  if (earliest != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, earliest);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& stop : stop_strings_) {
    size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  return out;
}

}  // namespace lowbit::runtime
