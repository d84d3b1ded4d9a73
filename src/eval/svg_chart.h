// A small inline-SVG chart helper for the HTML report (`lowbit report`): scatter plots with
// labelled points, reference lines and nice-number axes, and heat strips with a color legend.
// The output is a self-contained <svg> element (no scripts, no external resources) that scales
// with its container through its viewBox. Every string is escaped here, so callers pass plain text.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lowbit::eval::svg {

// `text` escaped for XML/HTML text and attribute values (& < > " ').
std::string escape(std::string_view text);

// Tick positions for an axis: `values` lie in [lo, hi], which covers the data range.
struct Ticks {
  double lo = 0;
  double hi = 1;
  std::vector<double> values;
  int decimals = 0;  // enough to tell neighbouring ticks apart
};

// Heckbert's "nice numbers" (Graphics Gems, 1990): the step is 1, 2 or 5 x 10^k, chosen so that
// about `target` ticks cover [lo, hi]; lo and hi are widened outward to multiples of the step.
Ticks nice_ticks(double lo, double hi, int target = 5);

// Ticks for a logarithmic axis over [lo, hi] (both > 0): 1-2-5 multiples of powers of ten, or
// only powers of ten when the range spans many decades.
Ticks log_ticks(double lo, double hi);

// A tick's text: the ticks' decimals on a linear axis, the digits of each value on a log one.
std::string format_tick(const Ticks& ticks, double value, bool log_scale);

// `value` with `decimals` digits after the point; "-0" prints as "0" and minus as U+2212.
std::string format_fixed(double value, int decimals);

enum class Marker { CIRCLE, SQUARE, DIAMOND, TRIANGLE, TRIANGLE_DOWN };

struct Axis {
  std::string label;             // name and unit, e.g. "size on disk (MiB)"
  bool include_zero = false;     // start the axis at 0 (honest for sizes and speeds)
  bool log_scale = false;
  std::function<std::string(double)> format;  // tick text; default format_fixed(v, decimals)
};

struct Point {
  double x = 0;
  double y = 0;
  std::string label;             // drawn beside the point
  std::string tooltip;           // shown on hover (<title>)
  std::string color = "#000000";
  Marker marker = Marker::CIRCLE;
  bool hollow = false;           // outline only (the baseline)
  bool highlight = false;        // a ring around it (the recommendation)
};

struct Line {
  std::vector<std::pair<double, double>> points;  // data coordinates
  std::string color = "#6b7280";
  bool dashed = false;
  double width = 1.5;
  std::string label;             // drawn at the last point, and its tooltip
};

// Where the "better" corner is, for a small arrow that tells the reader which way is good.
enum class Corner { NONE, LOWER_LEFT, UPPER_LEFT, LOWER_RIGHT, UPPER_RIGHT };

struct ScatterChart {
  std::string id;                // id of the <svg> element
  std::string description;       // <desc>, for screen readers
  double width = 580;
  double height = 330;
  Axis x;
  Axis y;
  std::vector<Line> lines;       // drawn under the points: fronts, reference curves
  std::vector<Point> points;
  Corner better = Corner::NONE;
  std::string empty_message;     // shown instead of points when there are none
};

std::string render_scatter(const ScatterChart& chart);

// Color stops of a sequential, colorblind-safe scale (matplotlib's magma, light to dark), so that
// low values fade into the page and large ones stand out.
std::string sequential_color(double t);  // t in [0, 1]

// Rows (schemes) x columns (modules), one colored cell per value; columns are grouped (by layer)
// under a shared label. Missing values are drawn hatched.
struct HeatStrip {
  std::string id;
  std::string description;
  double width = 1180;
  std::vector<std::string> rows;
  std::vector<std::string> columns;        // full names, shown on hover
  std::vector<std::string> column_groups;  // per column; consecutive equal ones share a label
  std::vector<std::string> column_kinds;   // per column, a short name ("q", "gate") for the key
  std::vector<std::vector<std::optional<double>>> values;  // [row][column]
  std::optional<size_t> highlight_row;
  std::string group_axis_label;            // e.g. "decoder layer"
  std::string legend_label;                // e.g. "relative weight error"
  bool log_scale = true;
  std::function<std::string(double)> format;  // legend tick and tooltip text
};

std::string render_heat_strip(const HeatStrip& strip);

}  // namespace lowbit::eval::svg
