// gsm8k's answer extraction and exact match, as lm-eval 0.4.13's gsm8k task defines them
// (tasks/gsm8k/gsm8k.yaml, filters/extraction.py RegexFilter, api/metrics.py exact_match):
//   strict-match      the first match of "#### (\-?[0-9\.\,]+)", its group, stripped;
//   flexible-extract  the last match of "(-?[$0-9.,]{2,})|(-?[0-9]+)", its non-empty group, stripped;
//   either gives "[invalid]" when nothing matches;
//   exact match       prediction and reference are both rewritten by re.sub of ",", "\$",
//                     "(?s).*#### " and "\.$" (in that order, each removing every match), then
//                     lower-cased, and compared for equality.
// The two extraction patterns run as written, in Oniguruma (whose leftmost-first backtracking
// gives Python re's matches for them); the four rewrites are spelled out by hand.
#pragma once

#include <string>
#include <string_view>

namespace lowbit::eval {

inline constexpr const char* kGsm8kStrictPattern = R"(#### (\-?[0-9\.\,]+))";
inline constexpr const char* kGsm8kFlexiblePattern = R"((-?[$0-9.,]{2,})|(-?[0-9]+))";
inline constexpr const char* kInvalidAnswer = "[invalid]";

std::string gsm8k_strict_extract(std::string_view response);
std::string gsm8k_flexible_extract(std::string_view response);

// The reference/prediction rewrite of gsm8k's exact_match (lower-casing is ASCII only).
std::string gsm8k_normalize(std::string_view text);
bool gsm8k_exact_match(std::string_view prediction, std::string_view reference);

}  // namespace lowbit::eval
