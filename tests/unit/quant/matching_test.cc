// Target / ignore matching with compressed-tensors' semantics (utils/match.py, apply.py).
#include <gtest/gtest.h>

#include "lowbit/error.h"
#include "quant/scheme/matching.h"

namespace lowbit::quant {
namespace {

const ModuleRef kDown{"model.layers.0.mlp.down_proj", {"Linear"}};
const ModuleRef kQ{"model.layers.0.self_attn.q_proj", {"Linear"}};
const ModuleRef kHead{"lm_head", {"Linear"}};
const ModuleRef kNorm{"model.norm", {"LlamaRMSNorm"}};

TEST(MatchTarget, Kinds) {
  EXPECT_EQ(match_target("model.layers.0.mlp.down_proj", kDown), MatchKind::Exact);
  EXPECT_EQ(match_target("re:.*down_proj$", kDown), MatchKind::Regex);
  EXPECT_EQ(match_target("Linear", kDown), MatchKind::ClassName);
  EXPECT_EQ(match_target("Linear", ModuleRef{"x", {"QKVParallelLinear", "LinearBase"}}),
            MatchKind::ClassName);  // vLLM's LinearBase counts as Linear
  EXPECT_EQ(match_target("Linear", kNorm), MatchKind::None);
  EXPECT_EQ(match_target("down_proj", kDown), MatchKind::None);  // names match whole
}

TEST(MatchTarget, RegexIsAnchoredAtTheStartOnly) {  // Python's re.match
  EXPECT_EQ(match_target("re:mlp", kDown), MatchKind::None);
  EXPECT_EQ(match_target("re:model\\.layers\\.0", kDown), MatchKind::Regex);  // prefix suffices
  EXPECT_EQ(match_target("re:.*mlp", kDown), MatchKind::Regex);
  EXPECT_EQ(match_target("re:.*mlp$", kDown), MatchKind::None);
  EXPECT_EQ(match_target("re:.*(q|k|v)_proj$", kQ), MatchKind::Regex);
  EXPECT_THROW(match_target("re:(unclosed", kDown), InvalidArgument);
}

std::vector<std::pair<std::string, QuantScheme>> groups(
    std::vector<std::vector<std::string>> targets) {
  std::vector<std::pair<std::string, QuantScheme>> g;
  for (size_t i = 0; i < targets.size(); ++i) {
    QuantScheme s;
    s.targets = targets[i];
    g.emplace_back("group_" + std::to_string(i), s);
  }
  return g;
}

TEST(ResolveGroup, MostSpecificTargetWins) {
  const auto g = groups({{"Linear"}, {"re:.*mlp.*"}, {"model.layers.0.mlp.down_proj"}});
  EXPECT_EQ(resolve_group(g, {}, kDown), 2u);
  EXPECT_EQ(resolve_group(g, {}, kQ), 0u);
  const auto g2 = groups({{"re:.*mlp.*"}, {"Linear"}});
  EXPECT_EQ(resolve_group(g2, {}, kDown), 0u);  // regex beats class name whatever the order
  EXPECT_EQ(resolve_group(g2, {}, kNorm), std::nullopt);
}

TEST(ResolveGroup, IgnoreWinsAndMatchesNamesRegexesAndClasses) {
  const auto g = groups({{"Linear"}});
  EXPECT_EQ(resolve_group(g, {"lm_head"}, kHead), std::nullopt);
  EXPECT_EQ(resolve_group(g, {"re:.*down_proj"}, kDown), std::nullopt);
  EXPECT_EQ(resolve_group(g, {"Linear"}, kQ), std::nullopt);
  EXPECT_EQ(resolve_group(g, {"lm_head"}, kQ), 0u);
}

TEST(ResolveGroup, TiesFollowCompressedTensors) {
  // match_targets sorts regexes alphabetically: "re:.*layers.*" < "re:.*mlp.*".
  const auto g = groups({{"re:.*mlp.*"}, {"re:.*layers.*"}});
  EXPECT_EQ(resolve_group(g, {}, kDown), 1u);
  // The same target in two groups belongs to the later one (target_to_scheme is a dict).
  const auto g2 = groups({{"Linear"}, {"Linear"}});
  EXPECT_EQ(resolve_group(g2, {}, kDown), 1u);
}

TEST(UnmatchedTargets, ReportsTargetsAndIgnoresMatchingNothing) {
  const auto g = groups({{"Linear", "re:.*experts.*"}, {"model.layers.9.mlp.down_proj"}});
  EXPECT_EQ(unmatched_targets(g, {kDown, kQ, kHead}, {"lm_head", "vision_tower"}),
            (std::vector<std::string>{"re:.*experts.*", "model.layers.9.mlp.down_proj",
                                      "vision_tower"}));
  EXPECT_TRUE(unmatched_targets(groups({{"Linear"}}), {kDown}).empty());
}

}  // namespace
}  // namespace lowbit::quant
