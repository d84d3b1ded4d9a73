// The SVG chart helper: nice-number ticks, number text, escaping, and what the charts draw.
#include "eval/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>

namespace lowbit::eval::svg {
namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = 0; (pos = text.find(needle, pos)) != std::string::npos; pos += needle.size()) ++n;
  return n;
}

int markers(const std::string& svg) {
  return count(svg, "<g class=\"point\">") + count(svg, "<g class=\"point recommended\">");
}

// Worked by hand from Heckbert's algorithm (Graphics Gems I, "Nice numbers for graph labels").
TEST(NiceTicksTest, HeckbertWorkedExamples) {
  // range nice(8.5) = 10, step nice(10 / 5 = 2) = 2.
  Ticks t = nice_ticks(-0.3, 8.2, 6);
  EXPECT_EQ(t.values, (std::vector<double>{-2, 0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(t.decimals, 0);
  // range nice(37.4) = 50, step nice(50 / 6 = 8.3) = 10.
  t = nice_ticks(0, 37.4, 7);
  EXPECT_EQ(t.values, (std::vector<double>{0, 10, 20, 30, 40}));
  // range nice(0.047) = 0.05, step nice(0.05 / 4 = 0.0125) = 0.01: two decimals.
  t = nice_ticks(0.001, 0.048, 5);
  ASSERT_EQ(t.values.size(), 6u);
  EXPECT_NEAR(t.values.back(), 0.05, 1e-12);
  EXPECT_EQ(t.values.front(), 0);
  EXPECT_EQ(t.decimals, 2);
}

TEST(NiceTicksTest, PropertiesOverRandomRanges) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-6, 6), unit(-1, 1);
  for (int i = 0; i < 2000; ++i) {
    const double scale = std::pow(10.0, exponent(rng));
    double lo = unit(rng) * scale, hi = unit(rng) * scale;
    if (lo > hi) std::swap(lo, hi);
    const Ticks t = nice_ticks(lo, hi, 5);
    ASSERT_GE(t.values.size(), 2u);
    EXPECT_LE(t.lo, lo);
    EXPECT_GE(t.hi, hi);
    const double step = t.values[1] - t.values[0];
    // The step is 1, 2 or 5 times a power of ten.
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-6 || std::fabs(mantissa - 2) < 1e-6 ||
                std::fabs(mantissa - 5) < 1e-6 || std::fabs(mantissa - 10) < 1e-6)
        << "step " << step << " for [" << lo << ", " << hi << "]";
    EXPECT_LE(t.values.size(), 11u);  // about 5, never a crowd
    // The decimals tell neighbouring ticks apart.
    EXPECT_NE(format_fixed(t.values[0], t.decimals), format_fixed(t.values[1], t.decimals));
  }
}

TEST(NiceTicksTest, DegenerateRanges) {
  Ticks t = nice_ticks(5, 5);
  EXPECT_LT(t.lo, 5);
  EXPECT_GT(t.hi, 5);
  t = nice_ticks(0, 0);
  EXPECT_LE(t.lo, 0);
  EXPECT_GT(t.hi, 0);
  t = nice_ticks(NAN, 1);
  EXPECT_FALSE(t.values.empty());
  t = nice_ticks(3, 1);  // reversed
  EXPECT_LE(t.lo, 1);
  EXPECT_GE(t.hi, 3);
}

TEST(LogTicksTest, OneTwoFiveWithinFewDecades) {
  Ticks t = log_ticks(0.0011, 0.048);
  ASSERT_EQ(t.values.size(), 6u);
  const double expected[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05};
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(t.values[i], expected[i], expected[i] * 1e-9);
  EXPECT_EQ(format_tick(t, 0.005, true), "0.005");
  EXPECT_EQ(format_tick(t, 0.02, true), "0.02");
  // Six decades: powers of ten only, 1e-5 .. 10.
  t = log_ticks(3e-5, 2);
  EXPECT_EQ(t.values.size(), 7u);
  EXPECT_NEAR(t.lo, 1e-5, 1e-15);
  EXPECT_NEAR(t.hi, 10, 1e-9);
}

TEST(FormatTest, FixedUsesATrueMinusAndNoNegativeZero) {
  EXPECT_EQ(format_fixed(1.25, 1), "1.2");  // round-half-even of the binary value 1.25
  EXPECT_EQ(format_fixed(-1.5, 1), "\xE2\x88\x92" "1.5");
  EXPECT_EQ(format_fixed(-0.0001, 2), "0.00");
  EXPECT_EQ(format_fixed(0, 0), "0");
}

