#include "runtime/stop_strings.h"

#include <gtest/gtest.h>

namespace lowbit::runtime {
namespace {

TEST(StopStringMatcherTest, HoldsBackPossiblePrefixAndStopsAtMatch) {
  StopStringMatcher matcher({"\n\nUser:"});
  EXPECT_EQ(matcher.push("Hello"), "Hello");
  EXPECT_EQ(matcher.push(" world\n"), " world");  // "\n" may start the stop string
  EXPECT_EQ(matcher.push("\nUs"), "");
  EXPECT_EQ(matcher.push("er: more"), "");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.push("ignored"), "");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStringMatcherTest, ReleasesFalseAlarm) {
  StopStringMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.push("ST"), "");
  EXPECT_EQ(matcher.push("AY"), "STAY");
  EXPECT_FALSE(matcher.stopped());
  EXPECT_EQ(matcher.push("xST"), "x");
  EXPECT_EQ(matcher.flush(), "ST");
}

TEST(StopStringMatcherTest, EarliestOfSeveralWins) {
  StopStringMatcher matcher({"cd", "b"});
  EXPECT_EQ(matcher.push("abcd"), "a");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStringMatcherTest, NoStopStringsPassesEverything) {
  StopStringMatcher matcher({});
  EXPECT_EQ(matcher.push("abc"), "abc");
  EXPECT_EQ(matcher.flush(), "");
}

}  // namespace
}  // namespace lowbit::runtime
