#include "eval/report_html.h"

#include <filesystem>
#include <fstream>

#include "eval/report_charts.h"
#include "eval/report_format.h"
#include "eval/report_style.h"
#include "eval/svg_chart.h"
#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

using report::format_bytes;
using report::format_sig;
using report::kNotMeasured;
using svg::escape;

std::string sub(const std::string& text) { return "<span class=\"sub\">" + text + "</span>"; }

std::string base_name(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

std::string header_html(const CompareResult& r) {
  const CompareMachine& m = r.machine;
  std::string machine = m.cpu.empty() ? "" : escape(m.cpu);
  if (m.threads) machine += (machine.empty() ? "" : " \xC2\xB7 ") + std::to_string(*m.threads) + " threads";
  if (!m.gpu.empty()) machine += (machine.empty() ? "" : " \xC2\xB7 ") + escape(m.gpu);
  if (machine.empty()) machine = kNotMeasured;

  const CompareProtocol& p = r.protocol;
  std::string protocol = "perplexity of <code>" + escape(p.ppl_text) + "</code>, " +
                         (p.windows ? std::to_string(*p.windows) + " windows" : std::string("all windows")) +
                         " of " + std::to_string(p.ctx) + " tokens" + (p.bos ? ", BOS first" : "");
  std::string tasks;
  for (const std::string& t : p.tasks) tasks += (tasks.empty() ? "" : ", ") + ("<code>" + escape(t) + "</code>");

  auto item = [](const char* name, const std::string& value, bool wide = false) {
    return std::string(wide ? "<div class=\"wide\">" : "<div>") + "<dt>" + name + "</dt><dd>" +
           value + "</dd></div>";
  };
  return "<header><h1>Quantization report: " + escape(base_name(r.model)) + "</h1>"
         "<p class=\"model mono\">" + escape(r.model) + "</p><dl class=\"meta\">" +
         item("Baseline", escape(r.baseline.name) + " \xC2\xB7 " + format_bytes(r.baseline.size_bytes) +
                              " \xC2\xB7 perplexity " + format_sig(r.baseline.ppl)) +
         item("Machine", machine) + item("Date", escape(report::format_timestamp(r.created))) +
         item("Schemes", std::to_string(r.schemes.size()) + " compared") + item("Protocol", protocol, true) +
         item("Tasks", tasks.empty() ? std::string("none") : tasks, true) + "</dl></header>";
}

// "3.4× smaller, +1.2% perplexity, KLD 0.012, decode 2.1× the baseline": the recommended row
// against the baseline, in the order a reader weighs them.
std::string summary(const CompareResult& r, const CompareScheme& s) {
  std::string text = report::format_ratio(static_cast<double>(r.baseline.size_bytes) / s.size_bytes) +
                     " smaller than " + escape(r.baseline.name) + ", " +
                     report::format_signed_percent(s.delta_ppl) + " perplexity";
  if (s.kld_mean) text += ", mean KLD " + format_sig(*s.kld_mean);
  if (s.task_acc && r.baseline.task_acc) {
    text += ", task accuracy " + report::format_percent(*s.task_acc) + " (baseline " +
            report::format_percent(*r.baseline.task_acc) + ")";
  }
  if (s.decode_tok_s && r.baseline.decode_tok_s) {
    text += ", decode " + report::format_ratio(*s.decode_tok_s / *r.baseline.decode_tok_s) + " the baseline's speed";
  }
  return text;
}

// The recommended row's series color, which marks it in the recommendation box and the table.
std::string accent_color(const CompareResult& r) {
  if (r.recommendation.index) return report::scheme_style(*r.recommendation.index).color;
  if (r.recommendation.is_baseline) return report::baseline_style().color;
  return "#6b7280";
}

std::string recommendation_html(const CompareResult& r) {
  const CompareRecommendation& rec = r.recommendation;
  std::string verdict, text;
  if (rec.index) {
    const CompareScheme& s = r.schemes[*rec.index];
    verdict = report::marker_icon(report::scheme_style(*rec.index), false) + escape(s.label());
    text = summary(r, s);
  } else if (rec.is_baseline) {
    verdict = "Keep " + escape(r.baseline.name) + ", do not quantize";
    text = "No quantized scheme met the accuracy budget.";
  } else {
    verdict = "No recommendation";
    text = "The compare run made none; the table and charts below show the trade-offs.";
  }
  std::string reasons;
  for (const std::string& reason : rec.reasons) reasons += "<li>" + escape(reason) + "</li>";
  return "<section class=\"recommendation\" id=\"recommendation\"><h2>Recommendation</h2><p class=\"verdict\">" + verdict + "</p><p class=\"summary\">" +
         text + "</p>" + (reasons.empty() ? "" : "<ul>" + reasons + "</ul>") + "</section>";
}

std::string pitfall_title(const std::string& kind) {
  if (kind == "lm_head_quantized") return "LM head quantized";
  if (kind == "shorter_outputs") return "Outputs shorter than the baseline's";
  if (kind == "repetitive_outputs") return "Repetitive outputs";
  if (kind == "not_faster") return "Not faster than the baseline";
  if (kind == "kv_cache_fp8_long_context" || kind == "kv_fp8_long_context") {
    return "FP8 KV cache degrades at long context";
  }
  std::string title = kind;
  for (char& c : title) c = c == '_' ? ' ' : c;
  return title;
}

std::string pitfalls_html(const CompareResult& r) {
  std::string callouts;
  for (const CompareScheme& s : r.schemes) {
    for (const Pitfall& p : s.pitfalls) {
      callouts += "<div class=\"callout warn\"><strong><span class=\"icon\">\xE2\x9A\xA0</span>" +
                  escape(s.label()) + ": " + escape(pitfall_title(p.kind)) + "</strong>" +
                  escape(p.message) + "</div>";
    }
  }
  if (callouts.empty()) {
    callouts = "<div class=\"callout ok\"><strong><span class=\"icon\">\xE2\x9C\x93</span>No pitfalls "
               "detected</strong>The checks of seed 004 found nothing for any scheme.</div>";
  }
  return "<section id=\"pitfalls\"><h2>Pitfalls</h2><p class=\"lede\">Seed 004's checks, run by "
         "<code>lowbit eval</code>: LM head quantized, outputs shorter or more repetitive than the "
         "baseline's, no speed-up, FP8 KV cache at long context.</p><div class=\"callouts\">" +
         callouts + "</div></section>";
}

std::string speed_cell(const std::optional<double>& speed, const std::optional<double>& baseline,
                       bool is_baseline) {
  if (!speed) return kNotMeasured;
  std::string text = format_sig(*speed);
  if (!is_baseline && baseline) text += sub(report::format_ratio(*speed / *baseline) + " baseline");
  return text;
}

std::string row_html(const CompareResult& r, const CompareMeasurements& m, const std::string& label,
                     const report::SeriesStyle& style, const CompareScheme* s, bool recommended) {
  const bool is_baseline = s == nullptr;
  std::string cls = is_baseline ? "baseline" : "";
  if (recommended) cls += cls.empty() ? "recommended" : " recommended";
  std::string out = "<tr" + (cls.empty() ? "" : " class=\"" + cls + "\"") + "><td>" +
                    report::marker_icon(style, is_baseline) + escape(label) +
                    (is_baseline ? " <span class=\"badge light\">baseline</span>" : "") +
                    (recommended ? " <span class=\"badge\">recommended</span>" : "");
  if (s && !s->algo.empty()) out += sub(escape("algo " + s->algo + (s->kv_cache.empty() ? "" : ", KV cache " + s->kv_cache)));
  out += "</td><td>" + report::format_sig(m.bits_per_weight) + "</td><td>" + format_bytes(m.size_bytes);
  if (!is_baseline) out += sub(report::format_ratio(static_cast<double>(r.baseline.size_bytes) / m.size_bytes) + " smaller");
  out += "</td><td>" + (is_baseline ? std::string("reference") : report::format_signed_percent(s->delta_ppl)) +
         sub("ppl " + format_sig(m.ppl)) + "</td><td>";
  if (is_baseline) {
    out += "0" + sub("reference");
  } else {
    out += report::or_dash(s->kld_mean, format_sig);
    std::string detail;
    if (s->kld_p99) detail = "p99 " + format_sig(*s->kld_p99);
    if (s->top1_agreement) detail += (detail.empty() ? "" : " \xC2\xB7 ") + ("top-1 " + report::format_percent(*s->top1_agreement));
    if (!detail.empty()) out += sub(detail);
  }
  out += "</td><td>";
  if (m.task_acc) {
    out += report::format_percent(*m.task_acc);
    if (m.task_acc_stderr) out += " \xC2\xB1 " + report::format_percent(*m.task_acc_stderr);
  } else {
    out += kNotMeasured;
  }
  out += "</td><td>" + speed_cell(m.decode_tok_s, r.baseline.decode_tok_s, is_baseline) + "</td><td>" +
         speed_cell(m.prefill_tok_s, r.baseline.prefill_tok_s, is_baseline) + "</td><td>" +
         (m.peak_rss_bytes ? format_bytes(*m.peak_rss_bytes) : std::string(kNotMeasured)) + "</td></tr>";
  return out;
}

std::string table_html(const CompareResult& r) {
  std::string rows = row_html(r, r.baseline, r.baseline.name, report::baseline_style(), nullptr,
                              r.recommendation.is_baseline);
  for (size_t i = 0; i < r.schemes.size(); ++i) {
    rows += row_html(r, r.schemes[i], r.schemes[i].label(), report::scheme_style(i), &r.schemes[i],
                     r.recommendation.index == i);
  }
  return "<section id=\"results\"><h2>Results</h2><table id=\"results-table\"><thead><tr>"
         "<th>Scheme</th><th>Bits / weight</th><th>Size on disk</th><th>\xCE\x94PPL</th>"
         "<th>KLD (mean, nats)</th><th>Task accuracy</th><th>Decode (tok/s)</th>"
         "<th>Prefill (tok/s)</th><th>Peak memory</th></tr></thead><tbody>" + rows +
         "</tbody></table><p class=\"note\">\xE2\x80\x94 not measured. \xCE\x94PPL: perplexity relative to "
         "the baseline's on the same tokens. KLD: mean KL(baseline \xE2\x80\x96 scheme) over tokens; "
         "p99 is its 99th percentile, top-1 the share of tokens where both models' most likely "
         "next token agree. Task accuracy \xC2\xB1 one standard error. Peak memory: resident set "
         "size of the run.</p></section>";
}

}  // namespace

