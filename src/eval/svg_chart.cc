// Scatter charts and the shared pieces (escaping, ticks, number text). Heat strips are in
// svg_heat_strip.cc.
#include "eval/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "eval/svg_chart_detail.h"

namespace lowbit::eval::svg {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// Heckbert's nice number near x: 1, 2, 5 or 10 times a power of ten; rounded to the nearest when
// `round`, else the smallest one >= x.
double nice_number(double x, bool round) {
  const double exponent = std::floor(std::log10(x));
  const double fraction = x / std::pow(10.0, exponent);
  double nice;
  if (round) {
    nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  } else {
    nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
  }
  return nice * std::pow(10.0, exponent);
}

int decimals_for_step(double step) {
  return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
}

}  // namespace

Ticks nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) {
    // One value: a unit-sized window around it (or [0, 1] around zero).
    const double half = lo == 0 ? 0.5 : std::fabs(lo) * 0.1;
    lo -= half;
    hi += half;
  }
  target = std::max(target, 2);
  const double range = nice_number(hi - lo, false);
  const double step = nice_number(range / (target - 1), true);
  Ticks ticks;
  ticks.lo = std::floor(lo / step + 1e-9) * step;
  ticks.hi = std::ceil(hi / step - 1e-9) * step;
  const auto count = static_cast<int>(std::lround((ticks.hi - ticks.lo) / step));
  for (int i = 0; i <= count; ++i) {
    double v = ticks.lo + i * step;
    if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0.000" from rounding
    ticks.values.push_back(v);
  }
  ticks.decimals = decimals_for_step(step);
  return ticks;
}

Ticks log_ticks(double lo, double hi) {
  if (!(lo > 0) || !(hi > 0) || !std::isfinite(lo) || !std::isfinite(hi)) lo = 1, hi = 10;
  if (lo > hi) std::swap(lo, hi);
  const int first = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int last = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  std::vector<double> mantissas = {1};
  if (last - first <= 3) mantissas = {1, 2, 5};
  std::vector<double> candidates;
  for (int e = first; e <= std::max(last, first + 1); ++e) {
    for (double m : mantissas) candidates.push_back(m * std::pow(10.0, e));
  }
  Ticks ticks;
  ticks.lo = candidates.front();
  ticks.hi = candidates.back();
  for (double c : candidates) {
    if (c <= lo * (1 + 1e-9)) ticks.lo = c;
  }
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    if (*it >= hi * (1 - 1e-9)) ticks.hi = *it;
  }
  for (double c : candidates) {
    if (c >= ticks.lo * (1 - 1e-9) && c <= ticks.hi * (1 + 1e-9)) ticks.values.push_back(c);
  }
  ticks.decimals = decimals_for_step(ticks.lo);
  return ticks;
}

std::string format_tick(const Ticks& ticks, double value, bool log_scale) {
  // Log ticks span decades: each gets the digits it needs (0.005, 0.01, 0.2, 1), not those of
  // the smallest.
  return format_fixed(value, log_scale && value > 0 ? decimals_for_step(value) : ticks.decimals);
}

std::string format_fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 12), value);
  std::string text = buf;
  if (text[0] == '-') {
    const bool zero = text.find_first_not_of("-0.") == std::string::npos;
    text = zero ? text.substr(1) : "\xE2\x88\x92" + text.substr(1);  // U+2212 minus sign
  }
  return text;
}

namespace detail {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

double text_width(const std::string& text, double font_size) {
  // An average glyph of a sans-serif face is about 0.58 em wide; UTF-8 continuation bytes are
  // not glyphs.
  size_t glyphs = 0;
  for (unsigned char c : text) glyphs += (c & 0xC0) != 0x80;
  return static_cast<double>(glyphs) * font_size * 0.58;
}

}  // namespace detail

