// Which config group quantizes a module: compressed-tensors' matching rules (FORMATS.md §1.2). A
// target is an exact module name, "re:<regex>" (std::regex ECMAScript, anchored at the start like
// Python's re.match), or a class name (e.g. "Linear"); `ignore` entries match the same three ways
// and win over targets; among several matching targets the most specific wins (exact > regex >
// class name). Ties are broken as compressed-tensors 0.19 does (match_targets): alphabetically by
// target string, not by config order; a target listed in several groups belongs to the last.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "quant/scheme/quant_args.h"

namespace lowbit::quant {

// A module as matching sees it: full dotted name and its class names, most derived first
// (a Linear is {"Linear"}; lowbit reports routers as Linear, as vLLM does).
struct ModuleRef {
  std::string name;
  std::vector<std::string> classes;
};

enum class MatchKind { None, ClassName, Regex, Exact };  // increasing specificity

// How `target` matches `module` (None if it does not). Throws InvalidArgument for a bad regex.
MatchKind match_target(const std::string& target, const ModuleRef& module);

// Index of the config group that quantizes `module`, or nullopt (ignored or untargeted).
std::optional<size_t> resolve_group(
    const std::vector<std::pair<std::string, QuantScheme>>& groups,
    const std::vector<std::string>& ignore, const ModuleRef& module);

// Targets / ignore entries that match none of `modules`: the caller turns them into an error (a
// recipe that quantizes nothing is a mistake, not a silent no-op).
std::vector<std::string> unmatched_targets(
    const std::vector<std::pair<std::string, QuantScheme>>& groups,
    const std::vector<ModuleRef>& modules, const std::vector<std::string>& ignore = {});

}  // namespace lowbit::quant
