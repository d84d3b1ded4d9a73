// Internals shared by svg_chart.cc and svg_heat_strip.cc.
#pragma once

#include <string>

namespace lowbit::eval::svg::detail {

// A coordinate with one decimal: SVG output stays short and deterministic.
std::string num(double v);

// Estimated width in pixels of `text` (UTF-8) in a sans-serif face of `font_size` pixels, for
// placing labels where no text layout engine is available.
double text_width(const std::string& text, double font_size);

}  // namespace lowbit::eval::svg::detail