namespace {

using detail::num;

struct Box {
  double x0, y0, x1, y1;
  double overlap(const Box& o) const {
    const double w = std::min(x1, o.x1) - std::max(x0, o.x0);
    const double h = std::min(y1, o.y1) - std::max(y0, o.y0);
    return w > 0 && h > 0 ? w * h : 0;
  }
};

// Maps a data interval onto pixels, linearly or in log10.
struct Scale {
  double d0, d1, r0, r1;
  bool log;
  double operator()(double v) const {
    if (log) {
      v = std::log10(std::max(v, 1e-300));
      return r0 + (v - std::log10(d0)) / (std::log10(d1) - std::log10(d0)) * (r1 - r0);
    }
    return r0 + (v - d0) / (d1 - d0) * (r1 - r0);
  }
};

Ticks axis_ticks(const Axis& axis, std::vector<double> values, int target) {
  if (axis.log_scale) {
    std::erase_if(values, [](double v) { return !(v > 0); });
    if (values.empty()) return log_ticks(1, 10);
    auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    // A little room (a factor 1.15) so that no point sits on the frame.
    return log_ticks(*lo / 1.15, *hi * 1.15);
  }
  if (values.empty()) return nice_ticks(0, 1, target);
  auto [lo_it, hi_it] = std::minmax_element(values.begin(), values.end());
  double lo = *lo_it, hi = *hi_it;
  if (axis.include_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  const double span = hi - lo > 0 ? hi - lo : std::max(std::fabs(hi), 1e-9);
  if (!(axis.include_zero && lo == 0)) lo -= 0.05 * span;
  hi += 0.08 * span;  // room for labels beside the largest values
  return nice_ticks(lo, hi, target);
}

std::string tick_text(const Axis& axis, const Ticks& ticks, double v) {
  return axis.format ? axis.format(v) : format_tick(ticks, v, axis.log_scale);
}

std::string marker_svg(const Point& p, double x, double y) {
  const std::string fill = p.hollow ? "#ffffff" : p.color;
  const std::string stroke = p.hollow ? p.color : "#ffffff";
  const std::string paint = " fill=\"" + fill + "\" stroke=\"" + stroke + "\" stroke-width=\"" +
                            (p.hollow ? "2.5" : "1.5") + "\"";
  const double r = 6.5;
  switch (p.marker) {
    case Marker::SQUARE:
      return "<rect x=\"" + num(x - r + 0.8) + "\" y=\"" + num(y - r + 0.8) + "\" width=\"" +
             num(2 * r - 1.6) + "\" height=\"" + num(2 * r - 1.6) + "\"" + paint + "/>";
    case Marker::DIAMOND:
      return "<path d=\"M" + num(x) + " " + num(y - r - 1) + "L" + num(x + r + 1) + " " + num(y) +
             "L" + num(x) + " " + num(y + r + 1) + "L" + num(x - r - 1) + " " + num(y) + "Z\"" +
             paint + "/>";
    case Marker::TRIANGLE:
    case Marker::TRIANGLE_DOWN: {
      const double s = p.marker == Marker::TRIANGLE ? 1 : -1;
      return "<path d=\"M" + num(x) + " " + num(y - s * (r + 1.5)) + "L" + num(x + r + 1) + " " +
             num(y + s * (r - 0.5)) + "L" + num(x - r - 1) + " " + num(y + s * (r - 0.5)) + "Z\"" +
             paint + "/>";
    }
    case Marker::CIRCLE:
      break;
  }
  return "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\"" + paint + "/>";
}

// Places each label beside its point at the first candidate position that stays inside `frame`
// and overlaps no marker and no earlier label; failing that, at the least-overlapping one.
std::string place_labels(const ScatterChart& chart, const std::vector<std::pair<double, double>>& xy,
                         const Box& frame, std::vector<Box>& taken) {
  struct Candidate { double dx, dy; const char* anchor; };
  static const Candidate kCandidates[] = {
      {11, 4, "start"},  {-11, 4, "end"},  {0, -13, "middle"}, {0, 21, "middle"},
      {9, -9, "start"},  {9, 17, "start"}, {-9, -9, "end"},    {-9, 17, "end"}};
  const double font = 12.5;
  std::string out;
  for (size_t i = 0; i < chart.points.size(); ++i) {
    const Point& p = chart.points[i];
    if (p.label.empty()) continue;
    const double w = detail::text_width(p.label, font) * (p.highlight ? 1.08 : 1);
    Box best{};
    const Candidate* best_c = nullptr;
    double best_cost = std::numeric_limits<double>::infinity();
    for (const Candidate& c : kCandidates) {
      const double ax = xy[i].first + c.dx * (p.highlight ? 1.5 : 1);
      const double ay = xy[i].second + c.dy * (p.highlight ? 1.3 : 1);
      const double x0 = c.anchor[0] == 's' ? ax : c.anchor[0] == 'e' ? ax - w : ax - w / 2;
      const Box box{x0, ay - font * 0.8, x0 + w, ay + font * 0.25};
      double cost = 0;
      for (const Box& t : taken) cost += box.overlap(t);
      const double outside = std::max(0.0, frame.x0 - box.x0) + std::max(0.0, box.x1 - frame.x1) +
                             std::max(0.0, frame.y0 - box.y0) + std::max(0.0, box.y1 - frame.y1);
      cost += outside * 1000;
      if (cost < best_cost) best_cost = cost, best = box, best_c = &c;
      if (cost == 0) break;
    }
    taken.push_back(best);
    const double ax = best_c->anchor[0] == 's' ? best.x0 : best_c->anchor[0] == 'e' ? best.x1
                                                                                 : (best.x0 + best.x1) / 2;
    out += "<text class=\"point-label\" x=\"" + num(ax) + "\" y=\"" + num(best.y1 - font * 0.25) +
           "\" text-anchor=\"" + best_c->anchor + "\" font-size=\"" + num(font) + "\"" +
           (p.highlight ? " font-weight=\"700\"" : "") +
           " fill=\"#111827\" stroke=\"#ffffff\" stroke-width=\"3.5\" paint-order=\"stroke\">" +
           escape(p.label) + "</text>";
  }
  return out;
}

std::string render_axes(const ScatterChart& chart, const Ticks& tx, const Ticks& ty,
                        const Scale& sx, const Scale& sy, const Box& plot) {
  std::string out = "<g class=\"axes\" font-size=\"12\" fill=\"#374151\">";
  for (double v : tx.values) {
    const double x = sx(v);
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(plot.y0) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(plot.y1) + "\" stroke=\"#e5e7eb\"/>";
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(plot.y1) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(plot.y1 + 5) + "\" stroke=\"#6b7280\"/>";
    out += "<text x=\"" + num(x) + "\" y=\"" + num(plot.y1 + 19) + "\" text-anchor=\"middle\">" +
           escape(tick_text(chart.x, tx, v)) + "</text>";
  }
  for (double v : ty.values) {
    const double y = sy(v);
    const bool zero = !chart.y.log_scale && v == 0 && ty.lo < 0;  // a signed axis: mark zero
    out += "<line x1=\"" + num(plot.x0) + "\" y1=\"" + num(y) + "\" x2=\"" + num(plot.x1) +
           "\" y2=\"" + num(y) + "\" stroke=\"" + (zero ? "#9ca3af" : "#e5e7eb") + "\"/>";
    out += "<line x1=\"" + num(plot.x0 - 5) + "\" y1=\"" + num(y) + "\" x2=\"" + num(plot.x0) +
           "\" y2=\"" + num(y) + "\" stroke=\"#6b7280\"/>";
    out += "<text x=\"" + num(plot.x0 - 8) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
           escape(tick_text(chart.y, ty, v)) + "</text>";
  }
  out += "<path d=\"M" + num(plot.x0) + " " + num(plot.y0) + "V" + num(plot.y1) + "H" +
         num(plot.x1) + "\" fill=\"none\" stroke=\"#6b7280\"/>";
  out += "<text x=\"" + num((plot.x0 + plot.x1) / 2) + "\" y=\"" + num(plot.y1 + 40) +
         "\" text-anchor=\"middle\" font-size=\"13\" fill=\"#111827\">" + escape(chart.x.label) +
         "</text>";
  const double ly = (plot.y0 + plot.y1) / 2;
  out += "<text transform=\"translate(16 " + num(ly) + ") rotate(-90)\" text-anchor=\"middle\" "
         "font-size=\"13\" fill=\"#111827\">" + escape(chart.y.label) + "</text>";
  return out + "</g>";
}

// The legend of the reference lines, right-aligned above the plot.
std::string render_line_legend(const ScatterChart& chart, const Box& plot) {
  std::string out;
  double x = plot.x1;
  for (auto it = chart.lines.rbegin(); it != chart.lines.rend(); ++it) {
    if (it->label.empty()) continue;
    const double w = detail::text_width(it->label, 12);
    x -= w;
    out += "<text x=\"" + num(x) + "\" y=\"" + num(plot.y0 - 10) + "\" font-size=\"12\" "
           "fill=\"#374151\">" + escape(it->label) + "</text>";
    out += "<line x1=\"" + num(x - 28) + "\" y1=\"" + num(plot.y0 - 14) + "\" x2=\"" + num(x - 6) +
           "\" y2=\"" + num(plot.y0 - 14) + "\" stroke=\"" + it->color + "\" stroke-width=\"" +
           num(it->width) + "\"" + (it->dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>";
    x -= 46;
  }
  return out;
}

std::string render_better(Corner corner, const Box& plot, std::vector<Box>& taken) {
  if (corner == Corner::NONE) return {};
  const bool left = corner == Corner::LOWER_LEFT || corner == Corner::UPPER_LEFT;
  const bool lower = corner == Corner::LOWER_LEFT || corner == Corner::LOWER_RIGHT;
  const char* arrow = corner == Corner::LOWER_LEFT    ? "\xE2\x86\x99"   // ↙
                      : corner == Corner::UPPER_LEFT  ? "\xE2\x86\x96"   // ↖
                      : corner == Corner::LOWER_RIGHT ? "\xE2\x86\x98"   // ↘
                                                      : "\xE2\x86\x97";  // ↗
  const std::string text = left ? std::string(arrow) + " better" : "better " + std::string(arrow);
  const double x = left ? plot.x0 + 8 : plot.x1 - 8;
  const double y = lower ? plot.y1 - 8 : plot.y0 + 16;
  const double w = detail::text_width(text, 12);
  taken.push_back({left ? x : x - w, y - 12, left ? x + w : x, y + 3});
  return "<text class=\"better\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" +
         (left ? "start" : "end") + "\" font-size=\"12\" font-style=\"italic\" fill=\"#6b7280\">" +
         text + "</text>";
}

}  // namespace

std::string render_scatter(const ScatterChart& chart) {
  const Box plot{72, 34, chart.width - 18, chart.height - 54};
  std::vector<double> xs, ys;
  for (const Point& p : chart.points) xs.push_back(p.x), ys.push_back(p.y);
  for (const Line& l : chart.lines) {
    for (auto [x, y] : l.points) xs.push_back(x), ys.push_back(y);
  }
  const Ticks tx = axis_ticks(chart.x, xs, 7);
  const Ticks ty = axis_ticks(chart.y, ys, 6);
  const Scale sx{tx.lo, tx.hi, plot.x0, plot.x1, chart.x.log_scale};
  const Scale sy{ty.lo, ty.hi, plot.y1, plot.y0, chart.y.log_scale};

  std::string out = "<svg id=\"" + escape(chart.id) + "\" class=\"chart scatter\" xmlns=\"http://www.w3.org/2000/svg\" "
                    "viewBox=\"0 0 " + num(chart.width) + " " + num(chart.height) + "\" role=\"img\">";
  out += "<desc>" + escape(chart.description) + "</desc>";
  out += render_axes(chart, tx, ty, sx, sy, plot);
  out += render_line_legend(chart, plot);
  out += "<g class=\"lines\" fill=\"none\">";
  for (const Line& l : chart.lines) {
    if (l.points.size() < 2) continue;
    std::string d;
    for (auto [x, y] : l.points) d += (d.empty() ? "M" : "L") + num(sx(x)) + " " + num(sy(y));
    out += "<path d=\"" + d + "\" stroke=\"" + l.color + "\" stroke-width=\"" + num(l.width) + "\"" +
           (l.dashed ? " stroke-dasharray=\"5 3\"" : "") + "><title>" + escape(l.label) +
           "</title></path>";
  }
  out += "</g>";

  std::vector<std::pair<double, double>> xy;
  std::vector<Box> taken;
  out += render_better(chart.better, plot, taken);
  // Halos of highlighted points go under every marker, so they never hide a neighbour.
  out += "<g class=\"halos\">";
  for (const Point& p : chart.points) {
    xy.emplace_back(sx(p.x), sy(p.y));
    const auto [x, y] = xy.back();
    const double reach = p.highlight ? 14 : 8;  // the halo, or the marker
    taken.push_back({x - reach, y - reach, x + reach, y + reach});
    if (!p.highlight) continue;
    out += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"13.5\" fill=\"" + p.color +
           "\" fill-opacity=\"0.14\" stroke=\"" + p.color + "\" stroke-width=\"2\"/>";
  }
  out += "</g><g class=\"points\">";
  for (size_t i = 0; i < chart.points.size(); ++i) {
    const Point& p = chart.points[i];
    out += std::string("<g class=\"point") + (p.highlight ? " recommended" : "") + "\">";
    out += "<title>" + escape(p.tooltip.empty() ? p.label : p.tooltip) + "</title>";
    out += marker_svg(p, xy[i].first, xy[i].second) + "</g>";
  }
  out += "</g>";
  if (chart.points.empty() && !chart.empty_message.empty()) {
    out += "<text x=\"" + num((plot.x0 + plot.x1) / 2) + "\" y=\"" + num((plot.y0 + plot.y1) / 2) +
           "\" text-anchor=\"middle\" font-size=\"14\" fill=\"#6b7280\">" +
           escape(chart.empty_message) + "</text>";
  }
  out += "<g class=\"labels\">" + place_labels(chart, xy, plot, taken) + "</g>";
  return out + "</svg>";
}

}  // namespace lowbit::eval::svg
