// The report's stylesheet, inline in the page. System fonts only (no downloads); sized for a
// 1280-pixel window and for print.
#include "eval/report_style.h"

namespace lowbit::eval::report {

const char* stylesheet() {
  return R"css(
:root { --ink: #111827; --muted: #4b5563; --faint: #6b7280; --line: #e5e7eb; --page: #f3f4f6; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--page); color: var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans",
        "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1220px; margin: 0 auto; padding: 24px 24px 36px; }
h1 { font-size: 28px; line-height: 1.2; margin: 0 0 4px; letter-spacing: -0.01em; }
h2 { font-size: 19px; margin: 0 0 4px; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono",
  monospace; font-size: 0.92em; }
header .model { color: var(--muted); margin: 0 0 16px; word-break: break-all; }
section, header { background: #fff; border: 1px solid var(--line); border-radius: 10px;
  padding: 18px 24px; margin: 0 0 16px; }
.meta { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 6px 24px; margin: 0; }
.meta div { min-width: 0; }
.meta .wide { grid-column: span 2; }
.top { display: grid; grid-template-columns: minmax(0, 1.3fr) minmax(0, 1fr); gap: 16px;
  align-items: stretch; margin: 0 0 16px; }
.top > section { margin: 0; }
.meta dt { font-size: 12px; text-transform: uppercase; letter-spacing: 0.06em; color: var(--faint); }
.meta dd { margin: 0; overflow-wrap: anywhere; }
.lede { color: var(--muted); margin: 0 0 12px; max-width: 80ch; }
.recommendation { border-left: 8px solid var(--accent, #0072B2); }
.recommendation .verdict { font-size: 26px; font-weight: 700; margin: 2px 0 2px; }
.recommendation .verdict svg.marker { width: 20px; height: 20px; vertical-align: -1px; }
.recommendation .summary { font-size: 16px; color: var(--muted); margin: 0 0 8px; }
.recommendation ul { margin: 6px 0 0; padding-left: 22px; }
.callouts { display: grid; gap: 10px; }
.callout { border-radius: 8px; padding: 10px 14px; border-left: 5px solid; }
.callout.warn { background: #fff4ec; border-color: #D55E00; }
.callout.ok { background: #ecf8f3; border-color: #009E73; }
.callout strong { display: block; }
.callout .icon { font-weight: 700; margin-right: 6px; }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
th { font-size: 12.5px; text-align: right; color: var(--muted); font-weight: 600;
  border-bottom: 2px solid #d1d5db; padding: 6px 10px; vertical-align: bottom; }
td { text-align: right; padding: 8px 10px; border-bottom: 1px solid var(--line); vertical-align: top;
  white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
td:first-child { font-weight: 600; }
td .sub { display: block; font-size: 12px; color: var(--faint); font-weight: 400; }
tr.baseline td { background: #f9fafb; }
tr.recommended td { background: #eef6fc; }
tr.recommended td:first-child { box-shadow: inset 4px 0 0 var(--accent, #0072B2); }
.badge { display: inline-block; font-size: 11px; font-weight: 600; letter-spacing: 0.03em;
  padding: 1px 7px; border-radius: 999px; background: #111827; color: #fff; vertical-align: 1px; }
.badge.light { background: #e5e7eb; color: #374151; }
.note { font-size: 12.5px; color: var(--faint); margin: 10px 0 0; }
.figures { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px; }
figure { margin: 0; }
figcaption { font-weight: 600; font-size: 14.5px; margin: 0 0 4px; }
svg.chart { display: block; width: 100%; height: auto; }
svg.marker { vertical-align: -2px; margin-right: 6px; }
ul.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 20px; padding: 0;
  margin: 0 0 10px; font-size: 14px; }
.empty { color: var(--faint); font-style: italic; }
footer { color: var(--faint); font-size: 12.5px; text-align: center; }
@media (max-width: 900px) {
  .figures, .top { grid-template-columns: 1fr; }
  .meta { grid-template-columns: repeat(2, minmax(0, 1fr)); }
}
@media print {
  @page { margin: 12mm; }
  body { background: #fff; font-size: 11pt; }
  main { max-width: none; padding: 0; }
  section, header { border: none; padding: 0; margin: 0 0 14pt; break-inside: avoid; }
  .recommendation { padding-left: 10pt; }
  tr.recommended td, tr.baseline td, .callout { -webkit-print-color-adjust: exact;
    print-color-adjust: exact; }
}
)css";
}

}  // namespace lowbit::eval::report
