// The HTML report: self-contained, escaped, every section present, numbers written sensibly, and
// "—" for what was not measured. (Rendering is checked in Chromium by tests/report/run.sh.)
#include "eval/report_html.h"

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "eval/report_format.h"
#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixture = std::string(LOWBIT_SOURCE_DIR) + "/tests/report/data/compare_example.json";

json fixture() {
  std::ifstream in(kFixture);
  return json::parse(in);
}

// HTML-escaped, written out here rather than taken from the code under test.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else if (c == '\'') out += "&#39;";
    else out += c;
  }
  return out;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = 0; (pos = text.find(needle, pos)) != std::string::npos; pos += needle.size()) ++n;
  return n;
}

TEST(ReportFormatTest, Numbers) {
  using namespace report;
  EXPECT_EQ(format_bytes(38'500'000), "36.7 MiB");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(10'346'496), "9.87 MiB");
  EXPECT_EQ(format_bytes(1'048'575), "1.00 MiB");  // not "1024 KiB"
  EXPECT_EQ(format_bytes(int64_t{141} << 30), "141 GiB");
  EXPECT_EQ(format_sig(1234.5), "1,235");
  EXPECT_EQ(format_sig(1234567.0), "1,234,567");
  EXPECT_EQ(format_sig(0.0012345), "0.00123");
  EXPECT_EQ(format_sig(99.96), "100");
  EXPECT_EQ(format_sig(12.34), "12.3");
  EXPECT_EQ(format_signed_percent(0.0123), "+1.23%");
  EXPECT_EQ(format_signed_percent(-0.0042), "\xE2\x88\x92" "0.42%");
  EXPECT_EQ(format_signed_percent(0.00012), "+0.012%");
  EXPECT_EQ(format_signed_percent(0.1234), "+12.3%");
  EXPECT_EQ(format_signed_percent(0), "0%");
  EXPECT_EQ(format_signed_percent(-1e-9), "0%");
  EXPECT_EQ(format_percent(0.412), "41.2%");
  EXPECT_EQ(format_ratio(3.14), "3.1\xC3\x97");
  EXPECT_EQ(format_ratio(0.9), "0.90\xC3\x97");
  EXPECT_EQ(format_timestamp("2026-11-29T18:30:00Z"), "2026-11-29 18:30 UTC");
  EXPECT_EQ(format_timestamp("yesterday"), "yesterday");
}

TEST(ReportHtmlTest, FixtureHasEverySectionAndNoExternalResource) {
  const json j = fixture();
  const std::string html = render_report_html(read_compare_result(kFixture));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* id : {"id=\"recommendation\"", "id=\"pitfalls\"", "id=\"results-table\"",
                         "id=\"chart-ppl-size\"", "id=\"chart-kld-size\"", "id=\"chart-decode-size\"",
                         "id=\"chart-prefill-size\"", "id=\"chart-layer-errors\""}) {
    EXPECT_EQ(count(html, id), 1) << id;
  }
  // Self-contained: no script, no stylesheet link, nothing fetched. The only URL is the SVG
  // namespace name, which is never fetched; internal references are url(#...) fragments.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(count(html, "http"), count(html, "http://www.w3.org/2000/svg") + count(html, "http-equiv"));
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
  // One table row per scheme plus the baseline; the recommended one marked in the table, in each
  // of the four scatter charts and in the layer strip.
  EXPECT_EQ(count(html, "<tr"), 1 + 1 + static_cast<int>(j["schemes"].size()));
  EXPECT_EQ(count(html, "<tr class=\"recommended\""), 1);
  EXPECT_EQ(count(html, "class=\"point recommended\""), 4);
  EXPECT_EQ(count(html, "<g class=\"row recommended\""), 1);
  for (const json& s : j["schemes"]) {
    EXPECT_NE(html.find(">" + escaped(s["scheme"].get<std::string>())), std::string::npos) << s["scheme"];
    for (const json& p : s["pitfalls"]) {
      EXPECT_NE(html.find(escaped(p["message"].get<std::string>())), std::string::npos);
    }
  }
}

