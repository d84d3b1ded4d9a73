#include "eval/report_charts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include "eval/report_format.h"

namespace lowbit::eval::report {
namespace {

using svg::escape;

// Sizes are charted in MiB, or GiB from 2 GiB on (a 7B model and up).
struct SizeUnit {
  double bytes;
  const char* name;
};
SizeUnit size_unit(const CompareResult& r) {
  if (r.baseline.size_bytes >= (int64_t{2} << 30)) return {1024.0 * 1024 * 1024, "GiB"};
  return {1024.0 * 1024, "MiB"};
}

// A chartable entry: the baseline (index nullopt) or a scheme row.
struct Entry {
  const CompareMeasurements* m;
  std::string label;
  SeriesStyle style;
  bool baseline;
  bool recommended;
};

std::vector<Entry> entries(const CompareResult& r) {
  std::vector<Entry> out;
  out.push_back({&r.baseline, r.baseline.name + " (baseline)", baseline_style(), true,
                 r.recommendation.is_baseline});
  for (size_t i = 0; i < r.schemes.size(); ++i) {
    out.push_back({&r.schemes[i], r.schemes[i].label(), scheme_style(i), false,
                   r.recommendation.index == i});
  }
  return out;
}

svg::Point make_point(const Entry& e, double x, double y, const std::string& tooltip) {
  svg::Point p;
  p.x = x;
  p.y = y;
  p.label = e.label + (e.recommended ? " \xE2\x98\x85" : "");  // ★
  p.tooltip = tooltip;
  p.color = e.style.color;
  p.marker = e.style.marker;
  p.hollow = e.baseline;
  p.highlight = e.recommended;
  return p;
}

// The points no other point beats on both axes (smaller and lower), joined left to right.
svg::Line pareto_front(const std::vector<svg::Point>& points) {
  std::vector<std::pair<double, double>> sorted;
  for (const svg::Point& p : points) sorted.emplace_back(p.x, p.y);
  std::sort(sorted.begin(), sorted.end());
  svg::Line front;
  front.color = "#374151";
  front.dashed = true;
  front.label = "Pareto front";
  double best = INFINITY;
  for (auto [x, y] : sorted) {
    if (y < best) {
      if (!front.points.empty() && front.points.back().first == x) front.points.pop_back();
      front.points.emplace_back(x, y);
      best = y;
    }
  }
  return front;
}

std::string figure(const std::string& caption, const std::string& body) {
  return "<figure><figcaption>" + caption + "</figcaption>" + body + "</figure>";
}

std::string legend_html(const CompareResult& r) {
  std::string out = "<ul class=\"legend\">";
  for (const Entry& e : entries(r)) {
    out += "<li>" + marker_icon(e.style, e.baseline) + escape(e.label) +
           (e.recommended ? " <span class=\"badge\">recommended</span>" : "") + "</li>";
  }
  return out + "</ul>";
}

std::string kld_chart(const CompareResult& r, const SizeUnit& unit) {
  std::vector<double> klds;
  for (const CompareScheme& s : r.schemes) {
    if (s.kld_mean && *s.kld_mean > 0) klds.push_back(*s.kld_mean);
  }
  svg::ScatterChart chart;
  chart.id = "chart-kld-size";
  chart.description = "Mean KL divergence from the baseline against size on disk";
  chart.x = {std::string("size on disk (") + unit.name + ")", true, false, {}};
  // Spread over more than a factor 20, KLDs are only readable on a log axis; the baseline (0 by
  // definition) then has no place on it and is left out.
  const bool log = !klds.empty() &&
                   *std::max_element(klds.begin(), klds.end()) > 20 * *std::min_element(klds.begin(), klds.end());
  chart.y = {log ? "mean KLD, nats/token (log scale)" : "mean KLD (nats/token)", !log, log, {}};
  chart.better = svg::Corner::LOWER_LEFT;
  chart.empty_message = "KL divergence was not measured";
  for (const Entry& e : entries(r)) {
    const double x = static_cast<double>(e.m->size_bytes) / unit.bytes;
    if (e.baseline) {
      if (!log && !klds.empty()) chart.points.push_back(make_point(e, x, 0, e.label + ": KLD 0 by definition"));
      continue;
    }
    const auto& s = static_cast<const CompareScheme&>(*e.m);
    if (!s.kld_mean || (log && *s.kld_mean <= 0)) continue;
    chart.points.push_back(make_point(e, x, *s.kld_mean,
        e.label + ": " + format_bytes(s.size_bytes) + ", mean KLD " + format_sig(*s.kld_mean) +
        (s.kld_p99 ? ", p99 " + format_sig(*s.kld_p99) : "")));
  }
  if (chart.points.size() >= 2) chart.lines.push_back(pareto_front(chart.points));
  return figure("KL divergence from the baseline vs size", svg::render_scatter(chart));
}

}  // namespace

SeriesStyle baseline_style() { return {"#000000", svg::Marker::DIAMOND}; }

SeriesStyle scheme_style(size_t index) {
  // Okabe & Ito (2008), "Color Universal Design"; yellow is left out: too light on white.
  static const char* const kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                        "#E69F00", "#56B4E9"};
  static const svg::Marker kMarkers[] = {svg::Marker::CIRCLE, svg::Marker::SQUARE,
                                         svg::Marker::TRIANGLE, svg::Marker::TRIANGLE_DOWN,
                                         svg::Marker::CIRCLE, svg::Marker::SQUARE,
                                         svg::Marker::TRIANGLE};
  return {kColors[index % 6], kMarkers[index % 7]};
}

