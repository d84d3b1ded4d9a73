// Heat strips: one row of colored cells per scheme, one column per quantized module.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "eval/svg_chart.h"
#include "eval/svg_chart_detail.h"

namespace lowbit::eval::svg {
namespace {

using detail::num;

// matplotlib's magma at t = 1, 7/8, ..., 0 (light to dark), from its published 256-entry table.
constexpr unsigned kSequentialStops[] = {0xfcfdbf, 0xfec287, 0xfb8761, 0xe55064, 0xb5367a,
                                         0x812581, 0x4f127b, 0x1c1044, 0x000004};
constexpr int kStopCount = sizeof kSequentialStops / sizeof kSequentialStops[0];
// The scale stops short of magma's near-black end, which reads as "missing" more than "large".
constexpr double kDarkest = 0.9;

std::string hex(unsigned rgb) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%06x", rgb & 0xffffff);
  return buf;
}

// Maps values to [0, 1] of the color scale, in log10 or linearly, over the legend's tick range.
struct ColorScale {
  Ticks ticks;
  bool log;
  double position(double v) const {
    double t;
    if (log) {
      const double lo = std::log10(ticks.lo), hi = std::log10(ticks.hi);
      t = v > 0 ? (std::log10(v) - lo) / (hi - lo) : 0;
    } else {
      t = (v - ticks.lo) / (ticks.hi - ticks.lo);
    }
    return std::clamp(t, 0.0, 1.0);
  }
};

ColorScale color_scale(const HeatStrip& strip) {
  double lo = INFINITY, hi = 0;
  for (const auto& row : strip.values) {
    for (const auto& v : row) {
      if (!v) continue;
      if (*v > 0) lo = std::min(lo, *v);
      hi = std::max(hi, *v);
    }
  }
  if (strip.log_scale && hi > 0) return {log_ticks(lo, hi), true};
  return {nice_ticks(0, hi > 0 ? hi : 1, 5), false};
}

std::string legend(const HeatStrip& strip, const ColorScale& scale, double x, double y) {
  const double w = 260, h = 12;
  std::string out = "<g class=\"legend\" font-size=\"12\" fill=\"#374151\">";
  out += "<text x=\"" + num(x) + "\" y=\"" + num(y - 6) + "\">" + escape(strip.legend_label) +
         "</text>";
  out += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
         num(h) + "\" fill=\"url(#" + escape(strip.id) + "-gradient)\" stroke=\"#9ca3af\" "
         "stroke-width=\"0.5\"/>";
  for (double v : scale.ticks.values) {
    const double tx = x + scale.position(v) * w;
    out += "<line x1=\"" + num(tx) + "\" y1=\"" + num(y + h) + "\" x2=\"" + num(tx) + "\" y2=\"" +
           num(y + h + 4) + "\" stroke=\"#6b7280\"/>";
    const std::string text = format_tick(scale.ticks, v, scale.log);
    out += "<text x=\"" + num(tx) + "\" y=\"" + num(y + h + 17) + "\" text-anchor=\"middle\">" +
           escape(text) + "</text>";
  }
  const double mx = x + w + 28;
  out += "<rect x=\"" + num(mx) + "\" y=\"" + num(y) + "\" width=\"18\" height=\"" + num(h) +
         "\" fill=\"url(#" + escape(strip.id) + "-hatch)\" stroke=\"#9ca3af\" stroke-width=\"0.5\"/>";
  out += "<text x=\"" + num(mx + 24) + "\" y=\"" + num(y + 10) + "\">not quantized or not measured</text>";
  return out + "</g>";
}

std::string defs(const HeatStrip& strip) {
  std::string out = "<defs><linearGradient id=\"" + escape(strip.id) + "-gradient\">";
  for (int i = 0; i < kStopCount; ++i) {
    const double t = static_cast<double>(i) / (kStopCount - 1);
    out += "<stop offset=\"" + num(100 * t) + "%\" stop-color=\"" + sequential_color(t) + "\"/>";
  }
  out += "</linearGradient><pattern id=\"" + escape(strip.id) + "-hatch\" width=\"6\" height=\"6\" "
         "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"6\" "
         "height=\"6\" fill=\"#f3f4f6\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#9ca3af\" "
         "stroke-width=\"2\"/></pattern></defs>";
  return out;
}

// Group labels (layer numbers) under the cells, thinned so that they never collide.
std::string group_labels(const HeatStrip& strip, const std::vector<double>& column_x, double cell,
                         double y) {
  std::string out = "<g class=\"groups\" font-size=\"11\" fill=\"#4b5563\" text-anchor=\"middle\">";
  double last_end = -1e9;
  for (size_t c = 0; c < strip.columns.size();) {
    size_t end = c;
    while (end < strip.columns.size() && strip.column_groups[end] == strip.column_groups[c]) ++end;
    const double mid = (column_x[c] + column_x[end - 1] + cell) / 2;
    const double w = detail::text_width(strip.column_groups[c], 11);
    if (mid - w / 2 > last_end + 6) {
      out += "<text x=\"" + num(mid) + "\" y=\"" + num(y) + "\">" + escape(strip.column_groups[c]) +
             "</text>";
      last_end = mid + w / 2;
    }
    c = end;
  }
  return out + "</g>";
}

}  // namespace

