#!/usr/bin/env python3
"""Checks a `lowbit report` page in headless Chromium (standard library only).

  check_report.py --chromium PATH --report report.html --out DIR

1. Negative controls first: pages with an uncaught exception, a console.error, an external image
   (blocked by the report's CSP), an external stylesheet (no CSP: the request is seen), a hidden
   chart and invisible markers. Each must be caught by the check meant for it, or the
   checks below would prove nothing.
2. The report: it loads with no exception, console message, CSP violation or network request; the
   charts and the table have non-zero boxes; every chart's markers and every heat-strip color
   named in the DOM are on the screen (found in screenshots of the chart regions, decoded here).
3. Writes DIR/report-1280x2000.png (the viewport) and DIR/report-full.png (the whole page, as a
   palette PNG small enough for docs/report-example.png).
"""
import argparse
import base64
import pathlib
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cdp  # noqa: E402
import png  # noqa: E402

CHARTS = ["chart-ppl-size", "chart-kld-size", "chart-decode-size", "chart-prefill-size"]
STRIP = "chart-layer-errors"
BLOCKS = ["recommendation", "results-table"]
# Okabe & Ito's palette (without yellow) and black for the baseline: the report promises
# colorblind-safe series colors.
OKABE_ITO = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"}

# Runs in the page: boxes of the checked elements in page coordinates, and the colors the DOM
# says each chart draws.
PROBE = r"""
(() => {
  const box = el => { const r = el.getBoundingClientRect();
    return {x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height}; };
  const out = {};
  for (const id of %s) {
    const el = document.getElementById(id);
    if (!el) { out[id] = null; continue; }
    const info = box(el);
    info.markers = [...el.querySelectorAll('g.point')].map(g => {
      const shape = g.lastElementChild;
      const fill = shape.getAttribute('fill'), stroke = shape.getAttribute('stroke');
      return Object.assign(box(shape), {color: (fill === '#ffffff' ? stroke : fill).toLowerCase(),
                                        recommended: g.classList.contains('recommended')});
    });
    info.cells = [...new Set([...el.querySelectorAll('g.row rect')]
      .map(r => (r.getAttribute('fill') || '').toLowerCase()).filter(f => f.startsWith('#')))];
    out[id] = info;
  }
  return out;
})()
"""


def hex_rgb(color):
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def probe(browser):
    return browser.evaluate(PROBE % (CHARTS + [STRIP] + BLOCKS))


def layout_problems(boxes):
    found = []
    for element_id in CHARTS + [STRIP] + BLOCKS:
        info = boxes.get(element_id)
        if info is None:
            found.append("#%s is missing" % element_id)
        elif info["w"] < 50 or info["h"] < 50:
            found.append("#%s has an empty box (%.0fx%.0f)" % (element_id, info["w"], info["h"]))
        elif element_id in CHARTS:
            drawn = [m for m in info["markers"] if m["w"] > 0 and m["h"] > 0]
            if not drawn:
                found.append("#%s draws no markers" % element_id)
            for m in info["markers"]:
                if m["color"] not in OKABE_ITO:
                    found.append("#%s: marker color %s is not in the palette" % (element_id, m["color"]))
    return found


def overlap(a, b):
    w = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
    h = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
    return w * h if w > 0 and h > 0 else 0


def clip(browser, info):
    data = browser.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True,
                        clip={"x": info["x"], "y": info["y"], "width": info["w"], "height": info["h"],
                              "scale": 1})["data"]
    return png.decode(base64.b64decode(data))


def pixel_problems(browser, boxes):
    """Every color the DOM says a chart draws must be on the screen in that chart's region."""
    found = []
    for element_id in CHARTS + [STRIP]:
        info = boxes.get(element_id)
        if not info or info["w"] < 1 or info["h"] < 1:
            continue
        image = clip(browser, info)
        # Two checkpoints of about the same size and accuracy (FP8 and INT8 at 8 bits) honestly
        # share a spot: a marker mostly under a later one cannot be expected on screen.
        markers = info["markers"]
        colors = {m["color"] for i, m in enumerate(markers)
                  if not any(overlap(m, later) > 0.3 * m["w"] * m["h"] for later in markers[i + 1:])}
        colors |= set(info["cells"])
        for color in sorted(colors):
            # A marker is about 13 px across (over 100 px of its color inside the white outline);
            # a heat cell is at least 26 px tall. 15 pixels rules out antialiasing and text alone.
            count = image.count_color(hex_rgb(color), tolerance=6)
            if count < 15:
                found.append("#%s: color %s is in the DOM but only %d pixels on screen"
                             % (element_id, color, count))
    return found


def inject(html, where, text):
    assert where in html, where
    return html.replace(where, where + text, 1)


def negative_controls(browser, report_html, out):
    """(page, the check that must catch it)."""
    plain = "<!DOCTYPE html><html><head><title>control</title></head><body><p>control</p>%s</body></html>"
    controls = [
        ("js-error", plain % "<script>window.notAFunction();</script>", "console"),
        ("console-error", plain % "<script>console.error('deliberate');</script>", "console"),
        ("external-image", inject(report_html, "<body>",
                                  "<img src=\"https://example.invalid/logo.png\" alt=\"\">"), "console"),
        # Without the report's Content-Security-Policy: the request itself must be seen.
        ("external-css", plain % "<link rel=\"stylesheet\" href=\"https://example.invalid/a.css\">",
         "console"),
        ("hidden-chart", inject(report_html, "<style>", "#chart-kld-size{display:none}"), "layout"),
        ("invisible-markers", inject(report_html, "<style>", "g.point{visibility:hidden}"), "pixels"),
    ]
    failures = []
    for name, html, check in controls:
        path = out / ("control-%s.html" % name)
        path.write_text(html, encoding="utf-8")
        browser.load(path.as_uri())
        if check == "console":
            found = browser.problems()
        else:
            boxes = probe(browser)
            found = layout_problems(boxes) if check == "layout" else pixel_problems(browser, boxes)
        status = "caught" if found else "NOT CAUGHT"
        print("negative control %-18s %s%s" % (name, status, (": " + found[0]) if found else ""))
        if not found:
            failures.append("negative control %s was not detected by the %s check" % (name, check))
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--report", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report_html = args.report.read_text(encoding="utf-8")

    with cdp.Browser(args.chromium, width=1280, height=2000) as browser:
        failures = negative_controls(browser, report_html, args.out)

        browser.load(args.report.resolve().as_uri())
        problems = browser.problems()
        for p in problems:
            print("console/network problem:", p)
        failures += problems
        boxes = probe(browser)
        failures += layout_problems(boxes)
        failures += pixel_problems(browser, boxes)
        recommended = [i for i in CHARTS if boxes.get(i) and any(m["recommended"] for m in boxes[i]["markers"])]
        print("charts with the recommendation highlighted: %s" % ", ".join(recommended))

        viewport = browser.screenshot()
        (args.out / "report-1280x2000.png").write_bytes(viewport)
        width, height = png.size(viewport)
        if (width, height) != (1280, 2000):
            failures.append("viewport screenshot is %dx%d, not 1280x2000" % (width, height))
        in_view = [i for i in CHARTS if boxes.get(i) and boxes[i]["y"] + boxes[i]["h"] <= 2000]
        print("charts inside the 1280x2000 screenshot: %s" % ", ".join(in_view))
        # The whole page as a palette PNG (docs/report-example.png is this file).
        full = png.decode(browser.screenshot(full_page=True))
        (args.out / "report-full.png").write_bytes(png.encode_indexed(full))

    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("report OK: %d charts and the layer strip rendered, no console errors; screenshots in %s"
          % (len(CHARTS), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