std::string marker_icon(const SeriesStyle& style, bool hollow) {
  std::string out = "<svg class=\"marker\" viewBox=\"0 0 18 18\" width=\"14\" height=\"14\" "
                    "aria-hidden=\"true\">";
  const std::string fill = hollow ? "#ffffff" : style.color;
  switch (style.marker) {
    case svg::Marker::SQUARE:
      out += "<rect x=\"3\" y=\"3\" width=\"12\" height=\"12\"";
      break;
    case svg::Marker::DIAMOND:
      out += "<path d=\"M9 1.5L16.5 9L9 16.5L1.5 9Z\"";
      break;
    case svg::Marker::TRIANGLE:
      out += "<path d=\"M9 2L16 15H2Z\"";
      break;
    case svg::Marker::TRIANGLE_DOWN:
      out += "<path d=\"M9 16L16 3H2Z\"";
      break;
    case svg::Marker::CIRCLE:
      out += "<circle cx=\"9\" cy=\"9\" r=\"6.5\"";
      break;
  }
  return out + " fill=\"" + fill + "\" stroke=\"" + style.color + "\" stroke-width=\"2\"/></svg>";
}

std::string accuracy_figures(const CompareResult& r) {
  const SizeUnit unit = size_unit(r);
  svg::ScatterChart chart;
  chart.id = "chart-ppl-size";
  chart.description = "Perplexity increase over the baseline against size on disk";
  chart.x = {std::string("size on disk (") + unit.name + ")", true, false, {}};
  chart.y = {"perplexity increase over baseline (%)", true, false, {}};
  chart.better = svg::Corner::LOWER_LEFT;
  for (const Entry& e : entries(r)) {
    const double delta = e.baseline ? 0 : static_cast<const CompareScheme&>(*e.m).delta_ppl;
    chart.points.push_back(make_point(e, static_cast<double>(e.m->size_bytes) / unit.bytes,
        delta * 100,
        e.label + ": " + format_bytes(e.m->size_bytes) + ", perplexity " + format_sig(e.m->ppl) +
        (e.baseline ? "" : " (" + format_signed_percent(delta) + ")")));
  }
  if (chart.points.size() >= 2) chart.lines.push_back(pareto_front(chart.points));
  return figure("Perplexity increase vs size", svg::render_scatter(chart)) + kld_chart(r, unit);
}