TEST(ReportHtmlTest, EveryStringFromTheJsonIsEscaped) {
  json j = fixture();
  const std::string evil = "<img src=x onerror=alert(1)>&\"'";
  j["model"] = "models/" + evil;
  j["machine"]["cpu"] = evil;
  j["protocol"]["ppl_text"] = evil;
  j["protocol"]["tasks"] = {evil};
  j["baseline"]["name"] = evil;
  j["schemes"][0]["scheme"] = evil;
  j["schemes"][0]["algo"] = evil;
  j["schemes"][0]["layer_errors"][0]["name"] = evil;
  j["schemes"][0]["pitfalls"] = {{{"kind", evil}, {"message", evil}}};
  j["recommendation"] = {{"scheme", evil}, {"reasons", {evil}}};
  const std::string html = render_report_html(CompareResult::from_json(j, "x"));
  std::string lower = html;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_EQ(lower.find("<img"), std::string::npos);
  EXPECT_EQ(html.find(evil), std::string::npos);
  EXPECT_GE(count(html, "&lt;img src=x onerror=alert(1)&gt;&amp;&quot;&#39;"), 10);
}

TEST(ReportHtmlTest, UnmeasuredValuesShowAsDashAndChartsSaySo) {
  const json j = json::parse(R"({
    "format": "lowbit-compare/1", "model": "m", "created": "2026-11-29T18:30:00Z",
    "protocol": {"ppl_text": "t.txt", "ctx": 512},
    "baseline": {"name": "BF16", "size_bytes": 1000000, "bits_per_weight": 16, "ppl": 10.0},
    "schemes": [{"scheme": "W4A16", "size_bytes": 300000, "bits_per_weight": 4.25, "ppl": 11.0,
                 "delta_ppl": 0.1}]})");
  const std::string html = render_report_html(CompareResult::from_json(j, "x"));
  // Per row: KLD, task accuracy, decode, prefill, peak memory (the baseline's KLD is 0 by
  // definition, so it has one fewer).
  EXPECT_EQ(count(html, "<td>\xE2\x80\x94</td>"), 4 + 5);
  EXPECT_NE(html.find("KL divergence was not measured"), std::string::npos);
  EXPECT_NE(html.find("Decode speed was not measured"), std::string::npos);
  EXPECT_NE(html.find("Per-layer errors were not measured."), std::string::npos);
  EXPECT_NE(html.find("No recommendation"), std::string::npos);
  EXPECT_NE(html.find("No pitfalls detected"), std::string::npos);
  EXPECT_NE(html.find("+10.0%"), std::string::npos);  // ΔPPL still shown
}

TEST(ReportHtmlTest, WriteReportReplacesAtomicallyAndNamesBadInput) {
  const fs::path dir = fs::temp_directory_path() / "lowbit_report_html_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kFixture, dir / "compare.json");
  EXPECT_EQ(write_report(dir.string()), (dir / "report.html").string());
  EXPECT_TRUE(fs::exists(dir / "report.html"));
  EXPECT_FALSE(fs::exists(dir / "report.html.tmp"));
  const std::string other = (dir / "other.html").string();
  EXPECT_EQ(write_report((dir / "compare.json").string(), other), other);
  std::ifstream in(other);
  std::stringstream page;
  page << in.rdbuf();
  EXPECT_NE(page.str().find("from compare.json (lowbit-compare/1)"), std::string::npos);

  fs::create_directories(dir / "empty");
  try {
    write_report((dir / "empty").string());
    FAIL() << "no error without compare.json";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "empty" / "compare.json").string()), std::string::npos);
  }
  json bad = fixture();
  bad["baseline"].erase("ppl");
  std::ofstream(dir / "empty" / "compare.json") << bad.dump();
  try {
    write_report((dir / "empty").string());
    FAIL() << "no error for a missing baseline.ppl";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("compare.json: baseline.ppl: is required"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "empty" / "report.html"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lowbit::eval
