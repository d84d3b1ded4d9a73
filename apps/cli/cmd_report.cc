// lowbit report DIR [-o FILE]: the HTML page of a `lowbit compare` run (src/eval/report_html.h).
#include <cstdio>

#include "command.h"
#include "eval/report_html.h"

namespace lowbit::cli {
namespace {

struct ReportOptions {
  std::string input;
  std::string output;
};

int run_report(const ReportOptions& options) {
  eval::ReportOptions report;
  report.generator = "lowbit 0.1.0";
  const std::string written = eval::write_report(options.input, options.output, report);
  std::printf("wrote %s\n", written.c_str());
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* sub = app.add_subcommand(
      "report", "One self-contained HTML page (tables and SVG charts) from a `lowbit compare` run");
  sub->add_option("dir", options->input, "The compare output directory (or its compare.json)")
      ->required();
  sub->add_option("-o,--output", options->output, "HTML file to write (default: DIR/report.html)");
  commands.push_back({sub, [options] { return run_report(*options); }});
}

}  // namespace lowbit::cli
