// `lowbit report DIR`: one self-contained HTML page from DIR/compare.json (compare_result.h).
// The page needs no network: styles are inline, charts are inline SVG (svg_chart.h), there is no
// script, and a Content-Security-Policy forbids loading anything from elsewhere. Every string from
// the JSON is escaped. docs/report.md describes the page and the schema.
#pragma once

#include <string>

#include "eval/compare_result.h"

namespace lowbit::eval {

struct ReportOptions {
  std::string generator = "lowbit";  // named in the page's footer
  std::string source = "compare.json";  // the input, named in the footer
};

// The whole page: header (model, machine, date, protocol), recommendation, pitfalls, the table,
// accuracy-vs-size and speed-vs-size charts, the per-layer error strip.
std::string render_report_html(const CompareResult& result, const ReportOptions& options = {});

// Reads `input` (a directory holding compare.json, or the file itself), writes the page to
// `output` (default: report.html beside compare.json) through output.tmp and a rename, and
// returns the path written. InvalidArgument names the file and field of a bad compare.json.
std::string write_report(const std::string& input, const std::string& output = "",
                         const ReportOptions& options = {});

}  // namespace lowbit::eval