std::string render_report_html(const CompareResult& result, const ReportOptions& options) {
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      // Nothing may be loaded from anywhere: the page is one file that works offline.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; img-src data:\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<meta name=\"generator\" content=\"" + escape(options.generator) + "\">"
      "<title>Quantization report: " + escape(base_name(result.model)) + "</title><style>" +
      report::stylesheet() + "</style></head><body><main style=\"--accent: " +
      accent_color(result) + "\">";
  page += header_html(result);
  page += "<div class=\"top\">" + recommendation_html(result) + pitfalls_html(result) + "</div>";
  page += table_html(result);
  page += report::tradeoff_section(result);
  page += report::layer_section(result);
  page += "<footer>Generated by " + escape(options.generator) + " from " + escape(options.source) +
          " (" + escape(result.format) + ").</footer></main></body></html>\n";
  return page;
}

std::string write_report(const std::string& input, const std::string& output,
                         const ReportOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path source = fs::is_directory(input, ec) ? fs::path(input) / "compare.json" : fs::path(input);
  const CompareResult result = read_compare_result(source.string());
  const fs::path target = output.empty() ? source.parent_path() / "report.html" : fs::path(output);
  ReportOptions named = options;
  named.source = source.filename().string();
  const std::string page = render_report_html(result, named);

  const fs::path tmp = target.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(tmp.string() + ": cannot create the report file");
    out << page;
    out.close();
    if (!out) throw IoError(tmp.string() + ": write failed");
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw IoError(target.string() + ": cannot rename the finished report into place");
  }
  return target.string();
}

}  // namespace lowbit::eval
