// The "leave these modules unquantized" lists of non-compressed-tensors formats
// (modules_to_not_convert, ignored_layers): vLLM and transformers match an entry as a substring of
// the module's full name ("lm_head", "model.layers.0.mlp.down_proj", "k_proj"); lowbit also
// accepts compressed-tensors' "re:" regular expressions.
#pragma once

#include <regex>
#include <string>
#include <vector>

namespace lowbit::quant {

inline bool is_skipped_module(const std::string& prefix, const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) {
    if (entry.rfind("re:", 0) == 0) {
      if (std::regex_match(prefix, std::regex(entry.substr(3)))) return true;
    } else if (!entry.empty() && prefix.find(entry) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace lowbit::quant
