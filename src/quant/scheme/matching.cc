// compressed-tensors 0.19.0's module matching (utils/match.py: match_name, _match_class,
// match_targets; quantization/lifecycle/apply.py: target_to_scheme, _scheme_from_targets).
#include "quant/scheme/matching.h"

#include <algorithm>
#include <map>
#include <regex>

#include "lowbit/error.h"

namespace lowbit::quant {
namespace {

bool is_regex(const std::string& target) { return target.rfind("re:", 0) == 0; }

// Compiled patterns are cached per thread: a model has hundreds of modules and few targets.
const std::regex& compiled(const std::string& pattern) {
  thread_local std::map<std::string, std::regex> cache;
  auto it = cache.find(pattern);
  if (it != cache.end()) return it->second;
  try {
    return cache.emplace(pattern, std::regex(pattern, std::regex::ECMAScript)).first->second;
  } catch (const std::regex_error& e) {
    throw InvalidArgument("target 're:" + pattern + "': invalid regular expression (" + e.what() +
                          ")");
  }
}

// match_name: "re:" + Python re.match (anchored at the start only), else equality.
bool match_name(const std::string& name, const std::string& target) {
  if (!is_regex(target)) return target == name;
  return std::regex_search(name, compiled(target.substr(3)), std::regex_constants::match_continuous);
}

// _match_class: any class name in the MRO equals the target; vLLM's LinearBase matches "Linear".
bool match_class(const ModuleRef& module, const std::string& target) {
  return std::any_of(module.classes.begin(), module.classes.end(), [&](const std::string& c) {
    return c == target || (c == "LinearBase" && target == "Linear");
  });
}

bool is_match(const ModuleRef& module, const std::string& target) {
  return match_name(module.name, target) || match_class(module, target);
}

}  // namespace

MatchKind match_target(const std::string& target, const ModuleRef& module) {
  if (match_name(module.name, target)) return is_regex(target) ? MatchKind::Regex : MatchKind::Exact;
  return match_class(module, target) ? MatchKind::ClassName : MatchKind::None;
}

std::optional<size_t> resolve_group(
    const std::vector<std::pair<std::string, QuantScheme>>& groups,
    const std::vector<std::string>& ignore, const ModuleRef& module) {
  // target_to_scheme: a target listed by several groups belongs to the last of them.
  std::map<std::string, size_t> target_to_group;
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto& t : groups[g].second.targets) target_to_group[t] = g;
  if (std::any_of(ignore.begin(), ignore.end(),
                  [&](const std::string& i) { return is_match(module, i); }))
    return std::nullopt;
  // match_targets sorts by ("re:" in target, target): plain names, then regexes, each
  // alphabetically; name / regex matches come before class-name matches.
  std::vector<std::string> targets;
  for (const auto& [t, g] : target_to_group) targets.push_back(t);
  std::stable_sort(targets.begin(), targets.end(), [](const std::string& a, const std::string& b) {
    const bool ra = a.find("re:") != std::string::npos, rb = b.find("re:") != std::string::npos;
    return ra != rb ? rb : a < b;
  });
  for (const auto& t : targets)
    if (match_name(module.name, t)) return target_to_group.at(t);
  for (const auto& t : targets)
    if (match_class(module, t)) return target_to_group.at(t);
  return std::nullopt;
}

std::vector<std::string> unmatched_targets(
    const std::vector<std::pair<std::string, QuantScheme>>& groups,
    const std::vector<ModuleRef>& modules, const std::vector<std::string>& ignore) {
  std::vector<std::string> candidates;
  for (const auto& [name, scheme] : groups)
    for (const auto& t : scheme.targets) candidates.push_back(t);
  candidates.insert(candidates.end(), ignore.begin(), ignore.end());
  std::vector<std::string> out;
  for (const auto& t : candidates) {
    if (std::find(out.begin(), out.end(), t) != out.end()) continue;
    const bool hit = std::any_of(modules.begin(), modules.end(),
                                 [&](const ModuleRef& m) { return is_match(m, t); });
    if (!hit) out.push_back(t);
  }
  return out;
}

}  // namespace lowbit::quant
