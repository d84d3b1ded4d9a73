#include "eval/answer_extraction.h"

#include <cctype>

#include "tokenizer/pattern.h"

namespace lowbit::eval {
namespace {

const tokenizer::Regex& strict_regex() {
  static const tokenizer::Regex regex(kGsm8kStrictPattern, "gsm8k strict-match");
  return regex;
}

const tokenizer::Regex& flexible_regex() {
  static const tokenizer::Regex regex(kGsm8kFlexiblePattern, "gsm8k flexible-extract");
  return regex;
}

// Python's str.strip() for the ASCII whitespace these patterns could ever capture (none: the
// character classes hold no space; kept for the filter's fidelity).
std::string strip(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return std::string(s.substr(begin, end - begin));
}

std::string erase_all(std::string_view text, char c) {
  std::string out;
  for (char x : text) {
    if (x != c) out += x;
  }
  return out;
}

}  // namespace

std::string gsm8k_strict_extract(std::string_view response) {
  const auto matches = strict_regex().find_iter(response);
  if (matches.empty()) return kInvalidAnswer;
  // The group is the match without its literal "#### " prefix.
  const auto [begin, end] = matches.front();
  return strip(response.substr(begin + 5, end - begin - 5));
}

std::string gsm8k_flexible_extract(std::string_view response) {
  const auto matches = flexible_regex().find_iter(response);
  if (matches.empty()) return kInvalidAnswer;
  // Either alternative is the whole match, so the non-empty group is the match itself.
  const auto [begin, end] = matches.back();
  return strip(response.substr(begin, end - begin));
}

std::string gsm8k_normalize(std::string_view text) {
  std::string s = erase_all(erase_all(text, ','), '$');
  // "(?s).*#### ": greedy across newlines, so everything up to and including the last "#### ".
  const size_t marker = s.rfind("#### ");
  if (marker != std::string::npos) s.erase(0, marker + 5);
  // "\.$": `$` matches at the very end and just before a final "\n". At most one '.' can sit at
  // either place (a text ending in "\n" does not end in '.'), so there is at most one match.
  if (!s.empty() && s.back() == '\n' && s.size() >= 2 && s[s.size() - 2] == '.') {
    s.erase(s.size() - 2, 1);
  } else if (!s.empty() && s.back() == '.') {
    s.pop_back();
  }
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool gsm8k_exact_match(std::string_view prediction, std::string_view reference) {
  return gsm8k_normalize(prediction) == gsm8k_normalize(reference);
}

}  // namespace lowbit::eval