TEST(EscapeTest, EscapesMarkupAndQuotes) {
  EXPECT_EQ(escape("a<b>&\"c\"'d'"), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
  EXPECT_EQ(escape("\xC2\xB7 plain"), "\xC2\xB7 plain");
}

ScatterChart two_points() {
  ScatterChart chart;
  chart.id = "c1";
  chart.x = {"size (MiB)", true, false, {}};
  chart.y = {"error (%)", false, false, {}};
  Point a;
  a.x = 10, a.y = 5, a.label = "small <&> \"one\"", a.color = "#0072B2";
  Point b;
  b.x = 30, b.y = 1, b.label = "big", b.color = "#D55E00", b.marker = Marker::SQUARE, b.highlight = true;
  chart.points = {a, b};
  Line front;
  front.points = {{10, 5}, {30, 1}};
  front.dashed = true;
  front.label = "Pareto front";
  chart.lines = {front};
  return chart;
}

TEST(ScatterTest, DrawsEachPointWhereItsValueIs) {
  const std::string svg = render_scatter(two_points());
  EXPECT_EQ(svg.rfind("<svg id=\"c1\"", 0), 0u);
  EXPECT_EQ(markers(svg), 2);
  EXPECT_EQ(count(svg, "class=\"point recommended\""), 1);
  // Point a is a circle, b a square: a is left of b and above it (larger y is higher up).
  std::smatch circle, square;
  ASSERT_TRUE(std::regex_search(svg, circle, std::regex(R"re(<circle cx="([\d.]+)" cy="([\d.]+)" r="6.5")re")));
  ASSERT_TRUE(std::regex_search(svg, square, std::regex(R"re(<rect x="([\d.]+)" y="([\d.]+)" width="11.4")re")));
  EXPECT_LT(std::stod(circle[1]), std::stod(square[1]));
  EXPECT_LT(std::stod(circle[2]), std::stod(square[2]));
  // The x axis starts at zero (include_zero) and has nice ticks.
  EXPECT_NE(svg.find(">0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">30</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(svg.find(">Pareto front</text>"), std::string::npos);
}

TEST(ScatterTest, EscapesEveryString) {
  ScatterChart chart = two_points();
  chart.id = "x\"onload=\"alert(1)";
  chart.x.label = "<script>";
  chart.description = "a & b";
  const std::string svg = render_scatter(chart);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("small <&>"), std::string::npos);
  EXPECT_NE(svg.find("small &lt;&amp;&gt; &quot;one&quot;"), std::string::npos);
  EXPECT_NE(svg.find("id=\"x&quot;onload=&quot;alert(1)\""), std::string::npos);
  EXPECT_NE(svg.find("<desc>a &amp; b</desc>"), std::string::npos);
}

TEST(ScatterTest, EmptyChartSaysSo) {
  ScatterChart chart;
  chart.id = "empty";
  chart.empty_message = "not measured";
  const std::string svg = render_scatter(chart);
  EXPECT_NE(svg.find(">not measured</text>"), std::string::npos);
  EXPECT_EQ(markers(svg), 0);
}

TEST(HeatStripTest, ColorsFollowTheValuesAndMissingCellsAreHatched) {
  HeatStrip strip;
  strip.id = "h";
  strip.rows = {"FP8", "W4A16"};
  strip.columns = {"model.layers.0.q_proj", "model.layers.0.k_proj", "model.layers.1.q_proj"};
  strip.column_groups = {"0", "0", "1"};
  strip.column_kinds = {"q", "k", "q"};
  strip.values = {{0.01, 0.02, std::nullopt}, {0.1, 0.2, 0.15}};
  strip.highlight_row = 1;
  strip.legend_label = "relative error";
  const std::string svg = render_heat_strip(strip);
  // The legend's range is 0.01 .. 0.2 on a log scale, so the extremes get its end colors.
  EXPECT_NE(svg.find("fill=\"" + sequential_color(0) + "\"><title>FP8 \xC2\xB7 model.layers.0.q_proj: 0.0100"),
            std::string::npos) << svg;
  EXPECT_NE(svg.find("fill=\"" + sequential_color(1) + "\"><title>W4A16 \xC2\xB7 model.layers.0.k_proj: 0.2000"),
            std::string::npos);
  EXPECT_NE(svg.find("fill=\"url(#h-hatch)\"><title>FP8 \xC2\xB7 model.layers.1.q_proj: not quantized or not measured"),
            std::string::npos);
  EXPECT_EQ(count(svg, "<g class=\"row"), 2);
  EXPECT_EQ(count(svg, "<g class=\"row recommended\""), 1);
  EXPECT_NE(svg.find("(columns in each: q \xC2\xB7 k)"), std::string::npos);
  // Mean of the first row over its measured cells: 0.015.
  EXPECT_NE(svg.find(">0.0150</text>"), std::string::npos);
}

TEST(SequentialColorTest, RunsFromLightToDark) {
  auto luminance = [](const std::string& hex) {
    const unsigned v = std::stoul(hex.substr(1), nullptr, 16);
    return 0.2126 * (v >> 16) + 0.7152 * ((v >> 8) & 0xff) + 0.0722 * (v & 0xff);
  };
  EXPECT_EQ(sequential_color(0), "#fcfdbf");  // magma's lightest entry
  double previous = 1e9;
  for (int i = 0; i <= 20; ++i) {
    const double l = luminance(sequential_color(i / 20.0));
    EXPECT_LT(l, previous) << i;
    previous = l;
  }
  EXPECT_EQ(sequential_color(-1), sequential_color(0));
  EXPECT_EQ(sequential_color(2), sequential_color(1));
}

}  // namespace
}  // namespace lowbit::eval::svg
