// Stop strings over streamed text: text is released only once it can no longer be the start of a
// stop string, and generation ends at the first occurrence of any stop string (which, as in vLLM
// and the OpenAI API, is not part of the output).
#pragma once

#include <string>
#include <vector>

namespace lowbit::runtime {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Feeds newly decoded text; returns the text that is now safe to emit.
  std::string push(const std::string& text);
  // True once a stop string has been seen; push() then returns nothing more.
  bool stopped() const { return stopped_; }
  // The stop string that ended generation (the earliest in the text; the first listed on a tie).
  const std::string& matched() const { return matched_; }
  // At the end of generation: whatever was held back (never part of a stop string).
  std::string flush();

 private:
  std::vector<std::string> stop_strings_;
  std::string pending_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace lowbit::runtime