std::string sequential_color(double t) {
  t = std::clamp(t, 0.0, 1.0) * kDarkest * (kStopCount - 1);
  const int i = std::min(static_cast<int>(t), kStopCount - 2);
  const double f = t - i;
  unsigned rgb = 0;
  for (int shift = 16; shift >= 0; shift -= 8) {
    const double a = (kSequentialStops[i] >> shift) & 0xff;
    const double b = (kSequentialStops[i + 1] >> shift) & 0xff;
    rgb |= static_cast<unsigned>(std::lround(a + (b - a) * f)) << shift;
  }
  return hex(rgb);
}

std::string render_heat_strip(const HeatStrip& strip) {
  const double row_h = 26, row_gap = 5, group_gap = 3;
  double label_w = 0;
  for (size_t r = 0; r < strip.rows.size(); ++r) {
    // The highlighted row is bold (about 8 % wider) and starts with "★ ".
    const bool bold = strip.highlight_row == r;
    label_w = std::max(label_w, detail::text_width(strip.rows[r] + (bold ? "\xE2\x98\x85 " : ""), 13) *
                                    (bold ? 1.08 : 1.0));
  }
  label_w = std::clamp(label_w + 34, 110.0, 280.0);
  const double left = label_w, right = strip.width - 78;
  const size_t n = strip.columns.size();
  size_t groups = n > 0 ? 1 : 0;
  for (size_t c = 1; c < n; ++c) groups += strip.column_groups[c] != strip.column_groups[c - 1];
  const double cell = n > 0 ? (right - left - group_gap * (groups - 1)) / n : 0;
  std::vector<double> column_x(n);
  for (size_t c = 0, g = 0; c < n; ++c) {
    if (c > 0 && strip.column_groups[c] != strip.column_groups[c - 1]) ++g;
    column_x[c] = left + c * cell + g * group_gap;
  }
  const double rows_h = strip.rows.size() * (row_h + row_gap);
  const double height = 8 + rows_h + 102;
  const ColorScale scale = color_scale(strip);
  auto text = [&](double v) { return strip.format ? strip.format(v) : format_fixed(v, 4); };

  std::string out = "<svg id=\"" + escape(strip.id) + "\" class=\"chart heat-strip\" "
                    "xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + num(strip.width) + " " +
                    num(height) + "\" role=\"img\"><desc>" + escape(strip.description) + "</desc>";
  out += defs(strip);
  out += "<text x=\"" + num(right + 8) + "\" y=\"4\" dy=\"0.7em\" font-size=\"11\" fill=\"#6b7280\">mean</text>";
  for (size_t r = 0; r < strip.rows.size(); ++r) {
    const double y = 8 + r * (row_h + row_gap) + 6;
    const bool highlight = strip.highlight_row == r;
    out += std::string("<g class=\"row") + (highlight ? " recommended" : "") + "\">";
    out += "<text x=\"" + num(left - 10) + "\" y=\"" + num(y + row_h / 2 + 4.5) + "\" "
           "text-anchor=\"end\" font-size=\"13\" fill=\"#111827\"" +
           (highlight ? " font-weight=\"700\"" : "") + ">" + (highlight ? "\xE2\x98\x85 " : "") +
           escape(strip.rows[r]) + "</text>";
    double sum = 0;
    int count = 0;
    for (size_t c = 0; c < n; ++c) {
      const std::optional<double> v = r < strip.values.size() && c < strip.values[r].size()
                                           ? strip.values[r][c] : std::nullopt;
      const std::string fill = v ? sequential_color(scale.position(*v))
                                 : "url(#" + escape(strip.id) + "-hatch)";
      if (v) sum += *v, ++count;
      out += "<rect x=\"" + num(column_x[c]) + "\" y=\"" + num(y) + "\" width=\"" +
             num(std::max(cell - 0.6, 0.5)) + "\" height=\"" + num(row_h) + "\" fill=\"" + fill +
             "\"><title>" + escape(strip.rows[r] + " \xC2\xB7 " + strip.columns[c] + ": " +
                                   (v ? text(*v) : std::string("not quantized or not measured"))) +
             "</title></rect>";
    }
    if (highlight) {
      out += "<rect x=\"" + num(left - 3) + "\" y=\"" + num(y - 3) + "\" width=\"" +
             num(right - left + 6) + "\" height=\"" + num(row_h + 6) + "\" rx=\"3\" fill=\"none\" "
             "stroke=\"#111827\" stroke-width=\"2\"/>";
    }
    out += "<text x=\"" + num(right + 8) + "\" y=\"" + num(y + row_h / 2 + 4.5) + "\" font-size=\"12\" "
           "fill=\"#374151\">" + (count > 0 ? escape(text(sum / count)) : "\xE2\x80\x94") + "</text>";
    out += "</g>";
  }
  const double below = 8 + rows_h + 6;
  out += group_labels(strip, column_x, cell, below + 8);
  std::string key = strip.group_axis_label;
  if (!strip.column_kinds.empty() && n > 0) {
    std::string kinds;
    for (size_t c = 0; c < n && strip.column_groups[c] == strip.column_groups[0]; ++c) {
      kinds += (kinds.empty() ? "" : " \xC2\xB7 ") + strip.column_kinds[c];
    }
    key += " (columns in each: " + kinds + ")";
  }
  out += "<text x=\"" + num(left) + "\" y=\"" + num(below + 28) + "\" font-size=\"12\" "
         "fill=\"#374151\">" + escape(key) + "</text>";
  out += legend(strip, scale, left, below + 62);
  return out + "</svg>";
}

}  // namespace lowbit::eval::svg
