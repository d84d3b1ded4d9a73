// The report's charts, built from a CompareResult (internal to report_html.cc).
#pragma once

#include <string>

#include "eval/compare_result.h"
#include "eval/svg_chart.h"

namespace lowbit::eval::report {

// One scheme's color and marker, the same in every chart and in the table. Colors are the
// Okabe-Ito palette (distinguishable with every common color-vision deficiency) and the marker
// shape differs too, so nothing depends on color alone.
struct SeriesStyle {
  std::string color;
  svg::Marker marker;
};
SeriesStyle baseline_style();
SeriesStyle scheme_style(size_t index);

// A 14-pixel inline SVG of the style's marker, for the table and the legends.
std::string marker_icon(const SeriesStyle& style, bool hollow);

// The figures' accuracy and speed halves: ΔPPL and KLD against size; decode and prefill speed
// against size.
std::string accuracy_figures(const CompareResult& result);
std::string speed_figures(const CompareResult& result);

// <section>s: the four scatter charts in a 2 x 2 grid under one legend; the per-layer error strip.
std::string tradeoff_section(const CompareResult& result);
std::string layer_section(const CompareResult& result);

}  // namespace lowbit::eval::report