std::string speed_figures(const CompareResult& r) {
  const SizeUnit unit = size_unit(r);
  std::string figures;
  for (const bool decode : {true, false}) {
    svg::ScatterChart chart;
    chart.id = decode ? "chart-decode-size" : "chart-prefill-size";
    chart.description = std::string(decode ? "Decode" : "Prefill") + " speed against size on disk";
    chart.x = {std::string("size on disk (") + unit.name + ")", true, false, {}};
    chart.y = {decode ? "decode (tokens/s)" : "prefill (tokens/s)", true, false, {}};
    chart.better = svg::Corner::UPPER_LEFT;
    chart.empty_message = decode ? "Decode speed was not measured" : "Prefill speed was not measured";
    double smallest = INFINITY;
    for (const Entry& e : entries(r)) {
      const std::optional<double>& speed = decode ? e.m->decode_tok_s : e.m->prefill_tok_s;
      if (!speed) continue;
      const double x = static_cast<double>(e.m->size_bytes) / unit.bytes;
      smallest = std::min(smallest, x);
      chart.points.push_back(make_point(e, x, *speed,
          e.label + ": " + format_sig(*speed) + " tokens/s " + (decode ? "decode" : "prefill") +
          ", " + format_bytes(e.m->size_bytes)));
    }
    // Decoding one token reads every weight once: were it bound by memory bandwidth alone, its
    // speed would scale as 1/size from the baseline's. Below the curve: kernel overhead; above
    // it: a checkpoint that fits a cache the baseline did not.
    if (decode && r.baseline.decode_tok_s && chart.points.size() >= 2) {
      svg::Line ideal;
      ideal.color = "#9ca3af";
      ideal.dashed = true;
      ideal.label = "baseline speed \xC3\x97 baseline size / size";
      const double base_x = static_cast<double>(r.baseline.size_bytes) / unit.bytes;
      for (int i = 0; i <= 40; ++i) {
        const double x = smallest + (base_x - smallest) * i / 40.0;
        ideal.points.emplace_back(x, *r.baseline.decode_tok_s * base_x / x);
      }
      chart.lines.push_back(ideal);
    }
    figures += figure(decode ? "Decode speed vs size" : "Prefill speed vs size",
                      svg::render_scatter(chart));
  }
  return figures;
}

std::string tradeoff_section(const CompareResult& r) {
  return "<section id=\"tradeoffs\"><h2>Accuracy and speed against size</h2><p class=\"lede\">"
         "Each point is one checkpoint. Accuracy (top): lower left is better; the dashed line "
         "joins the Pareto-optimal checkpoints, which no other beats on both size and closeness "
         "to the baseline. Speed (bottom), measured on this machine for one sequence: upper left "
         "is better. Decode reads every weight once per token, so smaller should be faster.</p>" +
         legend_html(r) + "<div class=\"figures\">" + accuracy_figures(r) + speed_figures(r) +
         "</div></section>";
}

std::string layer_section(const CompareResult& r) {
  svg::HeatStrip strip;
  strip.id = "chart-layer-errors";
  strip.description = "Relative quantization error of every module, one row per scheme";
  std::map<std::string, size_t> column_of;
  static const std::regex kLayer(R"((?:^|\.)(?:layers|h|blocks)\.(\d+)\.)");
  for (const CompareScheme& s : r.schemes) {
    for (const LayerError& e : s.layer_errors) {
      if (column_of.emplace(e.name, strip.columns.size()).second) {
        strip.columns.push_back(e.name);
        std::smatch m;
        const size_t dot = e.name.rfind('.');
        std::string kind = dot == std::string::npos ? e.name : e.name.substr(dot + 1);
        if (kind.size() > 5 && kind.ends_with("_proj")) kind.resize(kind.size() - 5);
        strip.column_groups.push_back(std::regex_search(e.name, m, kLayer) ? m[1].str() : kind);
        strip.column_kinds.push_back(kind);
      }
    }
  }
  std::string body;
  if (strip.columns.empty()) {
    body = "<p class=\"empty\">Per-layer errors were not measured.</p>";
  } else {
    for (size_t i = 0; i < r.schemes.size(); ++i) {
      strip.rows.push_back(r.schemes[i].label());
      std::vector<std::optional<double>> row(strip.columns.size());
      for (const LayerError& e : r.schemes[i].layer_errors) row[column_of[e.name]] = e.rel_error;
      strip.values.push_back(std::move(row));
    }
    strip.highlight_row = r.recommendation.index;
    strip.group_axis_label = "decoder layer";
    const std::string& metric = r.layer_error_metric;
    strip.legend_label = metric.empty() || metric == "weight_rel_fro"
                             ? "relative weight error \xE2\x80\x96W \xE2\x88\x92 Q(W)\xE2\x80\x96 / \xE2\x80\x96W\xE2\x80\x96 (log scale)"
                             : "relative error: " + metric + " (log scale)";
    strip.format = [](double v) { return format_sig(v); };
    body = svg::render_heat_strip(strip);
  }
  return "<section id=\"layers\"><h2>Per-layer quantization error</h2><p class=\"lede\">One row "
         "per scheme, one cell per quantized module, darker is worse. A column dark in every row "
         "is a sensitive layer, a candidate to keep in higher precision. GPTQ and AWQ accept a "
         "larger weight error to lower the error of each layer's output: compare schemes by "
         "\xCE\x94PPL and KLD, and layers within a scheme here.</p>" +
         figure("Relative error of each module", body) + "</section>";
}

}  // namespace lowbit::eval::report
